import Foundation

/// How long a remote operation may take before it fails, and how often it is tried
/// (`[remote]` in granary.toml(5), ``RunContext/remote``); given to every rclone run as its own flags.
///
/// - `connect_timeout` (rclone `--contimeout`): a connection that is not made within it fails;
/// - `timeout` (rclone `--timeout`): a connection on which nothing moves for this long (no first
///   byte of an answer, or a transfer that stalls) fails;
/// - `low_level_retries`: each request is tried this often before the operation fails;
/// - `retries` (rclone `--retries`, with `--retries-sleep` growing): the whole operation (an
///   upload, a listing) is tried this often; a download is resumed where it stopped as often.
///
/// So a remote that accepts and never answers fails one operation within
/// ``bound`` = retries × low_level_retries × (connect_timeout + timeout) + the sleeps between
/// tries, whatever the archive's size; a remote that answers an error fails sooner. rclone's own
/// `RCLONE_CONTIMEOUT`, `RCLONE_TIMEOUT`, `RCLONE_RETRIES` and `RCLONE_LOW_LEVEL_RETRIES`, when
/// set in granary's environment, take the place of the matching setting.
public struct RemoteLimits: Sendable, Equatable {
    public var connectTimeout: Duration = .seconds(10)
    public var timeout: Duration = .seconds(30)
    public var retries = 2
    public var lowLevelRetries = 2

    public init() {}

    public static let defaults = RemoteLimits()

    /// The pause before try `n` (1: the second try) of a whole operation: 1 s, 2 s, 4 s, … up to 8 s.
    public static func backoff(try n: Int) -> Duration { .seconds(min(8, 1 << max(0, n - 1))) }

    /// The longest one remote operation can hang, in seconds, with these limits.
    public var bound: Double {
        let attempt = (connectTimeout + timeout).timeInterval * Double(lowLevelRetries)
        let sleeps = (1..<max(1, retries)).reduce(0.0) { $0 + Self.backoff(try: $1).timeInterval }
        return attempt * Double(retries) + sleeps
    }

    /// These limits as rclone will run with them: rclone's own `RCLONE_CONTIMEOUT`,
    /// `RCLONE_TIMEOUT`, `RCLONE_RETRIES` and `RCLONE_LOW_LEVEL_RETRIES` in `environment` take the
    /// place of the matching setting (a value granary cannot read leaves the setting).
    func effective(environment: [String: String]) -> RemoteLimits {
        var limits = self
        if let text = environment["RCLONE_CONTIMEOUT"], let value = Self.goDuration(text) {
            limits.connectTimeout = value
        }
        if let text = environment["RCLONE_TIMEOUT"], let value = Self.goDuration(text) { limits.timeout = value }
        if let text = environment["RCLONE_RETRIES"], let value = Int(text) { limits.retries = max(1, value) }
        if let text = environment["RCLONE_LOW_LEVEL_RETRIES"], let value = Int(text) {
            limits.lowLevelRetries = max(1, value)
        }
        return limits
    }

    /// A Go duration as rclone takes it (`90s`, `1m30s`, `500ms`, `1.5h`); nil for anything else.
    static func goDuration(_ text: String) -> Duration? {
        var total = 0.0
        var rest = Substring(text)
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isNumber || $0 == "." }
            guard let value = Double(number) else { return nil }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isLetter }
            rest = rest.dropFirst(unit.count)
            switch unit {
            case "h": total += value * 3600
            case "m": total += value * 60
            case "s": total += value
            case "ms": total += value / 1000
            default: return nil
            }
        }
        return .milliseconds(Int64(total * 1000))
    }

    /// rclone's flags for these limits, leaving out those the environment sets itself.
    func flags(environment: [String: String]) -> [String] {
        var flags: [String] = []
        func seconds(_ duration: Duration) -> String {
            String(format: "%.3fs", duration.timeInterval)
        }
        if environment["RCLONE_CONTIMEOUT"] == nil { flags += ["--contimeout", seconds(connectTimeout)] }
        if environment["RCLONE_TIMEOUT"] == nil { flags += ["--timeout", seconds(timeout)] }
        if environment["RCLONE_LOW_LEVEL_RETRIES"] == nil { flags += ["--low-level-retries", String(lowLevelRetries)] }
        if environment["RCLONE_RETRIES"] == nil {
            flags += ["--retries", String(retries), "--retries-sleep", "1s"]
        }
        return flags
    }

    /// How many tries the environment or these limits give a whole operation.
    func operationTries(environment: [String: String]) -> Int {
        environment["RCLONE_RETRIES"].flatMap { Int($0) }.map { max(1, $0) } ?? max(1, retries)
    }
}
