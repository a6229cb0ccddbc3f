import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Names are bytes on Linux: stores and attachments whose names are not ASCII, not UTF-8 at all, or
/// hold escapes, line breaks and bidirectional overrides are backed up, verified and restored with
/// exactly their bytes.
@Suite("any name")
struct NameCorpusTests {
    /// Store file names as bytes, each a valid Linux file name.
    static let corpus: [[UInt8]] = [
        Array("Café.sqlite".utf8),
        [0x62, 0x61, 0x64, 0xFF, 0xFE] + Array(".sqlite".utf8),  // not UTF-8
        Array("esc\u{1B}[31mred.sqlite".utf8),
        Array("new\nline.sqlite".utf8),
        Array("carriage\rreturn.sqlite".utf8),
        Array("next\u{85}line.sqlite".utf8),
        Array("evil\u{202E}etilqs.sqlite".utf8),  // right-to-left override
        Array("My Notes.sqlite".utf8),
        // The longest name whose -journal (8 bytes more) still fits in a 255-byte component.
        Array(repeating: UInt8(ascii: "n"), count: 240) + Array(".sqlite".utf8),
        [0xC3, 0x28] + Array("x.sqlite".utf8),  // an invalid two-byte sequence
        Array("\u{10FF41}pua.sqlite".utf8),  // a private-use scalar granary's escaping also uses
    ]

    let folder = TemporaryFolder("granary-names")
    var root: String { folder.child("root") }
    var repo: String { folder.child("repo") }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
    }

    /// The names in a folder as bytes.
    func names(_ path: String) -> Set<[UInt8]> { Set(RawPath.list(path).map(FolderName.encode)) }

    @Test("every name of the corpus is backed up, verified and restored with its exact bytes, also by stock tar")
    func corpusRoundTrip() throws {
        let user = root + "/names@example.com"
        let sub = FolderName.decode(Array("Dåta".utf8) + [0xFF])
        try FileSystem.makeDirectory(user + "/" + sub)
        for name in Self.corpus.map(FolderName.decode) {
            try SampleData.makeRollbackStore(user + "/" + name, rows: 3)
        }
        try SampleData.makeRollbackStore(user + "/" + sub + "/App.sqlite", rows: 2)
        // A Core Data store whose attachment has a name that is not UTF-8.
        try SampleData.makeCoreDataStore(user + "/Notes.sqlite", notes: 3)
        let external = RestoreFixtures.externalFolder(of: user + "/Notes.sqlite")
        let oddAttachment = FolderName.decode(Array("att".utf8) + [0xE9] + Array(".bin".utf8))
        try Data("odd".utf8).write(to: URL(fileURLWithPath: external + "/x"))
        #expect(RawPath.rename(external + "/x", external + "/" + oddAttachment) == 0)
        let before = names(user)
        let beforeExternal = names(external)

        // Before: the first non-ASCII name crashed backup (SIGSEGV in libarchive), for every user.
        let backup = try granary(["backup", "names@example.com"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let archive = try #require(FileSystem.contents(of: repo + "/names@example.com").first { $0.hasSuffix(".tar.zst") })
        let path = repo + "/names@example.com/" + archive
        // The member names, read back by libarchive, are the files' bytes.
        let reader = try ArchiveReader(path: path)
        var members: Set<[UInt8]> = []
        while let entry = try reader.next() { members.insert(FolderName.encode(entry.name)) }
        for name in Self.corpus { #expect(members.contains(Array("stores/".utf8) + name), "\(name)") }
        // Stock tar extracts the same bytes.
        let extracted = folder.child("tar")
        try FileSystem.makeDirectory(extracted)
        let tar = try GranaryProcess.runExecutable("/usr/bin/tar", ["--zstd", "-xf", path, "-C", extracted])
        #expect(tar.status == 0, "\(tar.stderr)")
        #expect(names(extracted + "/stores") == before)
        #expect(names(extracted + "/stores/.Notes_SUPPORT/_EXTERNAL_DATA").contains(FolderName.encode(oddAttachment)))

        #expect(try granary(["verify", "--all"]).status == 0)
        // Change every store, then put the archive back: same names, archived content.
        for name in Self.corpus.map(FolderName.decode) {
            try Database(path: user + "/" + name, mode: .readWrite).execute("DELETE FROM items")
        }
        try FileSystem.removeFile(external + "/" + oddAttachment)
        let restore = try granary(["restore", "names@example.com"])
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(names(user) == before)
        #expect(names(external) == beforeExternal)
        for name in Self.corpus.map(FolderName.decode) {
            #expect(try RestoreFixtures.ids(user + "/" + name, table: "items").count == 3, "\(name)")
        }
    }

    @Test("a user id of 255 bytes with a store of a 247-byte name in a folder of 200 is backed up, listed and restored")
    func longUserID() throws {
        let id = String(repeating: "u", count: 255 - "@example.com".utf8.count) + "@example.com"
        #expect(id.utf8.count == 255)
        // Before: the lock file's name overflowed, and a staged path of over 512 bytes was more
        // than SQLite opens.
        let folderName = String(repeating: "d", count: 200)
        let store = folderName + "/" + String(repeating: "s", count: 240) + ".sqlite"
        try FileSystem.makeDirectory(root + "/" + id + "/" + folderName)
        try SampleData.makeItemsStore(root + "/" + id + "/" + store, rows: 4, walOnlyTail: 0)
        let backup = try granary(["backup", id])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(try granary(["list", id]).stdout.contains(".tar.zst"))
        try Database(path: root + "/" + id + "/" + store, mode: .readWrite).execute("DELETE FROM items")
        let restore = try granary(["restore", id])
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(try RestoreFixtures.ids(root + "/" + id + "/" + store, table: "items").count == 4)
    }

    @Test("a name's string and its bytes convert both ways for every byte string")
    func escapingIsReversible() {
        var samples: [[UInt8]] = Self.corpus + [[0x80], [0xF4, 0x8F, 0xBC, 0x80], [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98]]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 { samples.append((0..<Int.random(in: 1...12, using: &generator)).map { _ in UInt8.random(in: 1...255, using: &generator) }) }
        for bytes in samples {
            #expect(FolderName.encode(FolderName.decode(bytes)) == bytes, "\(bytes)")
        }
    }
}
