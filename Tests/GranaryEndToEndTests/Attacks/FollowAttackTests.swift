import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// `granary follow` (root, one process for every user) against a user who controls their own
    /// folder: what it reads of their `-wal` and `-shm`, and what their stores cost everyone else.
    @Suite("follow: one user against everyone else's following")
    struct Follow {
        /// Writes `rows` rows holding `marker` into `path` (a WAL store) and keeps its `-wal` on
        /// close, so that the bytes stay in the `-wal` for a follower to read.
        static func write(_ path: String, marker: String, rows: Int = 5) throws {
            let db = try Database(path: path, mode: .readWrite)
            try db.execute("PRAGMA wal_autocheckpoint=0")
            for row in 0..<rows {
                try db.run("INSERT INTO notes(body) VALUES (?)", [.text("\(marker) followed row \(row)")])
            }
            try db.keepWALOnClose()
        }

        /// `write`s `rows` rows into the victim's and the attacker's `Local.sqlite` (in that order,
        /// or the attacker's first) and gives each home back to its user.
        static func writeBoth(_ lab: Lab, rows: Int = 5, attackerFirst: Bool = false) throws {
            let sides = [
                (lab.victimHome, lab.victimMarker, lab.victim), (lab.attackerHome, lab.attackerMarker, lab.attacker),
            ]
            for (home, marker, _) in attackerFirst ? sides.reversed() : sides {
                try write(home + "/Local.sqlite", marker: marker, rows: rows)
            }
            for (home, _, user) in sides { Lab.chownTree(home, to: user) }
        }

        /// `write`s `rows` rows into the attacker's `store`, gives their home back to them and runs
        /// `follow --once attacker` (with `config`): its outcome.
        static func writeAndFollow(_ lab: Lab, _ store: String, rows: Int = 5, config: String? = nil) throws -> Outcome
        {
            try write(store, marker: lab.attackerMarker, rows: rows)
            Lab.chownTree(lab.attackerHome, to: lab.attacker)
            return try lab.granary(
                ["follow", "--once", "attacker"] + (config.map { ["--config", $0] } ?? []), timeout: 120)
        }

        static func userID(_ name: String) throws -> UserID { try UserID(name) }

        static func generations(_ lab: Lab, _ user: String) throws -> [FollowCatalogue.Generation] {
            FollowCatalogue.generations(in: lab.repo, user: try userID(user), host: nil)
        }

        static func segmentCount(_ lab: Lab, _ user: String) throws -> Int {
            try generations(lab, user).reduce(0) { $0 + $1.segments.count }
        }

        /// Every foreign marker found in the attacker's segments (each decompressed with stock zstd).
        static func foreignBytesInSegments(_ lab: Lab) throws -> [String] {
            var found: [String] = []
            for generation in try generations(lab, "attacker") {
                for segment in generation.segments {
                    let text = try GranaryProcess.runExecutable("/usr/bin/zstd", ["-dc", segment.path]).stdout
                    for marker in lab.foreignMarkers where text.contains(marker) {
                        found.append("\(segment.name): \(marker)")
                    }
                }
            }
            return found
        }

        /// Waits (polling) until `condition` holds; false at the deadline.
        static func waitFor(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if try condition() { return true }
                usleep(100_000)
            }
            return try condition()
        }

        /// `restore USER --at MOMENT --to` a fresh folder: the outcome and the restored store.
        static func restore(_ lab: Lab, _ user: String, at moment: Int64, into name: String) throws -> (
            Outcome, String
        ) {
            let target = lab.base + "/" + name
            #expect(mkdir(target, 0o700) == 0)
            let outcome = try lab.granary(
                ["restore", user, "--at", ArchiveName.stamp(micros: moment, precise: true), "--to", target],
                timeout: 120)
            return (outcome, target + "/Local.sqlite")
        }

        @Test(
            "a -wal swapped for a link to another user's -wal, a hard link to it, a FIFO, a device or a link to /dev/zero is never read: the attacker's following pauses or starts again, the victim's goes on in the same run"
        )
        func walSwaps() throws {
            let lab = try Lab()
            let victimStore = lab.victimHome + "/Local.sqlite"
            let attackerStore = lab.attackerHome + "/Local.sqlite"
            try Self.writeBoth(lab)
            let first = try lab.granary(["follow", "--once"], timeout: 120)
            try #require(first.status == 0, "\(first)")
            try #require(try Self.segmentCount(lab, "victim") == 1 && Self.segmentCount(lab, "attacker") == 1)
            let swaps: [(String, (String) throws -> Void)] = [
                ("a link to the victim's -wal", { lab.symlink($0, to: victimStore + "-wal") }),
                (
                    "a hard link to the victim's -wal",
                    { path in
                        FileSystem.removeTree(path)
                        #expect(Glibc.link(victimStore + "-wal", path) == 0, "link: \(errno)")
                    }
                ),
                ("a FIFO", { try lab.makeSpecial(.fifo, at: $0) }),
                ("a device", { try lab.makeSpecial(.device, at: $0) }),
                ("a link to /dev/zero", { try lab.makeSpecial(.zeroLink, at: $0) }),
            ]
            for (what, swap) in swaps {
                // Both owners commit: the victim's rows must be shipped, the attacker's -wal is swapped.
                try Self.write(victimStore, marker: lab.victimMarker, rows: 2)
                Lab.chownTree(lab.victimHome, to: lab.victim)
                try Self.write(attackerStore, marker: lab.attackerMarker, rows: 2)
                try swap(attackerStore + "-wal")
                let victimSegments = try Self.segmentCount(lab, "victim")
                let before = lab.watch()
                let outcome = try lab.granary(["follow", "--once"], timeout: 120)
                Lab.expectDocumented(outcome, "follow with the attacker's -wal \(what)")
                #expect(outcome.status == 0, "\(what): \(outcome)")
                #expect(
                    try Self.segmentCount(lab, "victim") == victimSegments + 1,
                    "\(what): the victim's commits were not shipped in the same run: \(outcome)")
                // Reading the victim's store takes a read mark in its -shm, nothing else changes.
                let after = lab.watch()
                let unchanged = { (lines: [String]) in Set(lines.filter { !$0.hasPrefix("Local.sqlite-shm ") }) }
                #expect(unchanged(before.victim) == unchanged(after.victim), "\(what): the victim's folder changed")
                #expect(before.etc == after.etc && before.secret == after.secret, "\(what): outside files changed")
                let leaked = try Self.foreignBytesInSegments(lab) + lab.foreignBytesInArchives()
                #expect(leaked.isEmpty, "\(what): the attacker's segments or archives hold others' bytes: \(leaked)")
                // The attacker's own store again, for the next swap.
                FileSystem.removeTree(attackerStore + "-wal")
            }
        }

        @Test(
            "a -wal frame with a valid checksum continuing the chain that claims a database past bytes_per_user: the attacker's following starts again and pauses with the reason, nothing past the cap is shipped or restored, the victim ships in the same run"
        )
        func frameClaimingPastTheCap() throws {
            let lab = try Lab()
            let config = lab.base + "/granary.toml"
            try Lab.write(config, "[limits]\nbytes_per_user = \"64MiB\"\n", mode: 0o644)
            let attackerStore = lab.attackerHome + "/Local.sqlite"
            try Self.writeBoth(lab)
            let first = try lab.granary(["follow", "--once", "--config", config], timeout: 120)
            try #require(first.status == 0, "\(first)")
            let attackerSegments = try Self.segmentCount(lab, "attacker")
            let victimSegments = try Self.segmentCount(lab, "victim")
            // The attacker commits, then appends a commit frame saying the database is 1 GiB
            // (262,144 pages of 4 KiB), its checksum continuing the chain.
            try Self.writeBoth(lab, rows: 2, attackerFirst: true)
            let appended = try lab.helper("walframe.py", [attackerStore, "1", "262144"])
            #expect(appended.wait(timeout: 30).status == 0)
            let outcome = try lab.granary(["follow", "--once", "--config", config], timeout: 120)
            Lab.expectDocumented(outcome, "follow with a frame claiming 1 GiB")
            #expect(
                outcome.stderr.contains("attacker")
                    && (outcome.stderr.contains("262144 pages, past the cap")
                        || outcome.stderr.contains("bytes_per_user")),
                "the attacker's journal line does not say why: \(outcome)")
            #expect(try Self.segmentCount(lab, "victim") == victimSegments + 1, "\(outcome)")
            // Nothing of the frame was shipped: every attacker segment replays within the cap.
            #expect(try Self.segmentCount(lab, "attacker") == attackerSegments, "\(outcome)")
            let verify = try lab.granary(["verify", "--user", "attacker", "--config", config], timeout: 120)
            #expect(verify.status == 0, "\(verify)")
            let last = try #require(try Self.generations(lab, "attacker").last?.segments.last)
            let (restore, restored) = try Self.restore(lab, "attacker", at: last.last, into: "at-cap")
            #expect(restore.status == 0, "\(restore)")
            let size = FileSystem.status(restored).map { Int64($0.st_size) } ?? 0
            #expect(size > 0 && size <= 64 << 20, "the restored store is \(size) bytes")
        }

        @Test(
            "the same frame while the owner keeps the store open (SQLite's index does not show it, a backup succeeds): no generation is attempted, so no base archive is left per attempt; paused with the reason"
        )
        func frameClaimingPastTheCapWhileOpen() throws {
            let lab = try Lab()
            let config = lab.base + "/granary.toml"
            try Lab.write(config, "[limits]\nbytes_per_user = \"64MiB\"\n", mode: 0o644)
            let attackerStore = lab.attackerHome + "/Local.sqlite"
            let first = try Self.writeAndFollow(lab, attackerStore, config: config)
            try #require(first.status == 0, "\(first)")
            // The owner's connection stays open (a write transaction held): its -shm index ends at
            // its last commit, so SQLite's readers (a backup) do not see the frame appended after.
            let holder = try lab.helper("hold.py", ["sqlite", attackerStore])
            defer { holder.stop() }
            let appended = try lab.helper("walframe.py", [attackerStore, "1", "262144"])
            #expect(appended.wait(timeout: 30).status == 0)
            let archives = lab.attackerArchives().count
            for run in 1...2 {
                let outcome = try lab.granary(["follow", "--once", "attacker", "--config", config], timeout: 120)
                Lab.expectDocumented(outcome, "follow \(run) with a frame claiming 1 GiB")
                #expect(outcome.stderr.contains("262144 pages, past the cap"), "run \(run): \(outcome)")
            }
            #expect(
                lab.attackerArchives().count == archives,
                "each attempt left a base archive: \(lab.attackerArchives().count - archives) more")
        }

        @Test(
            "restore --at (a replay) into the live folder whose -wal, store or Data/ is a link to the victim's: refused naming it, or only the attacker's own name replaced; nothing of the victim's read, written or archived"
        )
        func restoreAtThroughLinks() throws {
            let lab = try Lab()
            let store = lab.attackerHome + "/Local.sqlite"
            try #require(try Self.writeAndFollow(lab, store).status == 0)
            try #require(try Self.writeAndFollow(lab, store, rows: 3).status == 0)
            let last = try #require(try Self.generations(lab, "attacker").last?.segments.last)
            let moment = ArchiveName.stamp(micros: last.last, precise: true)
            for path in ["Local.sqlite-wal", "Local.sqlite", "Data"] {
                // The attacker's folder whole again (the newest archive), then the link.
                let reset = try lab.granary(["restore", "attacker", "--force"], timeout: 120)
                #expect(reset.status == 0, "\(reset)")
                lab.symlink(lab.attackerHome + "/" + path, to: lab.victimHome + "/" + path)
                let before = lab.watch()
                let outcome = try lab.granary(["restore", "attacker", "--at", moment, "--force"], timeout: 120)
                let context = "restore --at with \(path) a link to the victim's"
                Lab.expectDocumented(outcome, context)
                #expect(
                    outcome.status == 0 || outcome.stderr.contains(path),
                    "\(context): refused without naming it: \(outcome)")
                if outcome.status == 0 {
                    #expect(outcome.stderr.contains("within the followed window"), "\(context): \(outcome)")
                }
                try lab.expectContained(since: before, context)
                // The attacker's folder as it was for the next case.
                let recover = try lab.granary(["recover", "attacker"], timeout: 60)
                #expect(recover.status == 0, "\(context): recover: \(recover)")
                if let entry = FileSystem.status(lab.attackerHome + "/" + path), entry.st_mode & S_IFMT == S_IFLNK {
                    unlink(lab.attackerHome + "/" + path)
                }
            }
        }

        @Test(
            "a transaction larger than a turn's 64 MiB is shipped whole in the next turn, not left unread at every turn"
        )
        func largeTransaction() throws {
            let lab = try Lab()
            let store = lab.attackerHome + "/Local.sqlite"
            let first = try Self.writeAndFollow(lab, store, rows: 1)
            try #require(first.status == 0, "\(first)")
            try #require(try Self.segmentCount(lab, "attacker") == 1)
            // One transaction of 80 MiB of page images (zeros: the segment stays small).
            let db = try Database(path: store, mode: .readWrite)
            try db.execute("PRAGMA wal_autocheckpoint=0")
            try db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 80) INSERT INTO notes(body) SELECT zeroblob(1048576) FROM n"
            )
            try db.keepWALOnClose()
            Lab.chownTree(lab.attackerHome, to: lab.attacker)
            for turn in 1...2 {
                let again = try lab.granary(["follow", "--once", "attacker"], timeout: 300)
                #expect(again.status == 0, "turn \(turn): \(again)")
            }
            let generations = try Self.generations(lab, "attacker")
            #expect(generations.count == 1, "no new generation was needed: \(generations.map(\.name))")
            let segments = try #require(generations.last).segments
            #expect(segments.count >= 2, "the 80 MiB transaction was never shipped: \(segments.map(\.name))")
            guard segments.count >= 2 else { return }
            let (_, trailer) = try SegmentReader.check(segments[1].path)
            #expect(trailer.commits == 1 && trailer.frames >= 80 * 256, "\(trailer)")
            let (outcome, restored) = try Self.restore(lab, "attacker", at: segments[1].last, into: "at-large")
            #expect(outcome.status == 0 && outcome.stderr.contains("within the followed window"), "\(outcome)")
            let check = try Database(path: restored, mode: .readOnly)
            #expect(check.integrityCheck(full: true) == ["ok"])
            #expect(
                try check.scalar("SELECT count(*) FROM notes WHERE length(body) = 1048576")?.integer == 80,
                "the restored store lacks the large transaction")
        }

        @Test(
            "stores whose -shm keeps SQLite from beginning a read (about 10 s per open) cost their user, not the victim: the victim's commit is shipped inside its window"
        )
        func hostileSHM() throws {
            let lab = try Lab()
            let victimStore = lab.victimHome + "/Local.sqlite"
            try Self.write(victimStore, marker: lab.victimMarker, rows: 1)
            Lab.chownTree(lab.victimHome, to: lab.victim)
            var stores = [lab.attackerHome + "/Local.sqlite"]
            for index in 1...3 {
                let path = lab.attackerHome + "/Hostile\(index).sqlite"
                try Lab.makeStore(path, wal: true, marker: lab.attackerMarker)
                stores.append(path)
            }
            Lab.chownTree(lab.attackerHome, to: lab.attacker)
            // Each of the attacker's stores: its -shm header copies apart, the write lock held, and
            // its -wal touched every 0.2 s (an event for the follower each time).
            let hostile = try lab.helper("shm.py", stores)
            defer { hostile.stop() }
            // A long interval (10 s: a moment is claimed only if every commit acknowledged 10 s
            // before it was observed by then), so that only a turn that waits far longer shows.
            let follow = try FollowProcess(
                root: lab.root, repo: lab.repo, log: lab.base + "/follow.log", interval: "10s")
            defer { follow.stop(SIGKILL) }
            let started = try Self.waitFor(300) { try Self.segmentCount(lab, "victim") >= 1 }
            try #require(started, "the victim's following never started: \(follow.journal)")
            let marker = "AFTER-" + UUID().uuidString
            try Self.write(victimStore, marker: marker, rows: 1)
            // The moment a little more than the interval after the commit was acknowledged: a
            // window may claim it only if the commit was observed by then.
            let moment = ArchiveName.micros(Date()) + 10_500_000
            while ArchiveName.micros(Date()) < moment + 500_000 { usleep(100_000) }
            // A later commit, so that the window reaches past the moment.
            try Self.write(victimStore, marker: "LATER-" + UUID().uuidString, rows: 1)
            let arrived = try Self.waitFor(300) {
                try Self.generations(lab, "victim").last?.segments.last.map { $0.last > moment } ?? false
            }
            follow.stop()
            try #require(arrived, "the victim's commits were never shipped: \(follow.journal)")
            let (outcome, restored) = try Self.restore(lab, "victim", at: moment, into: "at-victim")
            #expect(
                outcome.status == 0 && outcome.stderr.contains("within the followed window"),
                "the victim's commit was observed late, behind the attacker's turns: \(outcome)\n\(follow.journal.suffix(3000))"
            )
            if outcome.status == 0 {
                let check = try Database(path: restored, mode: .readOnly)
                #expect(
                    try check.scalar("SELECT count(*) FROM notes WHERE body LIKE ?", [.text(marker + "%")])?.integer
                        == 1, "the victim's commit is not in the restore")
            }
            // The attacker's stores were named in the journal (their following paused or started
            // without read marks), and nothing of the victim's reached the attacker's segments.
            #expect(try Self.foreignBytesInSegments(lab).isEmpty)
        }
    }
}
