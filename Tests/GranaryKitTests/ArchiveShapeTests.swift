import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

#if canImport(Glibc)
    import Glibc
#endif

/// Archives whose shape is wrong: members the manifest does not list, folders included, are
/// refused (65) before anything is made for them, and names too long to extract are a fault of
/// the archive (65), not an I/O error. The archives are written by the tests through libarchive
/// (`ArchiveWriter`), around a real store.
@Suite("archives whose shape is wrong")
struct ArchiveShapeTests {
    static let external = String(TestArchive.external.dropLast())

    /// An archive of one rollback store `stores/<store>` with one external-data file, and
    /// whatever `extra` writes before the store (`listed` files are added to the manifest, with
    /// the bytes `extra` must write for them: `payload`).
    static func archive(
        _ folder: TemporaryFolder, store: String = "Notes.sqlite", listed: [String] = [],
        extra: (ArchiveWriter) throws -> Void
    ) throws -> String {
        let source = folder.child("source.sqlite")
        let entry = try TestArchive.store(at: source, name: store)
        let attachment = folder.child("attachment")
        FileManager.default.createFile(atPath: attachment, contents: Data(payload))
        let payloadSHA = try FileDigest.of(attachment).sha256
        var files = [
            Manifest.File(
                path: external + "/A1", size: Int64(payload.count), sha256: payloadSHA, kind: .external, mode: 0o600)
        ]
        files += listed.map {
            Manifest.File(path: $0, size: Int64(payload.count), sha256: payloadSHA, kind: .external, mode: 0o600)
        }
        let path = folder.child("archive.tar.zst")
        try TestArchive.write(to: path, store: entry, files: files) { writer in
            try extra(writer)
            try writer.addFile(member: "stores/" + store, from: source)
            try writer.addData(member: external + "/A1", bytes: payload)
        }
        return path
    }

    static let payload = Array("an attachment".utf8)

    /// Extracts `archive` into a new folder of `folder` and returns the failure, with every path
    /// left under the folder (relative to it).
    func extract(_ archive: String, in folder: TemporaryFolder) throws -> (VerificationFailure?, [String]) {
        let into = folder.child("into")
        try FileSystem.makeDirectory(into)
        var failure: VerificationFailure?
        do { _ = try ArchiveVerifier.extract(archive: archive, into: into, check: .full, durable: false) } catch let
            error as VerificationFailure
        {
            failure = error
        }
        return (failure, Self.tree(into))
    }

