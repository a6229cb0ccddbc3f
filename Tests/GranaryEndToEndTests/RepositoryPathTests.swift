import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Archives named by their paths: `delete` and `verify` act on the repository's archives, refuse
/// anything else inside it, and touch a file outside it only with `--force` (and `verify` never
/// writes beside such a file). Files that are not archives are called so, and hints are command
/// lines that run as shown.
@Suite("paths, the repository, and hints")
struct RepositoryPathTests {
    final class Fixture {
        let folder = TemporaryFolder("granary-paths")
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }

        init() throws {
            try GranaryProcess.run([root], tool: "granary-sample")
            let made = try granary(["backup", "dave@example.com", "carol@example.com"])
            #expect(made.status == 0, "\(made.stderr)")
        }

        func granary(_ arguments: [String], repository: Bool = true, environment: [String: String] = [:]) throws
            -> GranaryProcess.Result
        {
            try GranaryProcess.run(
                arguments + ["--root", root] + (repository ? ["--repo", repo] : []), environment: environment)
        }

        /// The name of the user's only archive.
        func archive(_ user: String) -> String {
            FileSystem.contents(of: repo + "/" + user).filter { !$0.hasPrefix(".") && $0.hasSuffix(".tar.zst") }
                .sorted().last!
        }

        /// Copies the user's archive to `folder` (made if missing), under the same name; its path.
        func copy(_ user: String, to folder: String) throws -> String {
            try FileSystem.makeDirectory(folder)
            let name = archive(user)
            try FileManager.default.copyItem(atPath: repo + "/" + user + "/" + name, toPath: folder + "/" + name)
            return folder + "/" + name
        }
    }

    @Test(
        "delete and verify refuse an archive file outside the repository with 64 unless --force; verify --force writes nothing beside it"
    )
    func outside() throws {
        let fixture = try Fixture()
        // Laid out like a repository (USER/NAME), but not one: no marker.
        let elsewhere = try fixture.copy("dave@example.com", to: fixture.folder.child("elsewhere/dave@example.com"))
        let folder = (elsewhere as NSString).deletingLastPathComponent
        // A file of the victim's that happens to be named like a verification record.
        let planted = folder + "/." + (elsewhere as NSString).lastPathComponent + ".verify.json"
        try Data("precious".utf8).write(to: URL(fileURLWithPath: planted))
        let before = FileSystem.contents(of: folder).sorted()
        let scratch = fixture.folder.child("tmp")
        try FileSystem.makeDirectory(scratch)

        for repository in [true, false] {
            let verify = try fixture.granary(["verify", elsewhere], repository: repository)
            #expect(verify.status == 64, "\(verify.stderr)")
            #expect(verify.stderr.contains("refusing to verify \(elsewhere): it is not in "), "\(verify.stderr)")
            #expect(
                verify.stderr.contains(
                    "Hint: granary verify --force \(elsewhere) verifies it without recording the result"),
                "\(verify.stderr)")
            let forced = try fixture.granary(
                ["verify", "--force", elsewhere, "-v"], repository: repository, environment: ["TMPDIR": scratch])
            #expect(forced.status == 0, "\(forced.stderr)")
            #expect(forced.stdout.contains("ok  dave@example.com/"), "\(forced.stdout)")
            #expect(
                FileSystem.contents(of: folder).sorted() == before, "verify wrote beside a file outside the repository")
            #expect(try String(contentsOfFile: planted, encoding: .utf8) == "precious")
            #expect(FileSystem.contents(of: scratch).isEmpty, "\(FileSystem.contents(of: scratch))")
        }

        let delete = try fixture.granary(["delete", elsewhere])
        #expect(delete.status == 64, "\(delete.stderr)")
        #expect(
            delete.stderr.contains("refusing to delete \(elsewhere): it is not in the repository \(fixture.repo)"),
            "\(delete.stderr)")
        #expect(
            delete.stderr.contains("Hint: granary delete --force \(elsewhere) removes it anyway"), "\(delete.stderr)")
        #expect(FileSystem.isRegularFile(elsewhere))
        let forced = try fixture.granary(["delete", "--force", elsewhere])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(!FileSystem.isRegularFile(elsewhere))
        // That file alone: nothing beside it, nothing in the repository.
        #expect(try String(contentsOfFile: planted, encoding: .utf8) == "precious")
        #expect(FileSystem.isRegularFile(fixture.repo + "/dave@example.com/" + fixture.archive("dave@example.com")))
    }

    @Test(
        "inside the repository, delete and verify take only its archives; a path to no file never matches another user's archive"
    )
    func inside() throws {
        let fixture = try Fixture()
        let name = fixture.archive("dave@example.com")
        let strays = [
            try fixture.copy("dave@example.com", to: fixture.repo + "/.granary-tmp"),
            try fixture.copy("dave@example.com", to: fixture.repo + "/dave@example.com/old"),
        ]
        for stray in strays {
            for command in [["delete", "--force"], ["verify", "--force"]] {
                let result = try fixture.granary(command + [stray])
                #expect(result.status == 64, "\(command) \(stray): \(result.stderr)")
                #expect(
                    result.stderr.contains(
                        "\(stray) lies in the repository \(fixture.repo) but is not one of its archives"),
                    "\(result.stderr)")
                #expect(FileSystem.isRegularFile(stray))
            }
        }
        // The repository's archive, named by its path (relative, or through ..), is taken as it.
        let relative = try GranaryProcess.runExecutable(
            "/bin/sh",
            [
                "-c",
                "cd \"$1\" && exec \"$2\" verify -v --root root --repo repo \"repo/dave@example.com/../dave@example.com/$3\"",
                "sh",
                fixture.folder.path, GranaryProcess.binDirectory + "/granary", name,
            ])
        #expect(relative.status == 0, "\(relative.stderr)")
        #expect(relative.stdout.contains("ok  dave@example.com/\(name)"), "\(relative.stdout)")
        #expect(FileSystem.isRegularFile(VerificationRecord.path(for: fixture.repo + "/dave@example.com/" + name)))
        // Before: a path to no file was looked up as a bare name among every user's archives, and
        // delete --force removed whichever archive of that name it found first.
        try FileSystem.makeDirectory(fixture.folder.child("nowhere"))
        for missing in [fixture.folder.child("nowhere/" + name), "nowhere/x/" + name] {
            let result = try fixture.granary(["delete", "--force", missing])
            #expect(result.status == 66, "\(missing): \(result.stderr)")
        }
        #expect(FileSystem.isRegularFile(fixture.repo + "/dave@example.com/" + name))
        #expect(FileSystem.isRegularFile(fixture.repo + "/carol@example.com/" + fixture.archive("carol@example.com")))
    }

    @Test("a file that is not an archive is called so (65), never a damaged archive, and nothing is written beside it")
    func notAnArchive() throws {
        let fixture = try Fixture()
        let garbage = fixture.folder.child("loose/20261123T150043Z.tar.zst")
        try FileSystem.makeDirectory(fixture.folder.child("loose"))
        try Data("not an archive at all".utf8).write(to: URL(fileURLWithPath: garbage))
        for arguments in [
            ["verify", "/etc/passwd"], ["verify", "--force", "/etc/passwd"], ["delete", "--force", "/etc/passwd"],
            ["verify", garbage], ["delete", garbage],
        ] {
            let result = try fixture.granary(arguments)
            #expect(result.status == 65, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("is not a granary archive"), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("damaged"), "\(arguments): \(result.stderr)")
        }
        #expect(FileSystem.contents(of: fixture.folder.child("loose")) == ["20261123T150043Z.tar.zst"])
        #expect(FileSystem.isRegularFile("/etc/passwd"))
    }

    @Test(
        "hints are command lines that run as shown: the user and archive of a restore, quoted; inspect names a store by its full path"
    )
    func hints() throws {
        let folder = TemporaryFolder("granary-hints")
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        let user = "bob smith@example.com"
        try FileSystem.makeDirectory(root + "/" + user)
        try SampleData.makeItemsStore(root + "/" + user + "/Local.sqlite", rows: 5, walOnlyTail: 0)
        let good = try RestoreFixtures.archive(root: root, repo: repo, user: user)
        let bad = try RestoreFixtures.archive(root: root, repo: repo, user: user, label: "bad")
        var bytes = [UInt8](FileManager.default.contents(atPath: bad)!)
        for i in (bytes.count / 2)..<(bytes.count / 2 + 16) { bytes[i] ^= 0xFF }
        try Data(bytes).write(to: URL(fileURLWithPath: bad))
        let restore = try GranaryProcess.run(["restore", user, "--root", root, "--repo", repo])
        #expect(restore.status == 65, "\(restore.stderr)")
        let hint =
            "Try: granary restore 'bob smith@example.com' \((good as NSString).lastPathComponent)\n"
        #expect(restore.stderr.contains(hint), "\(restore.stderr)")
        #expect(!restore.stderr.contains("USER"), "\(restore.stderr)")

        // A store named relative to the current folder is shown by its full path.
        let userFolder = (root as NSString).standardizingPath + "/" + user
        try Data("SQLite format 3\u{0}garbage, not a page".utf8).write(
            to: URL(fileURLWithPath: userFolder + "/Default.sqlite"))
        func inspect(_ name: String) throws -> GranaryProcess.Result {
            try GranaryProcess.runExecutable(
                "/bin/sh",
                [
                    "-c", "cd \"$1\" && exec \"$2\" inspect \"$3\"", "sh", userFolder,
                    GranaryProcess.binDirectory + "/granary", name,
                ])
        }
        let damaged = try inspect("Default.sqlite")
        #expect(damaged.status == 65, "\(damaged.stderr)")
        #expect(damaged.stderr.hasPrefix("granary: \(userFolder)/Default.sqlite: "), "\(damaged.stderr)")
        #expect(damaged.stderr.contains("Hint: the store is damaged"), "\(damaged.stderr)")
        let missing = try inspect("Missing.sqlite")
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(missing.stderr.hasPrefix("granary: \(userFolder)/Missing.sqlite: no such file"), "\(missing.stderr)")
        try Data("plain text".utf8).write(to: URL(fileURLWithPath: userFolder + "/notes.txt"))
        let text = try inspect("notes.txt")
        #expect(text.status == 65, "\(text.stderr)")
        #expect(
            text.stderr.contains("\(userFolder)/notes.txt: is neither a SQLite store nor a granary archive"),
            "\(text.stderr)")
        #expect(!text.stderr.contains("damaged"), "\(text.stderr)")
    }
}
