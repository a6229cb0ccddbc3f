import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Prune merging deltas (issue 35, ``DeltaMerge``) and the crash tests of writing a delta and of
/// that merge, with the built binary over granary-sample's users.
@Suite("delta merges and crashes")
struct DeltaMergeTests {
    static let alice = DeltaArchiveTests.alice

    /// A chain on alice's stores: a full with page hashes, then `deltas` deltas, each after a
    /// change; returns the names (oldest first) and the `.dump` of Local.sqlite at each backup.
    /// `spaced` puts a second between backups (distinct seconds, for `--at`), on the test clock
    /// (a minute ago and on from there) rather than by waiting.
    static func chain(_ site: SampleSite, deltas: Int, spaced: Bool = false, options: [String] = []) throws -> (
        names: [String], dumps: [String]
    ) {
        let store = site.root + "/\(alice)/Local.sqlite"
        let db = try Database(path: store, mode: .readWrite)
        var dumps: [String] = []
        // Some 150 pages, so that a few changed pages stay well under the share that forces a full.
        try db.execute(
            "INSERT INTO items(body, created) SELECT hex(randomblob(250)), 0 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT x FROM c)"
        )
        let start = Date(timeIntervalSinceNow: -60)
        for step in 0...deltas {
            if step > 0 {
                // A few pages each time (a delta, not a full by changed share), some the same page again.
                try db.execute("UPDATE items SET body = 'step \(step)' WHERE id IN (3, \(7 * step))")
                try db.execute(
                    "INSERT INTO items(body, created) SELECT hex(randomblob(200)), \(step) FROM items LIMIT \(4 * step)"
                )
            }
            dumps.append(try DeltaArchiveTests.dump(store))
            let made = try site.granary(
                ["backup", alice, "--delta"] + options, environment: spaced ? testClock(start + Double(step)) : [:])
            #expect(made.status == 0, "\(made.stderr)")
        }
        let names = Self.archives(site)
        #expect(names.count == deltas + 1, "\(names)")
        #expect(names.dropFirst().allSatisfy { $0.contains("-delta.") }, "\(names)")
        return (names, dumps)
    }

    /// Restores `archive` of alice into a new folder and returns Local.sqlite's `.dump` (nil when
    /// the restore failed).
    static func restored(_ site: SampleSite, _ archive: String, _ tag: String) throws -> String? {
        let target = site.folder.child("out-\(tag)")
        try FileSystem.makeDirectory(target)
        let result = try site.granary(["restore", alice, archive, "--to", target])
        guard result.status == 0 else { return nil }
        return try DeltaArchiveTests.dump(target + "/Local.sqlite")
    }

    /// alice's archives in granary's order (time, sequence, label): a full and a delta of the same
    /// second sort so, not as their file names do.
    static func archives(_ site: SampleSite) -> [String] {
        site.archives(alice).sorted {
            guard let a = ArchiveName(fileName: $0), let b = ArchiveName(fileName: $1) else { return $0 < $1 }
            return a < b
        }
    }

    static func size(_ site: SampleSite, _ name: String) -> Int64 {
        FileSystem.status(site.repo + "/\(alice)/" + name).map { Int64($0.st_size) } ?? 0
    }

