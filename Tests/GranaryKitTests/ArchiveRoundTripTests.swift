import Foundation
import GranaryDigest
import GranaryKit
import GranaryTestSupport
import Testing

@testable import GranaryCLI

@Suite("Archive writer and reader")
struct ArchiveRoundTripTests {
    /// `bytes` saved as `big.bin` in `folder`, and a writer (two zstd workers) on a new archive `NAME.tar…` beside it.
    func startArchive(
        _ folder: TemporaryFolder, _ bytes: [UInt8], _ name: String, _ compression: Compression
    ) throws -> (source: String, path: String, fd: Int32, writer: ArchiveWriter) {
        let source = folder.child("big.bin")
        try Data(bytes).write(to: URL(fileURLWithPath: source))
        let path = folder.child(name + compression.fileExtension)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        do {
            return (
                source, path, fd,
                try ArchiveWriter(fileDescriptor: fd, path: path, compression: compression, threads: 2)
            )
        } catch {
            close(fd)
            throw error
        }
    }

    /// Writes a manifest, a 3 MiB file (several writer chunks) and a folder, and returns the archive path.
    func writeSample(_ folder: TemporaryFolder, _ compression: Compression) throws -> (path: String, big: [UInt8]) {
        var big = [UInt8](repeating: 0, count: 3 << 20 + 17)
        var state: UInt32 = 2_463_534_242
        for i in big.indices {
            state ^= state << 13; state ^= state >> 17; state ^= state << 5
            big[i] = i % 3 == 0 ? UInt8(truncatingIfNeeded: state) : UInt8(i % 251)
        }
        let (source, path, fd, writer) = try startArchive(folder, big, "sample", compression)
        defer { close(fd) }
        try writer.addData(member: "MANIFEST.json", bytes: Array("{\"format\":1}\n".utf8))
        try writer.addDirectory(member: "stores/")
        var chunks = 0
        try writer.addFile(member: "stores/big.bin", from: source) { _ in
            chunks += 1
            return true
        }
        try writer.finish()
        #expect(chunks == 4)
        return (path, big)
    }

    @Test("what the writer packs the reader gets back, byte for byte", arguments: Compression.allCases)
    func roundTrip(compression: Compression) throws {
        let folder = TemporaryFolder()
        let (path, big) = try writeSample(folder, compression)
        let reader = try ArchiveReader(path: path)
        let first = try #require(try reader.next())
        #expect(first.name == "MANIFEST.json")
        #expect(try reader.readAll(limit: 1024) == Array("{\"format\":1}\n".utf8))
        #expect(reader.filterName == (compression == .none ? "none" : compression.rawValue))
        let dir = try #require(try reader.next())
        #expect(dir.kind == .directory)
        let file = try #require(try reader.next())
        #expect(file.name == "stores/big.bin")
        #expect(file.kind == .regular)
        #expect(file.size == Int64(big.count))
        var hasher = SHA256()
        let read = try reader.stream(limit: file.size) { hasher.update(bufferPointer: $0) }
        #expect(read == Int64(big.count))
        #expect(hasher.finalize() == SHA256.hash(data: big))
        #expect(try reader.next() == nil)
    }

    @Test("stock tar lists and extracts what the writer packs", arguments: Compression.allCases)
    func stockTarReadsIt(compression: Compression) throws {
        let folder = TemporaryFolder()
        let (path, big) = try writeSample(folder, compression)
        let out = folder.child("out")
        try FileSystem.makeDirectory(out)
        let list = try run("/usr/bin/tar", ["-tf", path])
        #expect(list.split(separator: "\n") == ["MANIFEST.json", "stores/", "stores/big.bin"])
        _ = try run("/usr/bin/tar", ["-xf", path, "-C", out])
        #expect(try Data(contentsOf: URL(fileURLWithPath: out + "/stores/big.bin")) == Data(big))
        #expect(try String(contentsOfFile: out + "/MANIFEST.json", encoding: .utf8) == "{\"format\":1}\n")
    }

    @Test("zstd with two workers: a file of several 4 MiB jobs comes back whole, and every frame has zstd's checksum")
    func zstdJobs() throws {
        let (folder, path, big) = try writeBig(.zstd)
        defer { withExtendedLifetime(folder) {} }
        let reader = try ArchiveReader(path: path)
        let file = try #require(try reader.next())
        var hasher = SHA256()
        #expect(try reader.stream(limit: file.size) { hasher.update(bufferPointer: $0) } == Int64(big.count))
        #expect(hasher.finalize() == SHA256.hash(data: big))
        #expect(try reader.next() == nil)
        // Stock zstd checks the content checksum (-v lists it as "XXH64").
        let listing = try run("/usr/bin/zstd", ["-lv", path])
        #expect(listing.contains("XXH64"), "\(listing)")
        _ = try run("/usr/bin/zstd", ["-t", "-q", path])
    }

