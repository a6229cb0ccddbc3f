import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

@testable import GranaryCLI

#if canImport(Glibc)
    import Glibc
#endif

/// What the writer writes the reader reads: format 2 (`MANIFEST.files`) and the shared size limit.
@Suite("manifests of archives with many files")
struct ManifestScaleTests {
    static let emptySHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    static let external = TestArchive.external

    /// An archive holding one small store and `count` empty external-data files, written through
    /// `addManifest` as backup writes it; `edit` may change the manifest's files first (after the
    /// store's entry) and `members` the external files actually written.
    static func writeArchive(
        _ folder: TemporaryFolder, count: Int, listed: (([Manifest.File]) -> [Manifest.File])? = nil,
        members: (([String]) -> [String])? = nil
    ) throws -> String {
        let store = folder.child("Notes.sqlite")
        let entry = try TestArchive.store(at: store)
        let empty = folder.child("empty")
        FileManager.default.createFile(atPath: empty, contents: Data())
        let names = (0..<count).map { String(format: "%08d-ATTACHMENT", $0) }
        let externals = names.enumerated().map {
            Manifest.File(
                path: external + $1, size: 0, sha256: emptySHA, kind: .external, mode: $0 == 3 ? 0o640 : 0o600)
        }
        let path = folder.child("archive.tar.zst")
        try TestArchive.write(to: path, store: entry, files: listed?(externals) ?? externals) { writer in
            try writer.addFile(member: "stores/Notes.sqlite", from: store)
            for name in members?(names) ?? names { try writer.addFile(member: external + name, from: empty) }
        }
        return path
    }

    func verify(_ archive: String, in folder: TemporaryFolder) throws -> ArchiveVerifier.Outcome {
        try ArchiveVerifier.verify(archive: archive, workFolder: folder.child("work"), check: .full)
    }

    @Test("up to the threshold the manifest stays format 1 with every file in it")
    func fewFilesFormatOne() throws {
        let folder = TemporaryFolder()
        let archive = try Self.writeArchive(folder, count: 10)
        let manifest = try ArchiveHead(file: archive).manifest
        #expect(manifest.format == .plain)
        #expect(manifest.fileList == nil)
        #expect(manifest.files.count == 11)
        #expect(try verify(archive, in: folder).manifest.files.count == 11)
    }

    @Test(
        "more external files than the threshold go to MANIFEST.files (format 2): it reads back, and stock tar lists it second"
    )
    func manyFilesFormatTwo() throws {
        let folder = TemporaryFolder()
        let count = Manifest.fileListThreshold + 2_000
        let archive = try Self.writeArchive(folder, count: count)
        let manifest = try ArchiveHead(file: archive).manifest
        #expect(manifest.format == .fileList)
        #expect(manifest.files.map(\.path) == ["stores/Notes.sqlite"])
        #expect(manifest.fileList?.count == count)
        let outcome = try verify(archive, in: folder)
        #expect(outcome.checks == ["Notes.sqlite": "ok"])
        let tar = Process()
        tar.executableURL = URL(fileURLWithPath: "/usr/bin/tar")
        tar.arguments = ["--zstd", "-tf", archive]
        let out = Pipe()
        tar.standardOutput = out
        try tar.run()
        let listing = String(decoding: out.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self).split(
            separator: "\n")
        tar.waitUntilExit()
        #expect(Array(listing.prefix(2)) == ["MANIFEST.json", "MANIFEST.files"])
        #expect(listing.count == count + 4)
        // The verifier extracted every listed file where restore picks them up.
        let staged = folder.child("staged")
        try FileSystem.makeDirectory(staged)
        let all = try ArchiveVerifier.extract(
            archive: archive, into: staged, check: .quick, durable: false, allFiles: true)
        #expect(FileSystem.contents(of: staged + "/" + Self.external.dropLast()).count == count)
        // Restore asks for every file, with the modes MANIFEST.files records.
        #expect(all.manifest.files.count == count + 1)
        #expect(all.manifest.files.first { $0.path.hasSuffix("00000003-ATTACHMENT") }?.mode == 0o640)
        #expect(!FileManager.default.fileExists(atPath: staged + "/" + Manifest.fileListName))
    }