    @Test(
        "prune merges the deltas only a kept delta needs into one delta on the kept full: published and proven first, it restores the kept delta's state with fewer bytes, and --at finds it"
    )
    func mergedDelta() throws {
        let site = try SampleSite()
        let (names, dumps) = try Self.chain(site, deltas: 4, spaced: true)
        // The full is the newest verified archive: kept for its own sake, so the merge is a delta on it.
        #expect(try site.granary(["verify", "\(Self.alice)/\(names[0])"]).status == 0)
        let dry = try site.granary(["prune", Self.alice, "--keep-last", "1", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("merge") && dry.stdout.contains("into a delta on \(names[0])"), "\(dry.stdout)")
        #expect(Self.archives(site) == names, "a dry run changes nothing")
        let replacedBytes = names.dropFirst().reduce(Int64(0)) { $0 + Self.size(site, $1) }
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1", "-v", "--json"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(try ShellTools.schemaProblems(pruned.stdout, schema: "prune").isEmpty)
        let after = Self.archives(site)
        #expect(after.count == 2 && after[0] == names[0], "\(after)")
        let merged = after.last ?? ""
        // The newest replaced delta's time and label, the next sequence.
        #expect(merged == names[4].replacingOccurrences(of: "-delta", with: "_2-delta"), "\(merged)")
        #expect(Self.size(site, merged) < replacedBytes, "\(Self.size(site, merged)) vs \(replacedBytes)")
        #expect(try Self.restored(site, merged, "merged") == dumps[4])
        let verified = try site.granary(["verify", "--all", "--chain"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        // restore --at the replaced delta's time finds the merged archive; list shows it verified.
        let target = site.folder.child("at")
        try FileSystem.makeDirectory(target)
        let stamp = String(names[4].prefix(23))
        let at = try site.granary(["restore", Self.alice, "--at", stamp, "--to", target])
        #expect(at.status == 0, "\(at.stderr)")
        #expect(try DeltaArchiveTests.dump(target + "/Local.sqlite") == dumps[4])
        // A second prune has nothing to merge.
        let again = try site.granary(["prune", Self.alice, "--keep-last", "1"])
        #expect(again.status == 0)
        #expect(Self.archives(site) == after)
    }

    @Test(
        "prune keeps a chain's full that nothing else keeps and merges the deltas only the kept delta needs into one delta on it (the full is never rewritten); --no-merge keeps the chain"
    )
    func mergedOnTheFull() throws {
        let site = try SampleSite()
        let (names, dumps) = try Self.chain(site, deltas: 3)
        let kept = try site.granary(["prune", Self.alice, "--keep-last", "1", "--no-merge"])
        #expect(kept.status == 0)
        #expect(Self.archives(site) == names, "--no-merge keeps the chain whole")
        let fullBytes = try FileDigest.of(site.repo + "/\(Self.alice)/" + names[0])
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1", "-v"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(pruned.stdout.contains("into a delta on \(names[0]) at \(names[3])"), "\(pruned.stdout)")
        let after = Self.archives(site)
        #expect(after.count == 2 && after.first == names[0], "\(after)")
        #expect(try FileDigest.of(site.repo + "/\(Self.alice)/" + names[0]) == fullBytes, "the full is not rewritten")
        let merged = after.last ?? ""
        #expect(merged == names[3].replacingOccurrences(of: "-delta", with: "_2-delta"), "\(merged)")
        #expect(try Self.restored(site, merged, "merged") == dumps[3])
        #expect(try Self.restored(site, names[0], "full") == dumps[0])
        // The next backup builds on it.
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        try db.execute("UPDATE items SET body = 'after' WHERE id = 5")
        let next = try site.granary(["backup", Self.alice, "--delta", "--json"])
        #expect(next.status == 0 && next.stdout.contains("\"base\" : \"\(merged)\""), "\(next.stdout) \(next.stderr)")
        #expect(try site.granary(["verify", "--all", "--chain"]).status == 0)
    }

    @Test(
        "a delta kept in the middle of a chain keeps its own bases; the run after it merges on it, and every kept delta restores its state"
    )
    func keptInTheMiddle() throws {
        let site = try SampleSite()
        let (names, dumps) = try Self.chain(site, deltas: 5)
        #expect(try site.granary(["verify", "\(Self.alice)/\(names[2])"]).status == 0)
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        let after = Self.archives(site)
        #expect(after.count == 4 && Array(after.prefix(3)) == Array(names.prefix(3)), "\(after)")
        #expect(try Self.restored(site, names[2], "middle") == dumps[2])
        #expect(try Self.restored(site, after[3], "tip") == dumps[5])
        #expect(try site.granary(["verify", "--all", "--chain"]).status == 0)
    }

    @Test(
        "a merge over a damaged chain fails the prune with exit 65 naming the archive, removes nothing and leaves no merged archive; --no-merge still prunes"
    )
    func damagedChain() throws {
        let site = try SampleSite()
        let (names, _) = try Self.chain(site, deltas: 3, options: ["--compression", "none"])
        // A byte of a page the middle delta carries changed: its manifest reads, its member does not check.
        let path = site.repo + "/\(Self.alice)/" + names[2]
        var bytes = [UInt8](FileManager.default.contents(atPath: path) ?? Data())
        let marker = Array("GRDELTA1".utf8)
        let start = try #require(
            (0..<(bytes.count - 64)).first { Array(bytes[$0..<$0 + 8]) == marker && bytes[$0 + 27] > 0 })
        bytes[start + 28 + 8 + 100] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1"])
        #expect(pruned.status == 65, "\(pruned.stdout) \(pruned.stderr)")
        #expect(
            pruned.stderr.contains("cannot merge the deltas before") && pruned.stderr.contains(names[2])
                && pruned.stderr.contains("prune --no-merge"), "\(pruned.stderr)")
        #expect(Self.archives(site) == names, "nothing removed, nothing added")
        let kept = try site.granary(["prune", Self.alice, "--keep-last", "1", "--no-merge"])
        #expect(kept.status == 0, "\(kept.stderr)")
        #expect(Self.archives(site) == names)
    }

    /// Every archive of alice passes `verify --chain` (a listed archive is whole and restorable).
    static func allSound(_ site: SampleSite, _ context: String) throws {
        for name in Self.archives(site) {
            let result = try site.granary(["verify", "\(Self.alice)/\(name)", "--chain"])
            #expect(result.status == 0, "\(context): \(name): \(result.stderr)")
        }
        // `list` shows exactly the published archives: nothing half-written passes for one.
        let listed = try site.granary(["list", Self.alice])
        #expect(listed.status == 0, "\(context): \(listed.stderr)")
        let shown = listed.stdout.split(separator: "\n").filter { $0.contains(".tar") }
        #expect(shown.count == Self.archives(site).count, "\(context): \(listed.stdout)")
    }

    @Test(
        "a backup --delta killed at each of its steps leaves every earlier archive intact and restorable, lists no half-written archive, and the next backup succeeds"
    )
    func deltaBackupCrashes() throws {
        let site = try SampleSite()
        let (names, dumps) = try Self.chain(site, deltas: 1)
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        var reached = 0
        for (index, step) in CrashPoints.plan(CrashPoint.Name.deltaBackup).enumerated() {
            try db.execute("UPDATE items SET body = 'crash \(index)' WHERE id = \(5 + index)")
            let before = Self.archives(site)
            let crashed = try site.granary(
                ["backup", Self.alice, "--delta"], environment: ["GRANARY_TEST_CRASH_AT": step])
            #expect(
                crashed.status == SIGKILL,
                "\(step): not killed there (\(crashed.status)): is GRANARY_TEST_CRASH_AT compiled in?")
            if crashed.status == SIGKILL { reached += 1 }
            let now = Self.archives(site)
            // Only a published archive appears, and only at the last point.
            if step == CrashPoint.Name.deltaPublished.rawValue {
                #expect(now.count == before.count + 1, "\(step): \(now)")
            } else {
                #expect(now == before, "\(step): \(now)")
            }
            for (name, dump) in zip(names, dumps) {
                #expect(try Self.restored(site, name, "\(index)-\(name)") == dump, "\(step): \(name)")
            }
            try Self.allSound(site, step)
            let expected = try DeltaArchiveTests.dump(site.root + "/\(Self.alice)/Local.sqlite")
            var added: [String] = []
            let next = try site.granary(["backup", Self.alice, "--delta"])
            #expect(next.status == 0, "\(step): the next backup: \(next.stderr)")
            added = Self.archives(site).filter { !now.contains($0) }
            #expect(added.count == 1, "\(step): \(added)")
            #expect(try Self.restored(site, added.first ?? "", "\(index)-next") == expected, "\(step)")
            // Nothing half-written is left behind once the next run cleaned up.
            let temporaries = FileSystem.contents(of: site.repo + "/\(Self.alice)").filter {
                $0.contains(".tmp") || $0.contains("tmp-")
            }
            #expect(temporaries.isEmpty, "\(step): \(temporaries)")
        }
        #expect(reached == CrashPoint.Name.deltaBackup.count)
    }

