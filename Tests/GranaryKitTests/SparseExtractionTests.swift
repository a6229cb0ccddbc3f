import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

#if canImport(Glibc)
    import Glibc
#endif

/// Files of zeros (a sparse file a user made with `truncate`) cost their non-zero blocks
/// wherever granary writes them: the verifier's extraction (verify's folder, a restore's
/// staging) leaves holes as the backup's copy does; and a restore's staging checks the room its
/// files need before it writes any.
@Suite("sparse files and the room extraction needs")
struct SparseExtractionTests {
    /// Bytes the file takes on disk.
    static func allocated(_ path: String) -> Int64 { Int64(FileSystem.status(path)?.st_blocks ?? -1) * 512 }

    /// A file of `length` bytes that is a hole but for `marker` at each of `offsets`.
    static func sparseFile(_ path: String, length: Int64, marker: String, at offsets: [Int64]) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        defer { close(fd) }
        for offset in offsets {
            _ = Array(marker.utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        }
        #expect(ftruncate(fd, off_t(length)) == 0)
    }

    /// An archive of one store and one external-data file, `attachment`, written by libarchive.
    static func archive(_ folder: TemporaryFolder, attachment: String) throws -> String {
        let store = folder.child("Notes.sqlite")
        let entry = try TestArchive.store(at: store)
        let fileDigest = try FileDigest.of(attachment)
        let external = TestArchive.external
        let path = folder.child("archive.tar.zst")
        let photo = Manifest.File(
            path: external + "photo", size: fileDigest.size, sha256: fileDigest.sha256, kind: .external, mode: 0o600)
        try TestArchive.write(to: path, store: entry, files: [photo]) { writer in
            try writer.addFile(member: "stores/Notes.sqlite", from: store)
            try writer.addFile(member: external + "photo", from: attachment)
        }
        return path
    }

    @Test(
        "a 256 MiB attachment of zeros but for three markers is extracted with holes: the same bytes, a few KiB on disk",
        arguments: [false, true])
    func holesOnExtraction(durable: Bool) throws {
        let folder = TemporaryFolder()
        let attachment = folder.child("photo")
        let length: Int64 = 256 << 20
        // One marker straddles a block boundary, one ends the file.
        try Self.sparseFile(attachment, length: length, marker: "MARKER", at: [0, (100 << 20) + 4093, length - 6])
        let archive = try Self.archive(folder, attachment: attachment)
        let into = folder.child("into")
        try FileSystem.makeDirectory(into)
        let outcome = try ArchiveVerifier.extract(archive: archive, into: into, check: .full, durable: durable)
        #expect(outcome.checks == ["Notes.sqlite": "ok"])
        let extracted = into + "/stores/.Notes_SUPPORT/_EXTERNAL_DATA/photo"
        #expect(FileSystem.status(extracted)?.st_size == off_t(length))
        #expect(Self.allocated(extracted) < 1 << 20, "the extracted copy takes \(Self.allocated(extracted)) bytes")
        #expect(try FileDigest.of(extracted).sha256 == (try FileDigest.of(attachment).sha256))
        // The store, whose pages are not zeros, is written whole.
        let store = into + "/stores/Notes.sqlite"
        #expect(Self.allocated(store) >= Int64(FileSystem.status(store)!.st_size))
    }

    @Test("the backup's copy of a user's file leaves holes block by block, not only where a whole MiB is zeros")
    func holesOnCopy() throws {
        let folder = TemporaryFolder()
        let source = folder.child("source")
        // A marker every 512 KiB: no MiB of it is all zeros.
        let length: Int64 = 64 << 20
        try Self.sparseFile(
            source, length: length, marker: "M", at: stride(from: 0, to: length, by: 512 << 10).map { $0 })
        let input = open(source, O_RDONLY | O_CLOEXEC)
        let (size, digest) = try FileDigest.copy(
            from: Descriptor(input, display: source), to: folder.child("copy"), limit: length)
        #expect(size == length)
        #expect(digest == (try FileDigest.of(source).sha256))
        #expect(
            Self.allocated(folder.child("copy")) <= 128 * 4096 * 2,
            "the copy takes \(Self.allocated(folder.child("copy"))) bytes")
    }

    @Test(
        "a copy stops at the length that was counted: a file longer than that is refused naming it, one that shrank is copied as it is"
    )
    func boundedCopy() throws {
        let folder = TemporaryFolder()
        let source = folder.child("grown")
        try Self.sparseFile(source, length: 8 << 20, marker: "M", at: [0])
        let input = open(source, O_RDONLY | O_CLOEXEC)
        let file = Descriptor(input, display: source)
        // Counted at 4 MiB, 8 MiB long when copied.
        #expect {
            _ = try FileDigest.copy(from: file, to: folder.child("copy-1"), limit: 4 << 20)
        } throws: { error in
            (error as? GrownFileError)?.path == source && "\(error)".contains("grew past the 4")
        }
        // One byte more than counted is enough to refuse it.
        #expect(throws: GrownFileError.self) {
            _ = try FileDigest.copy(from: file, to: folder.child("copy-2"), limit: (8 << 20) - 1)
        }
        // Counted longer than it is now: copied as it is.
        let (size, _) = try FileDigest.copy(from: file, to: folder.child("copy-3"), limit: 16 << 20)
        #expect(size == 8 << 20)
        let (exact, _) = try FileDigest.copy(from: file, to: folder.child("copy-4"), limit: 8 << 20)
        #expect(exact == 8 << 20)
    }

    @Test(
        "the room a restore's staging needs is counted from the manifest before a member is written, and a refusal writes nothing"
    )
    func roomBeforeWriting() throws {
        let folder = TemporaryFolder()
        let attachment = folder.child("photo")
        try Self.sparseFile(attachment, length: 8 << 20, marker: "MARKER", at: [0])
        let archive = try Self.archive(folder, attachment: attachment)
        let store = try FileDigest.of(folder.child("Notes.sqlite"))
        let into = folder.child("into")
        try FileSystem.makeDirectory(into)
        var asked: ArchiveVerifier.Needs?
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try ArchiveVerifier.extract(
                archive: archive, into: into, check: .full, durable: false,
                room: { needs in
                    asked = needs
                    throw Refused()
                })
        }
        // Every file at its full length; the files and the three folders they go in.
        #expect(asked == ArchiveVerifier.Needs(bytes: store.size + (8 << 20), files: 2 + 3))
        #expect(FileSystem.contents(of: into).isEmpty)
        // Staging's own check: a filesystem has less than 2^62 bytes free.
        let refused = #expect(throws: RestoreError.self) {
            try StagingRoom.check(ArchiveVerifier.Needs(bytes: 1 << 62, files: 1), in: into)
        }
        #expect(refused?.status == .ioError)
        #expect(refused?.description.contains("needs 4194304 TiB in \(into)") == true, "\(refused?.description ?? "")")
        try StagingRoom.check(ArchiveVerifier.Needs(bytes: 1 << 10, files: 1), in: into)
    }
}
