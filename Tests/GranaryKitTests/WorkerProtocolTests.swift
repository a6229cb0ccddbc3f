import Foundation
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

@Suite("the worker protocol: fields checked as bytes, paths only the run's own")
struct WorkerProtocolTests {
    /// Feeds `bytes` to the parent's reader through a real pipe, as a worker's standard output.
    static func feed(_ bytes: [UInt8]) throws -> (String?, [FailedMirror], MirrorHandOver?) {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let written = bytes.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) }
        try #require(written == bytes.count)
        close(ends[1])
        defer { close(ends[0]) }
        return UserWorkers.read(ends[0], from: getpid(), user: try UserID("alice"), progress: nil)
    }

    @Test("a mirror's reason holding CRLF (one Swift Character) cannot start a line of its own")
    func crlfReason() throws {
        let mirror = FailedMirror(
            location: "rclone:m\r\n", code: 74, reason: "timeout\r\nM\t1\tx.tar.zst\t/etc/shadow\u{85}\u{7F}")
        let line = mirror.line
        #expect(!line.utf8.contains { $0 < 0x20 && $0 != 0x09 || $0 == 0x7F }, "\(line.debugDescription)")
        #expect(!line.unicodeScalars.contains { $0.value == 0x85 })
        let (_, failed, handedOver) = try Self.feed(Array((line + "\nR\t{}\n").utf8))
        #expect(handedOver == nil)
        #expect(failed.count == 1)
    }

    @Test("a line holding a control byte is not taken, whatever follows it; R comes through")
    func hostileBytes() throws {
        let hostile = "F\tloc\t74\treason\r\nM\t1\tx.tar.zst\t/etc/shadow\u{1B}\nP\tsnap\u{0}\t1\t2\nR\t{\"ok\":true}\n"
        let (result, failed, handedOver) = try Self.feed(Array(hostile.utf8))
        #expect(failed.isEmpty)
        #expect(handedOver == nil)
        #expect(result == "{\"ok\":true}")
    }

    @Test("a handed-over path is acted on only inside the run's scratch folder, or as the archive's own file")
    func paths() throws {
        let (_, _, handedOver) = try Self.feed(Array("M\t1\tx.tar.zst\t/etc/shadow\nR\t{}\n".utf8))
        let handOver = try #require(handedOver, "a well-formed line")
        #expect(!handOver.isAccepted(staging: "/repo/.granary-tmp/work"))
        let made = "/repo/.granary-tmp/work/" + FileSystem.temporaryName(for: "mirror")
        let inside = MirrorHandOver(archive: "x.tar.zst", path: made, removeAfter: true)
        #expect(inside.isAccepted(staging: "/repo/.granary-tmp/work"))
        for path in [
            "/repo/.granary-tmp/work/../../../etc/shadow", "/repo/.granary-tmp/work/sub/file",
            "/repo/.granary-tmp/work/", "repo/.granary-tmp/work/x",
            // A local repository's scratch folder for the user is their archive folder: an
            // archive there is not the worker's to have removed.
            "/repo/.granary-tmp/work/20260101T000000.000000Z.tar.zst", "/repo/.granary-tmp/work/.mirror.tmp-",
            "/repo/.granary-tmp/work/.mirror.1",
        ] {
            #expect(
                !MirrorHandOver(archive: "x", path: path, removeAfter: true).isAccepted(
                    staging: "/repo/.granary-tmp/work"), "\(path)")
        }
        let published = MirrorHandOver(archive: "x.tar.zst", path: "/repo/alice/x.tar.zst", removeAfter: false)
        #expect(published.isAccepted(staging: nil, published: "/repo/alice/x.tar.zst"))
        #expect(!published.isAccepted(staging: nil, published: "/repo/alice/y.tar.zst"))
        #expect(MirrorHandOver(line: "M\t0\t../x\t/repo/alice/x") == nil)
    }
}
