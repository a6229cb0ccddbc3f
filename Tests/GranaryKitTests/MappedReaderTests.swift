import Foundation
import GranaryDigest
import Testing

@testable import GranaryKit

/// `MappedReader` and `FileDigest`'s mapped path, on real files.
@Suite("mapped reads")
struct MappedReaderTests {
    /// A file of `size` random bytes; its bytes.
    static func randomFile(_ path: String, size: Int) throws -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return bytes
    }

    @Test(
        "pieces of any range, from any offset, come in order and match the file",
        arguments: [0, 1, 512, 4095, 4096, 1_000_000])
    func ranges(from: Int) throws {
        let folder = TemporaryFolder()
        let path = folder.child("f")
        let bytes = try Self.randomFile(path, size: (3 << 20) + 123)
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        for (to, window) in [(bytes.count, MappedReader.window), (bytes.count - 5000, 64 << 10), (from + 10, 4096)] {
            var seen: [UInt8] = []
            var pieces = 0
            try MappedReader.read(fd, from: Int64(from), to: Int64(to), path: path, window: window) { piece in
                #expect(piece.count <= window)
                seen += piece
                pieces += 1
                return true
            }
            #expect(seen == Array(bytes[from..<to]), "from \(from) to \(to) by \(window)")
            #expect(pieces >= (to - from) / window)
        }
        // Stopping early stops.
        var pieces = 0
        try MappedReader.read(fd, from: Int64(from), to: Int64(bytes.count), path: path, window: 4096) { _ in
            pieces += 1
            return pieces < 3
        }
        #expect(pieces == 3)
    }

    @Test("a mapped digest and a read one agree with each other and with sha256sum")
    func digest() throws {
        let folder = TemporaryFolder()
        for size in [0, 1, (1 << 20) - 1, (2 << 20) + 7] {
            let path = folder.child("f\(size)")
            let bytes = try Self.randomFile(path, size: size)
            let mapped = try FileDigest.of(path, mapped: true)
            let read = try FileDigest.of(path)
            #expect(mapped.size == Int64(size) && read.size == Int64(size))
            #expect(mapped.sha256 == read.sha256)
            #expect(mapped.sha256 == SHA256.hash(data: bytes).hex)
            let sum = try OverlappedPackTests.run("/usr/bin/sha256sum", [path])
            #expect(sum.hasPrefix(mapped.sha256))
        }
    }
}
