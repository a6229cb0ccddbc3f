import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A group the attacker is not in (made once, like the lab's users).
enum LabGroup {
    static func ensure(_ name: String) throws -> gid_t {
        if let entry = getgrnam(name) { return entry.pointee.gr_gid }
        let result = try GranaryProcess.runExecutable("/usr/sbin/groupadd", [name])
        guard let entry = getgrnam(name) else {
            throw LabError.setup("groupadd \(name) failed (\(result.status)): \(result.stderr)")
        }
        return entry.pointee.gr_gid
    }
}

extension Lab {
    /// Runs a shell command line as `user` (setpriv, no supplementary groups).
    @discardableResult
    func shell(as user: LabUser, _ script: String) throws -> Outcome {
        try run(as: user, ["/bin/sh", "-c", script])
    }

    /// Each entry under `path` with its uid, gid and mode (lstat).
    static func modes(under path: String) -> [(path: String, uid: uid_t, gid: gid_t, mode: mode_t, folder: Bool)] {
        var found: [(String, uid_t, gid_t, mode_t, Bool)] = []
        func walk(_ full: String) {
            guard let info = FileSystem.status(full) else { return }
            let folder = info.st_mode & S_IFMT == S_IFDIR
            found.append((full, info.st_uid, info.st_gid, info.st_mode & 0o7777, folder))
            if folder { for name in FileSystem.contents(of: full) { walk(full + "/" + name) } }
        }
        walk(path)
        return found
    }
}

extension AttackTests {
    /// Class 12: modes and groups. Root can set any bit and any group; a restore that copies
    /// what the user's files recorded must not give them what the kernel refuses them (a setgid
    /// program of a group they are not in).
    @Suite("12. setuid/setgid bits and groups on restored files")
    struct Modes {
        /// The attacker's folder `attacker:svc` 2770 (svc: a group they are not in; what is made in
        /// it inherits svc), and an attachment of their own bytes, group their own, mode 2755.
        static func setUp(_ lab: Lab) throws -> gid_t {
            let svc = try LabGroup.ensure("granary-svc")
            for entry in Lab.modes(under: lab.attackerHome) { lchown(entry.path, lab.attacker.uid, svc) }
            chmod(lab.attackerHome, 0o2770)
            let photo = lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1"
            // As the attacker: their own group, then g+s (allowed: they are in their own group).
            let made = try lab.shell(
                as: lab.attacker,
                "chgrp \(lab.attacker.gid) '\(photo)' && chmod 2755 '\(photo)' && stat -c %a '\(photo)'")
            try #require(made.status == 0 && made.stdout.contains("2755"), "\(made)")
            return svc
        }

        static func expectNoSetBits(
            _ lab: Lab, _ context: String, homeToo: Bool, sourceLocation: SourceLocation = #_sourceLocation
        ) {
            // The folder itself is the admin's (attacker:svc) unless the restore made it.
            for entry in Lab.modes(under: lab.attackerHome) where homeToo || entry.path != lab.attackerHome {
                if !entry.folder {
                    #expect(
                        entry.mode & 0o7000 == 0,
                        "\(context): \(entry.path) has mode \(String(entry.mode, radix: 8))",
                        sourceLocation: sourceLocation)
                } else {
                    #expect(
                        entry.mode & 0o4000 == 0, "\(context): \(entry.path) is setuid", sourceLocation: sourceLocation)
                }
                // Its group is one the attacker is in, or the group of the folder it is in.
                let parent = (entry.path as NSString).deletingLastPathComponent
                let parentGID = entry.path == lab.attackerHome ? nil : FileSystem.status(parent)?.st_gid
                #expect(
                    AccountNames.isMember(uid: lab.attacker.uid, of: entry.gid) || entry.gid == parentGID,
                    "\(context): \(entry.path) is in group \(entry.gid), which the attacker could not have set",
                    sourceLocation: sourceLocation)
            }
        }

        @Test("an attachment recorded 2755 comes back without its setgid bit, in a group the owner could set")
        func restoredAttachment() throws {
            let lab = try Lab()
            _ = try Self.setUp(lab)
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            try lab.shell(as: lab.attacker, "rm '\(lab.attackerHome)/.Local_SUPPORT/_EXTERNAL_DATA/photo-1'")
            let restore = try lab.granary(["restore", "attacker", "--force"])
            #expect(restore.status == 0, "\(restore)")
            let photo = try #require(FileSystem.status(lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1"))
            // Before: -rwxr-sr-x attacker:svc, a program running with svc's rights.
            #expect(photo.st_mode & 0o7777 == 0o755, "restored with mode \(String(photo.st_mode & 0o7777, radix: 8))")
            Self.expectNoSetBits(lab, "restore", homeToo: false)
        }

        @Test(
            "retire then restore --create: the folder and its files carry no set bits and no group the owner is not in")
        func retireAndCreate() throws {
            let lab = try Lab()
            let svc = try Self.setUp(lab)
            let retire = try lab.granary(["retire", "attacker", "--yes"])
            try #require(retire.status == 0, "\(retire)")
            let restore = try lab.granary(["restore", "attacker", "--create"])
            #expect(restore.status == 0, "\(restore)")
            let home = try #require(FileSystem.status(lab.attackerHome))
            #expect(home.st_gid != svc, "the folder came back in svc, a group the attacker is not in")
            Self.expectNoSetBits(lab, "restore --create", homeToo: true)
        }
    }

    /// Class 13: a sticky root (allowed: nobody can rename what is not theirs in it) lets any user
    /// make a name in it first.
    @Suite("13. names made first in a sticky root")
    struct StickyRoot {
        @Test("restore --create refuses a folder another user made for a retired user, naming them")
        func squattedUserFolder() throws {
            let lab = try Lab()
            chmod(lab.root, 0o1777)
            let backup = try lab.granary(["backup", "victim"])
            try #require(backup.status == 0, "\(backup)")
            let retire = try lab.granary(["retire", "victim", "--yes"])
            try #require(retire.status == 0, "\(retire)")
            try lab.shell(as: lab.attacker, "mkdir -m 0777 '\(lab.victimHome)'")
            let restore = try lab.granary(["restore", "victim", "--create"])
            // Before: the victim's stores were restored into the attacker's folder, as the attacker's files.
            Lab.expectRefused(restore, "restore --create into a squatted folder", codes: [73], naming: lab.victimHome)
            #expect(restore.stderr.contains(lab.attacker.name), "the squatter is not named: \(restore)")
            #expect(FileSystem.contents(of: lab.victimHome).isEmpty, "something was put in the squatted folder")
        }

        @Test("a .granary made first by a user is moved aside and named; every user's backup goes on")
        func squattedStateFolder() throws {
            let lab = try Lab()
            chmod(lab.root, 0o1777)
            try lab.shell(as: lab.attacker, "mkdir -m 0777 '\(lab.root)/.granary' && touch '\(lab.root)/.granary/mine'")
            let backup = try lab.granary(["backup", "--all"])
            // Before: exit 1 for everyone, "run as the user who owns it".
            #expect(backup.status == 0, "\(backup)")
            #expect(backup.stderr.contains(lab.attacker.name), "the squatter is not named: \(backup)")
            #expect(!backup.stderr.contains("run as the user who owns it"), "\(backup)")
            let state = try #require(FileSystem.status(lab.root + "/.granary"))
            #expect(state.st_uid == 0 && state.st_mode & 0o077 == 0, "the state folder is not root's alone")
            let aside = FileSystem.contents(of: lab.root).filter { $0.hasPrefix(".granary-squatted-") }
            #expect(aside.count == 1, "\(FileSystem.contents(of: lab.root))")
            #expect(
                FileSystem.contents(of: lab.root + "/" + (aside.first ?? "")) == ["mine"],
                "the squatter's folder was not kept as it was")
            #expect(FileSystem.contents(of: lab.repo + "/victim").contains { $0.hasSuffix(".tar.zst") })
        }

        @Test(".granary is not a user id")
        func stateFolderIsNoUser() throws {
            let lab = try Lab()
            for command in [
                ["backup", ".granary"], ["restore", ".granary", "--create"], ["retire", ".granary", "--yes"],
            ] {
                let outcome = try lab.granary(command)
                #expect(outcome.status == 64 && outcome.stderr.contains("state folder"), "\(command): \(outcome)")
            }
        }
    }

    /// Class 14: the work folder of remote repositories, in a folder every user can write.
    @Suite(
        "14. the work folder of remote repositories",
        .enabled(if: S3Server.available, S3Server.unavailableReason))
    struct WorkFolder {
        @Test(
            "a user making root's work folder (TMPDIR/granary-0, in a shared folder) first stops no backup to a remote repository"
        )
        func squattedWorkFolder() throws {
            guard let server = RemoteRepositoryTests.shared else {
                Issue.record("moto did not start")
                return
            }
            let lab = try Lab()
            let bucket = "wf" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            try server.makeBucket(bucket)
            // A shared folder such as /tmp or /var/tmp (root's, 1777), where the attacker makes the
            // name root's work folder had first. (Not /var/tmp itself: other runs on this host use it.)
            let shared = lab.base + "/tmp"
            try Lab.makeFolder(shared, mode: 0o1777)
            try lab.shell(as: lab.attacker, "mkdir -m 0700 '\(shared)/granary-0'")
            var environment = server.environment()
            environment["TMPDIR"] = shared
            let backup = try lab.granary(
                ["backup", "victim"], repo: initializedRepository("s3:\(bucket)/granary", environment: environment),
                environment: environment)
            // Before: 73 "is not a folder of uid 0 … Try: chown root …/granary-0".
            #expect(backup.status == 0, "\(backup)")
            #expect(!backup.stderr.contains("chown"), "\(backup)")
            let work = try #require(FileSystem.status(RcloneRepository.rootWorkFolder))
            #expect(work.st_uid == 0 && work.st_mode & 0o077 == 0)
            #expect(try server.objects(bucket + "/granary").keys.contains { $0.hasPrefix("victim/") })
        }
    }

    /// Class 15: hints that name what a user named. A "Try:" line is pasted into a root shell;
    /// every word must come back as the very name, and nothing in a name may run.
    @Suite("15. hints pasted into bash")
    struct Hints {
        static let hostile = [
            "$(touch PWNED)", "`touch PWNED`", "a'b\"c", "line\nbreak", "-rf", "x;touch PWNED", "sp ace",
        ]

        /// Runs `line` with bash in `folder`, with every program it may name replaced by a stub that
        /// writes its arguments (NUL-separated) to `args`; returns the arguments each stub got.
        static func paste(_ line: String, in folder: String) throws -> [[String]] {
            let stubs = folder + "/bin"
            try FileSystem.makeDirectory(stubs)
            for program in ["granary", "sqlite3", "chown", "chmod", "apt-get", "install", "rm", "mv"] {
                try Lab.write(
                    stubs + "/" + program,
                    "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" >> '\(folder)/args'\nprintf '\\001' >> '\(folder)/args'\n",
                    mode: 0o755)
            }
            let result = try GranaryProcess.runExecutable(
                "/bin/bash", ["--norc", "--noprofile", "-c", "cd '\(folder)' && " + line],
                environment: ["PATH": stubs])
            _ = result
            let text = (try? Data(contentsOf: URL(fileURLWithPath: folder + "/args"))) ?? Data()
            unlink(folder + "/args")
            return text.split(separator: 1, omittingEmptySubsequences: true).map { call in
                call.split(separator: 0, omittingEmptySubsequences: false).dropLast().map {
                    String(decoding: $0, as: UTF8.self)
                }
            }
        }

        /// Every hint line of `stderr` is marked (Try: or Hint:); the Try: lines, pasted, run
        /// nothing but their programs, with `name` as one whole argument.
        static func expectSafe(
            _ stderr: String, name: String, in folder: String, _ context: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) throws {
            let lines = stderr.split(separator: "\n").map(String.init)
            let tries = lines.filter { $0.hasPrefix("Try: ") }
            #expect(!tries.isEmpty, "\(context): no Try: line: \(stderr)", sourceLocation: sourceLocation)
            for line in tries {
                let calls = try paste(String(line.dropFirst(5)), in: folder)
                #expect(
                    FileSystem.status(folder + "/PWNED") == nil, "\(context): pasting \(line) ran a name",
                    sourceLocation: sourceLocation)
                #expect(!calls.isEmpty, "\(context): \(line) ran nothing", sourceLocation: sourceLocation)
                for call in calls {
                    #expect(
                        call.contains { $0.hasSuffix(name) }, "\(context): \(line) → \(call) lost the name \(name)",
                        sourceLocation: sourceLocation)
                }
            }
        }

        @Test("reset's sqlite3 hint, and the config and root ownership hints, quote every word")
        func pastedHints() throws {
            let lab = try Lab()
            let scratch = lab.base + "/paste"
            try FileSystem.makeDirectory(scratch)
            for (index, name) in Self.hostile.enumerated() {
                // A configuration file that is not root's: Try: chown root -- FILE && chmod go-w -- FILE.
                let folder = lab.base + "/cfg\(index)"
                try FileSystem.makeDirectory(folder)
                let config = folder + "/" + name + ".toml"
                try Lab.write(config, "", mode: 0o644)
                lchown(config, lab.attacker.uid, lab.attacker.gid)
                let users = try lab.granary(["users", "--config", config])
                #expect(users.status == 64, "\(name): \(users)")
                try Self.expectSafe(users.stderr, name: name + ".toml", in: scratch, "config \(name)")
                // A store reset cannot empty (a schema statement it will not run): Try: sqlite3 -readonly STORE .schema.
                let store = lab.attackerHome + "/" + name + ".sqlite"
                let db = try Database(path: store, mode: .create)
                try db.execute("CREATE TABLE t(x)")
                try db.execute("PRAGMA writable_schema=ON")
                try db.execute("UPDATE sqlite_schema SET sql = 'CREATE TABLE t(x); DROP TABLE t' WHERE name = 't'")
                try db.execute("PRAGMA writable_schema=OFF")
                lchown(store, lab.attacker.uid, lab.attacker.gid)
                let reset = try lab.granary(["reset", "attacker", "--dry-run"])
                if reset.stderr.contains("Try: sqlite3") {
                    try Self.expectSafe(reset.stderr, name: name + ".sqlite", in: scratch, "reset \(name)")
                } else {
                    Issue.record("\(name): reset gave no sqlite3 hint: \(reset)")
                }
                unlink(store)
            }
        }

        @Test("prose hints are marked as prose")
        func proseIsMarked() throws {
            let lab = try Lab()
            let outcome = try lab.granary(["backup", "nobody-here"])
            #expect(outcome.stderr.contains("\nHint: "), "\(outcome)")
            #expect(!outcome.stderr.contains("Try: granary users lists"), "\(outcome)")
        }
    }

    /// Class 16: the rest of the third round.
    @Suite("16. hard-linked hints, configuration ancestors, retire's fingerprint, restore --to, load_extension")
    struct Odds {
        @Test("a hard link to another user's file is never answered with 'give it to the folder's owner (chown)'")
        func hardLinkHint() throws {
            // photo-2 is the victim's and readable (0644), photo-1 the victim's alone (0600).
            for source in ["photo-2", "photo-1"] {
                let lab = try Lab()
                let planted = lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-3"
                try #require(link(lab.victimHome + "/.Local_SUPPORT/_EXTERNAL_DATA/" + source, planted) == 0)
                let backup = try lab.granary(["backup", "attacker"])
                Lab.expectRefused(backup, "backup with a hard link to the victim's \(source)", naming: "photo-3")
                #expect(!backup.stderr.contains("chown"), "\(source): \(backup)")
            }
        }

        @Test("a configuration file in a folder a user owns higher up is refused, naming that folder")
        func configAncestors() throws {
            let lab = try Lab()
            let theirs = lab.base + "/theirs"
            try Lab.makeFolder(theirs + "/etc", mode: 0o755)
            try Lab.write(theirs + "/etc/config.toml", "root = \"\(lab.root)\"\n", mode: 0o644)
            chown(theirs, lab.attacker.uid, lab.attacker.gid)
            let users = try lab.granary(["users", "--config", theirs + "/etc/config.toml"])
            // Before: the file and its own folder were root's, so it was read (and the attacker
            // could rename etc/ away and put their own in its place).
            #expect(users.status == 64, "\(users)")
            #expect(users.stderr.contains(theirs) && users.stderr.contains("uid \(lab.attacker.uid)"), "\(users)")
        }

        @Test("retire sees an attachment rewritten in place with its modification time put back")
        func retireSeesCtime() throws {
            let lab = try Lab()
            let photo = lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-2"
            // The final archive is written, not yet verified.
            let run = try lab.start(
                ["retire", "attacker", "--yes"], environment: ["GRANARY_TEST_PAUSE_AT": "retireArchived"])
            let deadline = Date().addingTimeInterval(30)
            while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
            try #require(run.isStopped, "retire did not pause")
            let rewrite = try lab.shell(
                as: lab.attacker,
                "f='\(photo)'; t=$(stat -c %y \"$f\"); printf 'NEW-BYTES-SAME-LENGTH' | dd of=\"$f\" conv=notrunc status=none && touch -d \"$t\" \"$f\""
            )
            #expect(rewrite.status == 0, "\(rewrite)")
            kill(run.pid, SIGCONT)
            let outcome = run.wait(timeout: 60)
            // Before: retired, and the rewrite (after the final archive) was lost with the folder.
            #expect(outcome.status == 75, "\(outcome)")
            #expect(FileSystem.status(photo) != nil, "the folder was removed with a change no archive holds")
        }

        @Test("a store whose kept table has a CHECK calling load_extension fails reset with 65 (its data), not 74")
        func loadExtensionIsData() throws {
            let lab = try Lab()
            let store = lab.attackerHome + "/Ext.sqlite"
            let db = try Database(path: store, mode: .create)
            try db.execute(
                "CREATE TABLE t(a INTEGER CHECK (a IS NULL OR load_extension('/nonexistent-granary') IS NULL))")
            try db.execute("PRAGMA ignore_check_constraints=ON")
            try db.execute("INSERT INTO t(a) VALUES (1)")
            lchown(store, lab.attacker.uid, lab.attacker.gid)
            let config = try lab.rootFile("keep.toml", "[reset]\nkeep_tables = [\"t\"]\n")
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            // Emptying the store copies the kept table's rows, and SQLite refuses the CHECK.
            let reset = try lab.granary(["reset", "attacker", "--yes", "--config", config])
            Lab.expectRefused(reset, "reset of a store calling load_extension", codes: [65], naming: "Ext.sqlite")
            #expect(reset.stderr.contains("not authorized"), "\(reset)")
        }

        @Test("restore --to refuses a folder another user owns or can write")
        func restoreToTheirs() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "victim"])
            try #require(backup.status == 0, "\(backup)")
            let owned = lab.base + "/owned"
            try Lab.makeFolder(owned, mode: 0o755)
            chown(owned, lab.attacker.uid, lab.attacker.gid)
            let open = lab.base + "/open"
            try Lab.makeFolder(open, mode: 0o777)
            for target in [owned, open, owned + "/new"] {
                let restore = try lab.granary(["restore", "victim", "--to", target])
                Lab.expectRefused(restore, "restore --to \(target)", codes: [73], naming: target)
                #expect(Lab.files(under: target).isEmpty, "\(target): \(Lab.files(under: target))")
            }
            let fine = lab.base + "/fine"
            let restore = try lab.granary(["restore", "victim", "--to", fine])
            #expect(restore.status == 0, "\(restore)")
        }
    }
}
