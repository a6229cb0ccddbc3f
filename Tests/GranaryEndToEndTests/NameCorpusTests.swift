import Foundation
import GranaryKit
import GranaryTestSupport
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
        Array("Caf\u{E9}.sqlite".utf8),  // NFC
        Array("Cafe\u{301}.sqlite".utf8),  // the same name in NFD: a different file, an equal Swift string
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
    var repo: String { initializedRepository(folder.child("repo")) }

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
        // Each store its own number of rows: a store restored in another's place shows.
        for (index, name) in Self.corpus.map(FolderName.decode).enumerated() {
            try SampleData.makeRollbackStore(user + "/" + name, rows: 3 + index)
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
        let archive = try #require(
            FileSystem.contents(of: repo + "/names@example.com").first { $0.hasSuffix(".tar.zst") })
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
        for (index, name) in Self.corpus.map(FolderName.decode).enumerated() {
            #expect(try RestoreFixtures.ids(user + "/" + name, table: "items").count == 3 + index, "\(name)")
        }
    }

    @Test(
        "every name of the corpus is escaped on screen and exact in JSON: users, backup, list, inspect, restore and verify"
    )
    func corpusShownAndCarried() throws {
        let user = root + "/names@example.com"
        try FileSystem.makeDirectory(user)
        for name in Self.corpus.map(FolderName.decode) {
            try SampleData.makeRollbackStore(user + "/" + name, rows: 1)
        }
        let expected = Set(Self.corpus)
        // As text: the same escapes everywhere, never a raw control, line break or override.
        let shown = [
            "Caf\u{E9}.sqlite", "Cafe\\xcc\\x81.sqlite", "bad\\xff\\xfe.sqlite", "esc\\e[31mred.sqlite",
            "new\\nline.sqlite", "carriage\\rreturn.sqlite",
            "next\\u{0085}line.sqlite", "evil\\u{202e}etilqs.sqlite", "\\xc3(x.sqlite",
        ]
        func text(_ arguments: [String], status: Int32 = 0) throws -> String {
            let result = try granary(arguments)
            #expect(result.status == status, "\(arguments): \(result.stderr)")
            let all = result.stdout + result.stderr
            for raw in ["\u{1B}", "\r", "\u{85}", "\u{202E}", "\u{FFFD}"] {
                #expect(!all.contains(raw), "\(arguments) printed \(raw.debugDescription) raw")
            }
            #expect(
                !all.unicodeScalars.contains { (0x10_FF00...0x10_FFFF).contains($0.value) },
                "\(arguments) printed a private code point")
            return all
        }
        /// The exact bytes of each `{name, nameBase64}` of `objects`.
        func bytes(_ objects: [[String: Any]]?, key: String = "name") -> Set<[UInt8]> {
            Set(
                (objects ?? []).compactMap { object -> [UInt8]? in
                    if let base64 = object[key + "Base64"] as? String {
                        return Data(base64Encoded: base64).map(Array.init)
                    }
                    return (object[key] as? String).map { Array($0.utf8) }
                })
        }
        func json(_ arguments: [String], schema: String) throws -> [String: Any] {
            let result = try granary(arguments + ["--json"])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            #expect(try ShellTools.schemaProblems(result.stdout, schema: schema) == [], "\(arguments)")
            #expect(
                !result.stdout.unicodeScalars.contains { (0x10_FF00...0x10_FFFF).contains($0.value) }, "\(arguments)")
            return try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        }

        let users = try text(["users"])
        for name in shown { #expect(users.contains(name), "users: \(name) in \(users)") }
        let usersDocument = try json(["users"], schema: "users")
        let stores = ((usersDocument["users"] as? [[String: Any]])?.first?["stores"] as? [[String: Any]])
        #expect(bytes(stores) == expected)
        // Only the names that are not UTF-8 (and the one holding a code point granary keeps for
        // such bytes) have their bytes in base64; they show U+FFFD.
        let notUTF8 = Self.corpus.filter {
            String(validating: $0, as: UTF8.self) == nil || $0.starts(with: [0xF4, 0x8F, 0xBD])
                || $0.starts(with: Array("Cafe\u{301}".utf8))
        }
        #expect(notUTF8.count == 4)
        #expect(stores?.filter { !($0["nameBase64"] is NSNull) }.count == notUTF8.count)
        #expect(stores?.filter { ($0["name"] as? String)?.contains("\u{FFFD}") == true }.count == notUTF8.count)

        let backup = try json(["backup", "names@example.com"], schema: "backup")
        #expect(bytes((backup["users"] as? [[String: Any]])?.first?["stores"] as? [[String: Any]]) == expected)
        let archive = try #require(
            FileSystem.contents(of: repo + "/names@example.com").first { $0.hasSuffix(".tar.zst") })

        let list = try text(["list"])
        for name in shown { #expect(list.contains(name), "list: \(name) in \(list)") }
        let listDocument = try json(["list"], schema: "list")
        #expect(bytes((listDocument["archives"] as? [[String: Any]])?.first?["stores"] as? [[String: Any]]) == expected)

        let inspect = try text(["inspect", "names@example.com/" + archive])
        for name in shown { #expect(inspect.contains(name), "inspect: \(name)") }
        let inspectDocument = try json(["inspect", "names@example.com/" + archive], schema: "inspect")
        #expect(bytes(inspectDocument["stores"] as? [[String: Any]]) == expected)

        let restore = try text(["restore", "names@example.com", "-v"])
        for name in shown { #expect(restore.contains(name), "restore: \(name)") }
        let restoreDocument = try json(["restore", "names@example.com"], schema: "restore")
        let restored = restoreDocument["stores"] as? [[String: Any]]
        #expect(bytes(restored) == expected)
        #expect(bytes(restored, key: "live") == Set(Self.corpus.map { FolderName.encode(user) + [0x2F] + $0 }))

        // A damaged member names its store exactly in JSON (member, memberBase64) and escaped on screen.
        let path = repo + "/names@example.com/" + archive
        // Named as this archive a microsecond earlier: its name agrees with its manifest.
        let original = try #require(ArchiveName(fileName: archive))
        let damaged =
            repo + "/names@example.com/"
            + ArchiveName(
                micros: original.micros - 1, label: original.label, host: original.host,
                compression: original.compression
            ).fileName
        try FileManager.default.copyItem(atPath: path, toPath: damaged)
        let tamper = try GranaryProcess.runExecutable(
            "/usr/bin/env",
            ["python3", GranaryProcess.packageDirectory + "/scripts/tamper-archive.py", path, damaged, "flip-store"])
        try #require(tamper.status == 0, "\(tamper.stderr)")
        let verify = try granary(["verify", damaged, "--json"])
        #expect(verify.status == 65, "\(verify.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any]
        let fault = ((document?["archives"] as? [[String: Any]])?.first?["error"] as? [String: Any]) ?? [:]
        let member = bytes([fault], key: "member").first ?? []
        #expect(expected.contains(Array(member.dropFirst("stores/".utf8.count))), "\(fault)")
        #expect(try ShellTools.schemaProblems(verify.stdout, schema: "verify") == [])
    }

    @Test("a path on the command line that is not UTF-8 reaches its file; a user id that is not text in NFC is refused")
    func commandLineBytes() throws {
        // A folder whose name is not UTF-8 holds a store: inspect takes its path as bytes (before,
        // the bytes became U+FFFD and the file was not found).
        let odd = folder.child("odd")
        try FileSystem.makeDirectory(odd)
        #expect(RawPath.mkdir(odd + "/" + FolderName.decode(Array("d".utf8) + [0xFF]), 0o755) == 0)
        try SampleData.makeItemsStore(
            odd + "/" + FolderName.decode(Array("d".utf8) + [0xFF]) + "/Store.sqlite", rows: 2, walOnlyTail: 0)
        let inspect = try GranaryProcess.runExecutable(
            "/bin/sh",
            [
                "-c", "exec \"$0\" inspect \"$(printf \"$1\")\"", GranaryProcess.binDirectory + "/granary",
                odd + "/d\\377/Store.sqlite",
            ])
        #expect(inspect.status == 0, "\(inspect.stderr)")
        #expect(inspect.stdout.contains("Store.sqlite") && inspect.stdout.contains("items"), "\(inspect.stdout)")
        // U+10FF61 is granary's own stand-in for the byte 'a': typed as text, it must not open alice.
        try FileSystem.makeDirectory(root + "/alice@example.com")
        for id in ["\u{10FF61}lice@example.com", "jo\u{308}rg@example.com"] {
            let result = try granary(["users", id])
            #expect(result.status == 64, "\(id.debugDescription): \(result.stderr)")
            #expect(result.stderr.contains("is not UTF-8 text in normal form C"), "\(result.stderr)")
        }
    }

    @Test(
        "a root, repository or mirror path that is not UTF-8 is refused with 64 naming it, and nothing is made anywhere"
    )
    func folderPathBytes() throws {
        let odd = folder.child("paths")
        try FileSystem.makeDirectory(odd)
        #expect(RawPath.mkdir(odd + "/" + FolderName.decode(Array("r".utf8) + [0xFF]), 0o755) == 0)
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try SampleData.makeItemsStore(root + "/alice@example.com/Store.sqlite", rows: 2, walOnlyTail: 0)
        initializedRepository(odd + "/repo")
        let before = FileSystem.contents(of: odd)
        for (arguments, flag) in [
            (["backup", "--root", "$1/r\\377", "--repo", "$1/repo", "alice@example.com"], "--root"),
            (["backup", "--root", "$2", "--repo", "$1/r\\377", "alice@example.com"], "repository location"),
            (
                ["backup", "--root", "$2", "--repo", "$1/repo", "--mirror", "$1/m\\377", "alice@example.com"],
                "repository location"
            ),
        ] {
            // The shell makes the bytes: a Swift string cannot carry 0xFF as itself.
            let words = arguments.map { $0.contains("\\") ? "\"$(printf \"\($0)\")\"" : "\"\($0)\"" }
                .joined(separator: " ")
            let result = try GranaryProcess.runExecutable(
                "/bin/sh", ["-c", "exec \"$0\" " + words, GranaryProcess.binDirectory + "/granary", odd, root])
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(flag) && result.stderr.contains("not UTF-8"), "\(result.stderr)")
        }
        #expect(FileSystem.contents(of: odd) == before, "nothing may be made beside the odd folder")
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

    @Test(
        "a name's string and its bytes convert both ways for every byte string, and two names are equal strings only when their bytes are"
    )
    func escapingIsReversible() {
        // Canonically equivalent pairs: precomposed and decomposed, Hangul syllable and jamo,
        // singletons (ANGSTROM SIGN is Å, OHM SIGN is Ω), reordered combining marks.
        let equivalent: [[UInt8]] = [
            "\u{C5}", "A\u{30A}", "\u{212B}", "\u{AC00}", "\u{1100}\u{1161}", "\u{3A9}", "\u{2126}",
            "a\u{301}\u{323}", "a\u{323}\u{301}", "\u{E1}\u{323}", "\u{1EA1}\u{301}",
        ].map { Array($0.utf8) }
        var samples: [[UInt8]] =
            Self.corpus + equivalent + [
                [0x80], [0xF4, 0x8F, 0xBC, 0x80], [0xED, 0xA0, 0x80], [0xF0, 0x9F, 0x98], [0xFF, 0xCC, 0x81],
            ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            samples.append(
                (0..<Int.random(in: 1...12, using: &generator)).map { _ in UInt8.random(in: 1...255, using: &generator)
                })
        }
        let strings = samples.map(FolderName.decode)
        for (bytes, string) in zip(samples, strings) {
            #expect(FolderName.encode(string) == bytes, "\(bytes)")
            #expect(
                FolderName.canonical(string) == string
                    && FolderName.canonical(string).unicodeScalars.elementsEqual(string.unicodeScalars))
        }
        for i in samples.indices {
            for j in samples.indices where i < j && (strings[i] == strings[j]) != (samples[i] == samples[j]) {
                Issue.record(
                    "\(samples[i]) and \(samples[j]) give strings Swift holds \(strings[i] == strings[j] ? "equal" : "different")"
                )
            }
        }
        #expect(Set(strings).count == Set(samples).count)
        // Text in NFC stays text; the others are escaped only where they are not ASCII.
        #expect(FolderName.decode(Array("Caf\u{E9}.sqlite".utf8)) == "Caf\u{E9}.sqlite")
        #expect(FolderName.isUTF8(FolderName.decode(Array("Caf\u{E9}.sqlite".utf8))))
        #expect(!FolderName.isUTF8(FolderName.decode(Array("Cafe\u{301}.sqlite".utf8))))
        #expect(
            FolderName.decode(Array("Cafe\u{301}.sqlite".utf8)).hasPrefix("Cafe")
                && FolderName.decode(Array("Cafe\u{301}.sqlite".utf8)).hasSuffix(".sqlite"))
    }
}
