import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A test's owner process that logs one line per event to the file `log` (`READY`,
/// `ACK <id>[ …]` once a COMMIT returned, …): the demo owner, the Python misbehaving owner and
/// the owner in C all do. What a test reads from that log is written once, here.
protocol OwnerLog {
    var log: String { get }
}

extension OwnerLog {
    /// The log's lines so far.
    var lines: [String] {
        (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
    }

    /// The ids written into the new store between granary's rename and RESUME.
    var ackedAfterSwap: Set<Int64> {
        Set(
            lines.compactMap {
                $0.hasPrefix("ACK ") && $0.hasSuffix(" post-swap") ? Int64($0.split(separator: " ")[1]) : nil
            })
    }

    /// Waits (up to 30 s) until `condition` holds for the log's lines.
    func waitFor(_ condition: ([String]) -> Bool) throws {
        for _ in 0..<3000 {
            if condition(lines) { return }
            usleep(10_000)
        }
        throw DemoOwnerError.timedOut(lines.suffix(5).joined(separator: "\n"))
    }

    /// Waits until `count` more writes are acknowledged than now.
    func waitForMoreWrites(_ count: Int) throws {
        let now = lines.filter { $0.hasPrefix("ACK ") }.count
        try waitFor { lines in lines.filter { $0.hasPrefix("ACK ") }.count >= now + count }
    }
}