    /// Every path under `folder`, relative to it (raw names: long ones are walked descriptor by descriptor).
    static func tree(_ folder: String) -> [String] {
        var found: [String] = []
        func walk(_ fd: Int32, _ prefix: String) {
            guard let dir = fdopendir(fd) else { close(fd); return }
            defer { closedir(dir) }
            while let item = readdir(dir) {
                let name = withUnsafeBytes(of: item.pointee.d_name) {
                    String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name == "." || name == ".." { continue }
                found.append(prefix + name)
                if item.pointee.d_type == DT_DIR {
                    let child = openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if child >= 0 { walk(child, prefix + name + "/") }
                }
            }
        }
        let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { walk(fd, "") }
        return found.sorted()
    }

    @Test("200,000 folder members the manifest does not list: refused at the first (65), none of them made")
    func unlistedFolders() throws {
        let folder = TemporaryFolder()
        let archive = try Self.archive(folder) { writer in
            for index in 0..<200_000 { try writer.addDirectory(member: String(format: "stores/d%06d/", index)) }
        }
        let (failure, left) = try extract(archive, in: folder)
        #expect(failure?.status == .dataError)
        #expect(failure?.member == "stores/d000000/", "\(failure?.description ?? "passed")")
        #expect(
            failure?.reason.contains("is a folder the manifest does not list") == true,
            "\(failure?.description ?? "passed")")
        #expect(left == ["stores"], "made \(left.prefix(5)) …")
        let verified = #expect(throws: VerificationFailure.self) {
            try ArchiveVerifier.verify(archive: archive, workFolder: folder.child("work"), check: .full)
        }
        #expect(verified?.status == .dataError)
        #expect(FileSystem.contents(of: folder.child("work")).isEmpty)
    }

    @Test(
        "one unlisted folder among listed ones, or a folder where a store or file is listed, is refused before it is made",
        arguments: [
            "stores/Data/", "stores/.Notes_SUPPORT/_EXTERNAL_DATA/sub/", "stores/Notes.sqlite/",
            "stores/.Notes_SUPPORT/_EXTERNAL_DATA/A1/",
        ])
    func unlistedFolder(member: String) throws {
        let folder = TemporaryFolder()
        let archive = try Self.archive(folder) { writer in
            try writer.addDirectory(member: "stores/.Notes_SUPPORT/")
            try writer.addDirectory(member: member)
        }
        let (failure, left) = try extract(archive, in: folder)
        #expect(failure?.status == .dataError)
        #expect(failure?.member == member, "\(failure?.description ?? "passed")")
        #expect(!left.contains(String(member.dropLast())), "\(left)")
    }

    @Test(
        "the folders the manifest implies (stores/, a store's folders, its external-data folder and the folders above it) are accepted"
    )
    func listedFolders() throws {
        let folder = TemporaryFolder()
        let archive = try Self.archive(folder, store: "Data/Notes.sqlite") { writer in
            try writer.addDirectory(member: "stores/Data/")
            try writer.addDirectory(member: "stores/.Notes_SUPPORT/")
            try writer.addDirectory(member: Self.external + "/")
        }
        let (failure, left) = try extract(archive, in: folder)
        #expect(failure == nil, "\(failure?.description ?? "")")
        #expect(
            left == [
                "stores", "stores/.Notes_SUPPORT", "stores/.Notes_SUPPORT/_EXTERNAL_DATA",
                "stores/.Notes_SUPPORT/_EXTERNAL_DATA/A1",
                "stores/Data", "stores/Data/Notes.sqlite",
            ])
    }

    /// `stores/` and 30 nested folders of 200-byte names (over 6,000 bytes: past PATH_MAX).
    static let deep = (0..<30).map { String(repeating: Character(UnicodeScalar(UInt8(97 + $0 % 26))), count: 200) }

    @Test("30 nested folders with 200-byte names, unlisted: 65 at the first, nothing made")
    func deepUnlistedFolders() throws {
        let folder = TemporaryFolder()
        let archive = try Self.archive(folder) { writer in
            var path = "stores"
            for name in Self.deep {
                path += "/" + name
                try writer.addDirectory(member: path + "/")
            }
        }
        let (failure, left) = try extract(archive, in: folder)
        #expect(failure?.status == .dataError, "\(failure?.description ?? "passed")")
        #expect(
            failure?.reason.contains("is a folder the manifest does not list") == true,
            "\(failure?.description ?? "passed")")
        #expect(left == ["stores"])
    }

    @Test(
        "a file the manifest lists 30 folders of 200-byte names deep, or with a 256-byte name: 65 naming it, nothing made for it",
        arguments: [
            "deep", "long-component",
        ])
    func deepListedFile(shape: String) throws {
        let folder = TemporaryFolder()
        let name =
            shape == "deep"
            ? Self.external + "/" + Self.deep.joined(separator: "/") + "/A2"
            : Self.external + "/" + String(repeating: "x", count: 256)
        let archive = try Self.archive(folder, listed: [name]) { writer in
            try writer.addData(member: name, bytes: Self.payload)
        }
        let (failure, left) = try extract(archive, in: folder)
        #expect(failure?.status == .dataError, "\(failure?.description ?? "passed")")
        #expect(failure?.member == name)
        #expect(failure?.reason.contains("too long") == true, "\(failure?.description ?? "passed")")
        #expect(left == [], "the name is refused with the manifest, before any member is read: \(left)")
    }
}
