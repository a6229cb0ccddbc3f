import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// `granary verify` and `granary list` against real archives made by `granary backup`, and
/// broken or hostile ones derived from them by scripts/tamper-archive.py.
@Suite("granary verify and list")
struct VerifyCommandTests {
    static let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// A sample root with one archive each of dave (one store) and bob (Core Data with external data).
    final class Fixture {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }
        init() throws {
            try GranaryProcess.run([root], tool: "granary-sample")
            let made = try GranaryProcess.run([
                "backup", "--root", root, "--repo", repo, "dave@example.com", "bob@example.com",
            ])
            #expect(made.status == 0, "\(made.stderr)")
        }

        func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
        }

        func archives(_ user: String) -> [String] {
            FileSystem.contents(of: repo + "/" + user).filter { !$0.hasPrefix(".") }.sorted().map {
                repo + "/" + user + "/" + $0
            }
        }

        /// A path in `user`'s folder of the repository for a copy of `archive` (default: the user's
        /// first), under a name of this host that agrees with its manifest: its label and host, its
        /// time less `older` microseconds (within the manifest's second), `compression` when given.
        func slot(_ user: String, older: Int, of archive: String? = nil, compression: Compression? = nil) throws
            -> String
        {
            let first = archives(user).first
            let source = try #require(archive ?? first)
            let original = try #require(ArchiveName(fileName: PathText.lastComponent(source)))
            let name = ArchiveName(
                micros: original.micros - Int64(older), label: original.label, host: original.host,
                compression: compression ?? original.compression)
            return repo + "/" + user + "/" + name.fileName
        }

        /// Derives `fault` from the user's first archive, under a valid archive name that agrees with
        /// its manifest (the original's label and host, its time less `second` microseconds: older
        /// than it, within the manifest's second), so that the fault itself is what verification finds.
        func tampered(_ fault: String, user: String = "dave@example.com", second: Int = 1) throws -> String {
            let output = try slot(user, older: second)
            let result = try GranaryProcess.runExecutable(
                "/usr/bin/env",
                [
                    "python3", VerifyCommandTests.package + "/scripts/tamper-archive.py", archives(user)[0], output,
                    fault,
                ])
            #expect(result.status == 0, "\(result.stderr)")
            return output
        }

        /// Entries left in the repository's work folder (verification's temporary folders).
        var leftovers: [String] { FileSystem.contents(of: repo + "/.granary-tmp") }
    }

    static let faults: [(fault: String, message: String)] = [
        ("flip-store", "stores/Data/App.sqlite has SHA-256"),
        ("lie-sha", "the manifest says"),
        ("drop-member", "stores/Data/App.sqlite is listed in the manifest but missing"),
        ("extra-member", "stores/extra.txt is not in the manifest"),
        ("dotdot", "stores/../../x is listed in the manifest with an unsafe name"),
        ("dotdot-unlisted", "stores/../../x is an unexpected member"),
        ("absolute", "/tmp/granary-escape-x is listed in the manifest with an unsafe name"),
        ("symlink", "stores/link is a symlink to /etc/passwd"),
        ("hardlink", "stores/hard is a hardlink to /etc/passwd"),
        ("fifo", "stores/fifo is a special file"),
        ("device", "stores/null is a special file"),
        ("duplicate", "stores/Data/App.sqlite is in the archive twice"),
        ("bigger-than-manifest", "stores/Data/App.sqlite declares"),
        ("bomb", "stores/Data/App.sqlite declares 268468224 bytes, the manifest says 32768"),
        ("manifest-not-json", "MANIFEST.json is not a valid manifest"),
        ("manifest-newer", "MANIFEST.json has format 99, newer than this granary, which reads formats 1–3"),
        ("manifest-format-0", "MANIFEST.json has format 0, not a format granary ever wrote"),
        ("other-user", "MANIFEST.json belongs to user \"mallory@example.com\", not \"dave@example.com\""),
        ("manifest-not-first", "comes first, where MANIFEST.json must be"),
        ("corrupt-db", "stores/Data/App.sqlite fails integrity_check"),
    ]

    @Test(
        "each broken or hostile archive exits 65 naming its fault, writes nothing outside the temporary folder and leaves none",
        arguments: faults)
    func hostile(fault: String, message: String) throws {
        let fixture = try Fixture()
        let archive = try fixture.tampered(fault)
        let before = try FileManager.default.subpathsOfDirectory(atPath: fixture.folder.path).sorted()
        let result = try fixture.granary(["verify", archive])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.hasPrefix("granary: " + archive))
        #expect(fixture.leftovers.isEmpty, "\(fixture.leftovers)")
        // Only the verification record beside the archive is new; nothing escaped.
        let after = try FileManager.default.subpathsOfDirectory(atPath: fixture.folder.path).sorted()
        #expect(
            Set(after).subtracting(before).subtracting([".granary-tmp", "repo/.granary-tmp"]).allSatisfy {
                $0.hasSuffix(".verify.json")
            },
            "\(Set(after).subtracting(before))")
        #expect(!FileManager.default.fileExists(atPath: "/tmp/granary-escape-x"))
        #expect(!FileManager.default.fileExists(atPath: fixture.repo + "/x"))
    }

    @Test(
        "the one manifest reader gives the SHA-256 of MANIFEST.json's bytes, and reports a broken manifest as verify does",
        arguments: [
            ("manifest-not-json", "MANIFEST.json is not a valid manifest", nil),
            ("manifest-newer", "MANIFEST.json has format 99, newer than this granary, which reads formats 1–3", 99),
            ("manifest-not-first", "does not start with MANIFEST.json", nil),
        ] as [(String, String, Int?)])
    func head(fault: String, message: String, format: Int?) throws {
        let fixture = try Fixture()
        let sound = try #require(fixture.archives("dave@example.com").first)
        // What tar and sha256sum make of the first member, against what granary read.
        let member = try GranaryProcess.runExecutable(
            "/bin/sh", ["-c", "tar --zstd -xOf \"$1\" MANIFEST.json | sha256sum", "sh", sound])
        #expect(member.status == 0, "\(member.stderr)")
        let head = try ArchiveHead(file: sound)
        #expect(member.stdout.hasPrefix(head.sha256 + " "), "\(member.stdout) \(head.sha256)")
        #expect(head.manifest.user == "dave@example.com")
        let archive = try fixture.tampered(fault)
        do {
            _ = try ArchiveHead(file: archive)
            Issue.record("\(fault): read")
        } catch let failure as VerificationFailure {
            #expect(failure.description.hasPrefix(archive + ": " + message), "\(failure)")
            #expect(failure.unreadableFormat == format)
        }
    }

    @Test(
        "inspect and restore refuse each broken or hostile archive with exit 65, leave no temporary folder and leave the live store as it was",
        arguments: faults)
    func hostileInspectRestore(fault: String, message: String) throws {
        let fixture = try Fixture()
        let archive = try fixture.tampered(fault)
        let live = fixture.root + "/dave@example.com/Data/App.sqlite"
        let before = RestoreFixtures.sha256(live)
        let scratch = fixture.folder.child("tmp")
        try FileSystem.makeDirectory(scratch)
        let inspect = try fixture.granary(["inspect", archive], environment: ["TMPDIR": scratch])
        #expect(inspect.status == 65, "inspect: \(inspect.stderr)")
        #expect(inspect.stderr.contains(fault == "corrupt-db" ? "App.sqlite" : message), "inspect: \(inspect.stderr)")
        #expect(FileSystem.contents(of: scratch).isEmpty, "inspect left \(FileSystem.contents(of: scratch))")
        let restore = try fixture.granary(["restore", "dave@example.com", archive])
        #expect(restore.status == 65, "restore: \(restore.stderr)")
        #expect(restore.stderr.contains(message), "restore: \(restore.stderr)")
        #expect(restore.stderr.contains("nothing was changed"), "restore: \(restore.stderr)")
        #expect(RestoreFixtures.sha256(live) == before)
        #expect(
            FileSystem.contents(of: fixture.root + "/.granary/restore").isEmpty,
            "\(FileSystem.contents(of: fixture.root + "/.granary/restore"))")
        #expect(!FileManager.default.fileExists(atPath: "/tmp/granary-escape-x"))
        // list reads only manifests: it refuses (65) what it can see there at once, and the rest
        // once verify has recorded it as bad; it always lists every archive.
        let headFaults = ["manifest-not-json", "manifest-newer", "manifest-format-0", "manifest-not-first"]
        let list = try fixture.granary(["list", "dave@example.com"])
        #expect(list.status == (headFaults.contains(fault) ? 65 : 0), "list: \(list.stderr)")
        #expect(list.stdout.contains((archive as NSString).lastPathComponent))
        #expect(try fixture.granary(["verify", archive]).status == 65)
        let after = try fixture.granary(["list", "dave@example.com"])
        #expect(after.status == 65, "list after verify: \(after.stderr)")
        #expect(after.stderr.contains((archive as NSString).lastPathComponent), "\(after.stderr)")
        #expect(
            after.stdout.contains(fixture.archives("dave@example.com")[0].split(separator: "/").last.map(String.init)!))
    }

    @Test("verify says the true thing, in full, of a manifest format it cannot read: newer (99) or never written (0)")
    func unreadableFormats() throws {
        let fixture = try Fixture()
        let newer = try fixture.tampered("manifest-newer", second: 1)
        let never = try fixture.tampered("manifest-format-0", second: 2)
        for (archive, lines) in [
            (
                newer,
                [
                    "granary: \(newer): MANIFEST.json has format 99, newer than this granary, which reads formats 1–3",
                    "Hint: use the granary version that wrote this archive, or a newer one",
                ]
            ),
            (
                never,
                [
                    "granary: \(never): MANIFEST.json has format 0, not a format granary ever wrote (it wrote and reads formats 1–3)",
                    "Hint: granary did not write this manifest: the archive is damaged or another tool's; use another archive (granary list)",
                ]
            ),
        ] {
            let result = try fixture.granary(["verify", archive])
            #expect(result.status == 65)
            #expect(result.stderr.split(separator: "\n").map(String.init) == lines, "\(result.stderr)")
        }
    }

    @Test("an archive cut short at any of several offsets exits 65, and a file that is not an archive too")
    func truncated() throws {
        let fixture = try Fixture()
        let good = try Data(contentsOf: URL(fileURLWithPath: fixture.archives("bob@example.com")[0]))
        var second = 1
        for cut in [0, 1, 100, 512, 1000, good.count / 2, good.count - 64, good.count - 1] {
            let path = try fixture.slot("bob@example.com", older: second)
            second += 1
            try good.prefix(cut).write(to: URL(fileURLWithPath: path))
            let result = try fixture.granary(["verify", path])
            #expect(result.status == 65, "cut at \(cut): \(result.stderr)")
            #expect(result.stderr.contains(path), "cut at \(cut): \(result.stderr)")
        }
        let text = try fixture.slot("bob@example.com", older: 100)
        try "not an archive\n".write(toFile: text, atomically: true, encoding: .utf8)
        let gzip = try fixture.slot("bob@example.com", older: 101, compression: .gzip)
        _ = try GranaryProcess.runExecutable("/bin/sh", ["-c", "echo hello | gzip > '\(gzip)'"])
        for path in [text, gzip] {
            let result = try fixture.granary(["verify", path])
            #expect(result.status == 65)
            #expect(result.stderr.contains("is not a readable archive"), "\(result.stderr)")
        }
        #expect(fixture.leftovers.isEmpty)
    }

    /// SHA-256 of what stock `zstd -d` makes of `path`, or nil when zstd refuses it.
    static func decompressedDigest(_ path: String) throws -> String? {
        let result = try GranaryProcess.runExecutable(
            "/bin/bash", ["-o", "pipefail", "-c", "zstd -dcq -- \"$1\" | sha256sum", "bash", path])
        return result.status == 0 ? result.stdout : nil
    }

    @Test(
        "a bit flipped anywhere in the compressed stream, at 60 offsets, is caught unless zstd decodes the very same bytes"
    )
    func compressedBitFlips() throws {
        let fixture = try Fixture()
        let original = fixture.archives("bob@example.com")[0]
        let good = try Data(contentsOf: URL(fileURLWithPath: original))
        // The archive's own bytes say it was written with zstd's content checksum (frame header
        // descriptor bit 2): without it a flip in tar metadata would go unnoticed.
        #expect(good.count > 5 && good[4] & 0x04 != 0, "the zstd frame has no content checksum")
        let content = try #require(try Self.decompressedDigest(original))
        var caught = 0
        for index in 0..<60 {
            var bad = good
            let offset = index * good.count / 60
            bad[offset] ^= 0x10
            let path = try fixture.slot("bob@example.com", older: index + 1, of: original)
            try bad.write(to: URL(fileURLWithPath: path))
            let result = try fixture.granary(["verify", path])
            if let digest = try Self.decompressedDigest(path) {
                // A few bits of a compressed stream do not reach the output (an unused code in a
                // table): zstd decodes the very same archive, checksum and all, and so must verify.
                #expect(digest == content, "zstd decodes different bytes with a valid checksum at \(offset)")
                #expect(result.status == 0, "flip at \(offset) leaves the content as it was: \(result.stderr)")
            } else {
                caught += 1
                #expect(result.status == 65, "flip at \(offset) of \(good.count): \(result.stderr)")
                #expect(result.stderr.contains(path), "flip at \(offset): \(result.stderr)")
            }
        }
        #expect(caught >= 50, "most flips must change what zstd decodes, or the test proves little: \(caught)")
        #expect(fixture.leftovers.isEmpty)
    }

    @Test("a bit flipped in the data of each member of an uncompressed archive is caught, naming the member")
    func memberBitFlips() throws {
        let fixture = try Fixture()
        #expect(try fixture.granary(["backup", "--compression", "none", "bob@example.com"]).status == 0)
        let archive = fixture.archives("bob@example.com").first { $0.hasSuffix(".tar") }!
        // Member offsets from Python's tarfile (stock tar does not print them).
        let listing = try GranaryProcess.runExecutable(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import sys, tarfile
                for m in tarfile.open(sys.argv[1]):
                    if m.isfile(): print(m.offset_data, m.size, m.name)
                """, archive,
            ])
        let members = listing.stdout.split(separator: "\n").map {
            $0.split(separator: " ", maxSplits: 2).map(String.init)
        }
        #expect(members.count == 19, "MANIFEST.json, Notes.sqlite and 17 external files: \(members.count)")
        let good = try Data(contentsOf: URL(fileURLWithPath: archive))
        for (index, member) in members.enumerated() {
            var bad = good
            bad[Int(member[0])! + Int(member[1])! / 2] ^= 0x01
            let path = try fixture.slot("bob@example.com", older: index + 1, of: archive)
            try bad.write(to: URL(fileURLWithPath: path))
            let result = try fixture.granary(["verify", path])
            #expect(result.status == 65, "\(member[2]): \(result.stderr)")
            if member[2] == "MANIFEST.json" {
                // Depending on the byte hit, the JSON no longer parses or its checksum no longer matches.
                #expect(result.stderr.contains("MANIFEST.json is not a valid manifest"), "\(result.stderr)")
                #expect(
                    result.stderr.contains("manifest is damaged") || result.stderr.contains("not valid JSON"),
                    "\(result.stderr)")
            } else {
                #expect(result.stderr.contains(member[2] + " has SHA-256"), "\(member[2]): \(result.stderr)")
            }
        }
    }

    @Test("good archives verify with exit 0, are recorded, and list shows them verified until the file changes")
    func goodAndRecorded() throws {
        let fixture = try Fixture()
        let result = try fixture.granary(["verify", "--all", "-v"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.split(separator: "\n").filter { $0.hasPrefix("ok  ") }.count == 2)
        let archive = fixture.archives("bob@example.com")[0]
        #expect(FileManager.default.fileExists(atPath: VerificationRecord.path(for: archive)))
        func states() throws -> [String: String] {
            let list = try fixture.granary(["list", "--json"])
            let document = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as! [String: Any]
            let archives = document["archives"] as! [[String: Any]]
            return Dictionary(uniqueKeysWithValues: archives.map { ($0["path"] as! String, $0["verified"] as! String) })
        }
        #expect(try states()[archive] == "verified")
        // The bytes verified are no longer the bytes there: the record no longer counts.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: archive))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0]))
        try handle.close()
        #expect(try states()[archive] == "unverified")
        // A bad one is listed as bad with its reason.
        let bad = try fixture.tampered("flip-store")
        #expect(try fixture.granary(["verify", bad]).status == 65)
        #expect(try states()[bad] == "bad")
        let text = try fixture.granary(["list", "dave@example.com"])
        #expect(text.status == 65)
        #expect(text.stdout.contains("bad") && text.stdout.contains("has SHA-256"), "\(text.stdout)")
        #expect(try fixture.granary(["list", "bob@example.com"]).status == 0)
    }

    @Test(
        "verify finds archives by USER/NAME, by --user NAME and by unique stamp prefix; an unknown name exits 66 with close matches"
    )
    func names() throws {
        let fixture = try Fixture()
        let name = (fixture.archives("dave@example.com")[0] as NSString).lastPathComponent
        #expect(try fixture.granary(["verify", "dave@example.com/" + name]).status == 0)
        #expect(try fixture.granary(["verify", "--user", "dave@example.com", name]).status == 0)
        #expect(try fixture.granary(["verify", "dave@example.com/" + String(name.prefix(16))]).status == 0)
        let typo = String(name.dropLast(5)) + "x.tar.zst"
        let missing = try fixture.granary(["verify", "dave@example.com/" + typo])
        #expect(missing.status == 66)
        #expect(missing.stderr.contains("did you mean " + name), "\(missing.stderr)")
        #expect(try fixture.granary(["verify"]).status == 64)
        #expect(try fixture.granary(["verify", "--user", "nobody@example.com"]).status == 66)
    }

    @Test("--latest verifies only each user's newest archive; --check quick runs quick_check")
    func latestAndQuick() throws {
        let fixture = try Fixture()
        _ = try fixture.tampered("flip-store")  // older than the good one: not the latest
        let latest = try fixture.granary(["verify", "--all", "--latest", "--check", "quick", "--json"])
        #expect(latest.status == 0, "\(latest.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(latest.stdout.utf8)) as! [String: Any]
        #expect(document["check"] as? String == "quick")
        #expect((document["archives"] as! [[String: Any]]).count == 2)
        // As root verify yields the CPU ("raised" if the other tests left it none for a second).
        if getuid() == 0 { #expect(["yielded", "raised"].contains(document["priority"] as? String), "\(document)") }
        #expect(try fixture.granary(["verify", "--all"]).status == 65)
    }

    @Test(
        "list shows each archive newest first with stores, label and size; an unreadable one is listed too, with exit 65"
    )
    func list() throws {
        let fixture = try Fixture()
        #expect(
            try GranaryProcess.run([
                "backup", "--root", fixture.root, "--repo", fixture.repo, "--label", "second", "dave@example.com",
            ]).status == 0)
        // Named as this host's archive (the name holds the host), bytes that are no archive.
        let broken = fixture.repo + "/dave@example.com/20250101T000000Z.\(Hosts.machine).tar.zst"
        try "garbage".write(toFile: broken, atomically: true, encoding: .utf8)
        let result = try fixture.granary(["list", "--json", "dave@example.com"])
        #expect(result.status == 65, "an unreadable archive is listed, and the exit code says so")
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let archives = document["archives"] as! [[String: Any]]
        #expect(archives.count == 3)
        #expect(archives[0]["label"] as? String == "second")
        #expect((archives[0]["stores"] as? [[String: Any]])?.map { $0["name"] as? String } == ["Data/App.sqlite"])
        #expect((archives[0]["stores"] as? [[String: Any]])?.first?["nameBase64"] is NSNull)
        #expect(archives[2]["verified"] as? String == "unreadable")
        #expect((archives[2]["problem"] as? String)?.contains("not a readable archive") == true)
        #expect(try fixture.granary(["list", "nobody@example.com"]).status == 66)
        let text = try fixture.granary(["list"])
        #expect(text.status == 65)
        #expect(text.stdout.contains("bob@example.com") && text.stdout.contains("Notes.sqlite"))
    }
}
