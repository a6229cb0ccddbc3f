import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// inotify watches are one pool for the whole follower (`fs.inotify.max_user_watches`, per uid:
/// root's): an attacker with thousands of folders must not take it from the victim, whose commits
/// must still be claimed within the interval (docs/follow.md, "Many users").
extension AttackTests.Follow {
    /// The inotify watches `pid` holds now (each is a line of its inotify descriptors' fdinfo).
    static func inotifyWatches(_ pid: Int32) -> Int {
        var count = 0
        for fd in FileSystem.contents(of: "/proc/\(pid)/fdinfo") {
            let text = (try? String(contentsOfFile: "/proc/\(pid)/fdinfo/\(fd)", encoding: .utf8)) ?? ""
            count += text.split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
        }
        return count
    }

    /// The victim commits a row with a fresh marker; the moment a second more than the interval
    /// (3 s here: a loaded machine's turns stay inside it) after it is acknowledged must be inside
    /// the victim's followed window, and the restore there must hold the row.
    static func expectVictimClaimed(_ lab: Lab, _ follow: FollowProcess, _ context: String) throws {
        let victimStore = lab.victimHome + "/Local.sqlite"
        let marker = "AFTER-" + UUID().uuidString
        try Self.write(victimStore, marker: marker, rows: 1)
        let moment = ArchiveName.micros(Date()) + 4_000_000
        while ArchiveName.micros(Date()) < moment + 300_000 { usleep(100_000) }
        try Self.write(victimStore, marker: "LATER-" + UUID().uuidString, rows: 1)
        let arrived = try Self.waitFor(120) {
            try Self.generations(lab, "victim").last?.segments.last.map { $0.last > moment } ?? false
        }
        try #require(arrived, "\(context): the victim's commits were never shipped: \(follow.journal.suffix(3000))")
        let (outcome, restored) = try Self.restore(lab, "victim", at: moment, into: "at-" + UUID().uuidString)
        #expect(
            outcome.status == 0 && outcome.stderr.contains("within the followed window"),
            "\(context): the victim's commit was not claimed 4 s after it: \(outcome)\n\(follow.journal.suffix(3000))"
        )
        if outcome.status == 0 && outcome.stderr.contains("within the followed window") {
            let check = try Database(path: restored, mode: .readOnly)
            #expect(
                try check.scalar("SELECT count(*) FROM notes WHERE body LIKE ?", [.text(marker + "%")])?.integer == 1,
                "\(context): the victim's commit is not in the restore")
        }
    }

    @Test(
        "an attacker with more folders than follow_watches holds no watch and is read whole every 10 intervals (said); the victim's commits are still claimed within the interval"
    )
    func watchCap() throws {
        let lab = try Lab()
        let config = lab.base + "/granary.toml"
        try Lab.write(config, "follow_watches = 16\n", mode: 0o644)
        try Self.write(lab.victimHome + "/Local.sqlite", marker: lab.victimMarker, rows: 1)
        try Self.write(lab.attackerHome + "/Local.sqlite", marker: lab.attackerMarker, rows: 1)
        // 200 folders, two levels: far more than the cap.
        for outer in 0..<20 {
            for inner in 0..<10 { try Lab.makeFolder(lab.attackerHome + "/f\(outer)/g\(inner)", mode: 0o755) }
        }
        Lab.chownTree(lab.victimHome, to: lab.victim)
        Lab.chownTree(lab.attackerHome, to: lab.attacker)
        let follow = try FollowProcess(
            ["--root", lab.root, "--repo", lab.repo, "--config", config], log: lab.base + "/follow.log",
            interval: "3s")
        defer { follow.stop(SIGKILL) }
        let started = try Self.waitFor(120) {
            try Self.segmentCount(lab, "victim") >= 1 && Self.segmentCount(lab, "attacker") >= 1
        }
        try #require(started, "following never started: \(follow.journal)")
        #expect(
            follow.journal.contains("attacker: read whole every 30s")
                && follow.journal.contains("more than 16 folders to watch (follow_watches)"),
            "\(follow.journal)")
        // The root and the victim's two folders; none of the attacker's.
        let watches = Self.inotifyWatches(follow.process.processIdentifier)
        #expect(watches <= 3, "follow holds \(watches) inotify watches")
        try Self.expectVictimClaimed(lab, follow, "an attacker over the cap")
        // The attacker is still followed, more slowly: a commit of theirs is shipped by a sweep.
        let before = try Self.segmentCount(lab, "attacker")
        try Self.write(lab.attackerHome + "/Local.sqlite", marker: lab.attackerMarker, rows: 1)
        Lab.chownTree(lab.attackerHome, to: lab.attacker)
        let swept = try Self.waitFor(90) { try Self.segmentCount(lab, "attacker") > before }
        #expect(swept, "the attacker's commit was never shipped: \(follow.journal.suffix(2000))")
        #expect(!follow.journal.contains("victim: read"), "\(follow.journal)")
    }

    @Test(
        "an attacker over follow_watches whose walk runs out of inotify watches first (a debug build's limit of 12) is still over the cap: read whole every 10 intervals, not every interval"
    )
    func overCapExhaustedFirst() throws {
        let lab = try Lab()
        let config = lab.base + "/granary.toml"
        try Lab.write(config, "follow_watches = 16\n", mode: 0o644)
        try Self.write(lab.victimHome + "/Local.sqlite", marker: lab.victimMarker, rows: 1)
        try Self.write(lab.attackerHome + "/Local.sqlite", marker: lab.attackerMarker, rows: 1)
        for outer in 0..<20 {
            for inner in 0..<10 { try Lab.makeFolder(lab.attackerHome + "/f\(outer)/g\(inner)", mode: 0o755) }
        }
        Lab.chownTree(lab.victimHome, to: lab.victim)
        Lab.chownTree(lab.attackerHome, to: lab.attacker)
        let follow = try FollowProcess(
            ["--root", lab.root, "--repo", lab.repo, "--config", config], log: lab.base + "/follow.log",
            interval: "3s", environment: ["GRANARY_TEST_INOTIFY_WATCHES": "12"])
        defer { follow.stop(SIGKILL) }
        let started = try Self.waitFor(120) {
            try Self.segmentCount(lab, "victim") >= 1 && Self.segmentCount(lab, "attacker") >= 1
        }
        try #require(started, "following never started: \(follow.journal)")
        #expect(
            follow.journal.contains("attacker: read whole every 30s")
                && follow.journal.contains("more than 16 folders to watch (follow_watches)"),
            "\(follow.journal)")
        #expect(!follow.journal.contains("attacker: read whole every interval"), "\(follow.journal)")
        let watches = Self.inotifyWatches(follow.process.processIdentifier)
        #expect(watches <= 3, "follow holds \(watches) inotify watches")
        try Self.expectVictimClaimed(lab, follow, "an attacker over the cap, watches exhausted first")
    }

    @Test(
        "the kernel out of inotify watches (a debug build's limit of 12) while the attacker makes folders: the attacker's watches are all given back, the victim's new folder is watched, and the victim's commits are still claimed"
    )
    func watchesExhausted() throws {
        let lab = try Lab()
        try Self.write(lab.victimHome + "/Local.sqlite", marker: lab.victimMarker, rows: 1)
        try Self.write(lab.attackerHome + "/Local.sqlite", marker: lab.attackerMarker, rows: 1)
        Lab.chownTree(lab.victimHome, to: lab.victim)
        Lab.chownTree(lab.attackerHome, to: lab.attacker)
        let follow = try FollowProcess(
            root: lab.root, repo: lab.repo, log: lab.base + "/follow.log", interval: "3s",
            environment: ["GRANARY_TEST_INOTIFY_WATCHES": "12"])
        defer { follow.stop(SIGKILL) }
        let started = try Self.waitFor(120) {
            try Self.segmentCount(lab, "victim") >= 1 && Self.segmentCount(lab, "attacker") >= 1
        }
        try #require(started, "following never started: \(follow.journal)")
        // The attacker makes 40 folders while followed: each is an event, the last ones find no
        // watch left.
        try lab.shell(as: lab.attacker, "cd '\(lab.attackerHome)' && for i in $(seq 1 40); do mkdir d$i; done")
        let polled = try Self.waitFor(60) {
            follow.journal.contains("attacker: read whole every interval")
                && follow.journal.contains("no inotify watch left")
        }
        #expect(polled, "\(follow.journal)")
        // Then the victim makes a folder: it must be watched (the attacker's watches were given back).
        try lab.shell(as: lab.victim, "mkdir '\(lab.victimHome)/Later'")
        usleep(2_000_000)
        #expect(!follow.journal.contains("victim: read whole"), "the victim lost its watches: \(follow.journal)")
        let watches = Self.inotifyWatches(follow.process.processIdentifier)
        #expect(watches <= 4, "follow holds \(watches) inotify watches (the root and the victim's three folders)")
        try Self.expectVictimClaimed(lab, follow, "watches exhausted by the attacker")
    }
}