    @Test(
        "a member out of list order, a listed file missing, an extra member, or a wrong hash in MANIFEST.files fails, naming it"
    )
    func hostileLists() throws {
        let count = Manifest.fileListThreshold + 5
        let cases: [(String, (([Manifest.File]) -> [Manifest.File])?, (([String]) -> [String])?)] = [
            (
                "comes where MANIFEST.files lists", nil,
                { names in
                    var n = names; n.swapAt(3, 4); return n
                }
            ),
            ("is listed in MANIFEST.files but missing", nil, { Array($0.dropLast()) }),
            ("is not in the manifest", nil, { $0 + ["99999999-EXTRA"] }),
            (
                "has SHA-256",
                { files in
                    var f = files; f[7].sha256 = String(repeating: "0", count: 64); return f
                }, nil
            ),
            (
                "is in the archive twice",
                { files in
                    var f = files; f[5] = f[4]; return f
                },
                { names in
                    var n = names; n[5] = n[4]; return n
                }
            ),
        ]
        for (message, listed, members) in cases {
            let folder = TemporaryFolder()
            let archive = try Self.writeArchive(folder, count: count, listed: listed, members: members)
            let failure = #expect(throws: VerificationFailure.self, "\(message)") { try verify(archive, in: folder) }
            #expect(
                failure?.description.contains(message) == true, "\(failure?.description ?? "nothing") for \(message)")
        }
    }

    @Test("a manifest over the limit every reader applies is refused when the archive is written, before anything is")
    func limitAtWriteTime() throws {
        var counts: [String: Int64] = [:]
        for n in 0..<800_000 { counts["Entity\(n)"] = Int64(n) }
        let manifest = Manifest(
            user: "carol@example.com", host: "test", created: Date(), label: nil, compression: .zstd,
            stores: [
                Manifest.Store(
                    name: "Big.sqlite", path: "stores/Big.sqlite", pageSize: 4096, pageCount: 1, journalMode: "wal",
                    sqliteVersion: "3", check: "quick", integrity: "ok",
                    coreData: Manifest.CoreData(storeUUID: nil, modelVersionHashes: [:], entityRowCounts: counts))
            ], files: [])
        // (Not #expect(throws:): a manifest returned by mistake would fill the log.)
        var refused: ManifestError?
        do { _ = try manifest.layout() } catch { refused = error }
        let error = try #require(refused)
        #expect(error.status == .dataError)
        #expect(error.description.contains("carol@example.com: the archive's MANIFEST.json would be"))
        #expect(
            error.description.contains(
                "800000 Core Data entities, over the 16 MiB granary reads; no archive was written"))
        // The reader refuses the same bytes with the same limit.
        let bytes = manifest.encoded()
        #expect(bytes.count > Manifest.sizeLimit)
        var decoded = false
        do { _ = try Manifest.decode(bytes, source: "x"); decoded = true } catch {}
        #expect(!decoded)
    }

    @Test(
        "MANIFEST.files lines parse back whatever the name: spaces, a line feed, a backslash, a byte that is not UTF-8")
    func lines() throws {
        for name in [
            "with space", "two\nlines", "back\\slash\\x41", "tab\tand\u{7F}", FolderName.decode([0x66, 0xFF, 0x0D]),
        ] {
            for mode: UInt32? in [nil, 0o640] {
                let file = Manifest.File(
                    path: "stores/.A_SUPPORT/_EXTERNAL_DATA/" + name, size: 12, sha256: Self.emptySHA, kind: .external,
                    mode: mode)
                let line = Manifest.fileListLine(file)
                #expect(line.filter { $0 == 0x0A } == [0x0A], "one line for \(name.debugDescription)")
                #expect(Manifest.fileListEntry(line.dropLast()) == file, "\(name.debugDescription)")
            }
        }
        #expect(Manifest.fileListEntry(Array("nothex 1 stores/x".utf8)) == nil)
        #expect(Manifest.fileListEntry(Array("\(Self.emptySHA) 1 - stores/bad\\q".utf8)) == nil)
        #expect(Manifest.fileListEntry(Array("\(Self.emptySHA) 1 9 stores/x".utf8)) == nil)
        #expect(Manifest.fileListEntry(Array("\(Self.emptySHA) 1 600 stores/x".utf8))?.mode == 0o600)
    }
}