    @Test("an uncompressed archive past several writeback steps (8 MiB) is whole, as stock tar sees it")
    func writebackSteps() throws {
        let (folder, path, big) = try writeBig(.none)
        #expect(FileSystem.size(path) > 16 << 20, "two writeback steps of 8 MiB")
        let out = folder.child("out")
        try FileSystem.makeDirectory(out)
        _ = try run("/usr/bin/tar", ["-xf", path, "-C", out])
        #expect(try Data(contentsOf: URL(fileURLWithPath: out + "/big.bin")) == Data(big))
    }

    /// A 21 MiB file, half compressible (several zstd jobs, several writeback steps), packed alone.
    func writeBig(_ compression: Compression) throws -> (TemporaryFolder, String, [UInt8]) {
        let folder = TemporaryFolder()
        var big = [UInt8](repeating: 0, count: 21 << 20)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        big.withUnsafeMutableBytes { bytes in
            let words = bytes.bindMemory(to: UInt64.self)
            for i in words.indices {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                words[i] = i % 2 == 0 ? state : UInt64(i)
            }
        }
        let (source, path, fd, writer) = try startArchive(folder, big, "big", compression)
        defer { close(fd) }
        try writer.addFile(member: "big.bin", from: source)
        try writer.finish()
        return (folder, path, big)
    }

    @Test("a file that is not an archive is refused as malformed")
    func notAnArchive() throws {
        let folder = TemporaryFolder()
        let path = folder.child("x.tar.zst")
        try Data(String(repeating: "hello ", count: 1000).utf8).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: ArchiveError.self) {
            let reader = try ArchiveReader(path: path)
            _ = try reader.next()
        }
        #expect(error?.status == .dataError)
        #expect(error?.description.contains(path) == true)
    }

    @Test("a truncated archive fails while reading, not silently")
    func truncated() throws {
        let folder = TemporaryFolder()
        let (path, _) = try writeSample(folder, .zstd)
        let size = FileSystem.size(path)
        #expect(truncate(path, off_t(size / 2)) == 0)
        let reader = try ArchiveReader(path: path)
        #expect(throws: ArchiveError.self) {
            while let entry = try reader.next() {
                try reader.stream(limit: entry.size) { _ in }
            }
        }
    }

    @Test("readAll refuses a member larger than its limit")
    func limit() throws {
        let folder = TemporaryFolder()
        let (path, _) = try writeSample(folder, .gzip)
        let reader = try ArchiveReader(path: path)
        _ = try reader.next()
        _ = try reader.readAll(limit: 100)
        _ = try reader.next()
        _ = try reader.next()
        let error = #expect(throws: ArchiveError.self) { try reader.readAll(limit: 1000) }
        #expect(error?.description.contains("stores/big.bin") == true)
    }

    @Test("a missing archive is reported as not found")
    func missing() throws {
        let error = #expect(throws: ArchiveError.self) { try ArchiveReader(path: "/nonexistent/a.tar.zst") }
        #expect(error?.status == .notFound)
    }

    @discardableResult
    func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readAllRetryingInterrupts()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(tool) \(arguments) failed")
        return String(decoding: data, as: UTF8.self)
    }
}

@Suite("manifest checksum")
struct ManifestChecksumTests {
    static func sample() -> Manifest {
        Manifest(
            user: "alice@example.com", host: "h", created: Date(timeIntervalSince1970: 1_700_000_000), label: nil,
            compression: .zstd, stores: [],
            files: [
                Manifest.File(path: "stores/a.sqlite", size: 1, sha256: String(repeating: "0", count: 64), kind: .store)
            ])
    }

    @Test("an encoded manifest carries the SHA-256 of its own bytes and decodes back")
    func roundTrip() throws {
        let bytes = Self.sample().encoded()
        let decoded = try Manifest.decode(bytes, source: "test")
        #expect(decoded.checksum?.count == 64)
        #expect(decoded.user == "alice@example.com")
    }

    @Test("a flipped bit anywhere in an encoded manifest that still parses is reported as damage")
    func flips() throws {
        let bytes = Self.sample().encoded()
        var caught = 0
        for offset in bytes.indices {
            var bad = bytes
            bad[offset] ^= 0x01
            do {
                _ = try Manifest.decode(bad, source: "test")
                Issue.record("a flip at \(offset) went unnoticed")
            } catch {
                caught += 1
            }
        }
        #expect(caught == bytes.count)
    }
}