    @Test(
        "a prune killed at each step of its merge leaves every archive listed whole and restorable (the old chain, or the merged archive), and the next prune finishes the merge"
    )
    func mergeCrashes() throws {
        var reached = 0
        // The merge of three deltas on their full: the removal point is reached for each of the three.
        let steps =
            CrashPoints.plan(Array(CrashPoint.Name.merge.dropLast())) + CrashPoints.plan([.mergeRemoving], times: 3)
        for step in steps {
            let site = try SampleSite()
            let (names, dumps) = try Self.chain(site, deltas: 3)
            let crashed = try site.granary(
                ["prune", Self.alice, "--keep-last", "1"], environment: ["GRANARY_TEST_CRASH_AT": step])
            #expect(crashed.status == SIGKILL, "\(step): the prune was not killed there (\(crashed.status))")
            if crashed.status == SIGKILL { reached += 1 }
            let now = Self.archives(site)
            let published = now.filter { !names.contains($0) }
            #expect(published.count <= 1, "\(step): \(now)")
            // Before publishing, every old archive is there; after, the merged one is too.
            let points = CrashPoint.Name.merge.map(\.rawValue)
            let at = points.firstIndex(of: String(step.split(separator: ":")[0])) ?? 0
            if at < points.firstIndex(of: "mergePublished")! {
                #expect(now == names, "\(step): \(now)")
            } else {
                #expect(published.count == 1, "\(step): \(now)")
            }
            try Self.allSound(site, step)
            for name in now {
                let dump = try Self.restored(site, name, name)
                let expected = names.firstIndex(of: name).map { dumps[$0] } ?? dumps[3]
                #expect(dump == expected, "\(step): \(name)")
            }
            let again = try site.granary(["prune", Self.alice, "--keep-last", "1", "-v"])
            #expect(again.status == 0, "\(step): the next prune: \(again.stderr)")
            let after = Self.archives(site)
            #expect(after.count == 2 && after.first == names[0], "\(step): \(after): \(again.stdout)")
            #expect(try Self.restored(site, after.last ?? "", "after") == dumps[3], "\(step)")
            // Nothing the killed merge wrote is left: no scratch folder, no temporary archive. (The
            // page-hash cache of the backups is not the merge's: it stays.)
            let leftovers =
                FileSystem.contents(of: site.repo + "/.granary-tmp").filter { $0 != "page-hashes" }
                + FileSystem.contents(of: site.repo + "/\(Self.alice)").filter { $0.contains(".tmp-") }
            #expect(leftovers.isEmpty, "\(step): \(leftovers)")
            #expect(try site.granary(["verify", "--all", "--chain"]).status == 0, "\(step)")
        }
        #expect(reached == steps.count)
    }
}
