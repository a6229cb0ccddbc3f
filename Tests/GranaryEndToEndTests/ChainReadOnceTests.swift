import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// The nightly verify (`verify --all --latest`) of a user whose newest archive is the 23rd delta of
/// its chain reads each of the chain's 24 archives once, and a second run reads none while the
/// chain is listed as it was; a link touched since is read again, a link damaged since is found
/// and named. The reads are counted by the debug build's trace (`GRANARY_TEST_READ_TRACE`): a
/// line `head NAME` for a manifest read alone, `read NAME` for an archive's members.
@Suite("verify: a user's chain read once, and not again while unchanged")
struct ChainReadOnceTests {
    static let alice = DeltaOperatorTests.alice
    /// Every archive of the test in one second, without waiting for the clock.
    static let clock = ["GRANARY_TEST_NOW": testSecond]

    /// What one run read: `read` and `head` lines, by archive name.
    struct Reads {
        var members: [String: Int] = [:]
        var heads: [String: Int] = [:]
    }

    static func run(
        _ site: DeltaOperatorTests.Site, _ arguments: [String], trace: String
    ) throws -> (GranaryProcess.Result, Reads) {
        try? FileManager.default.removeItem(atPath: trace)
        let result = try site.site.granary(
            arguments + ["--config", site.config],
            environment: clock.merging(["GRANARY_TEST_READ_TRACE": trace]) { $1 })
        var reads = Reads()
        let text = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            guard parts.count == 2 else {
                Issue.record("trace line \(line)")
                continue
            }
            if parts[0] == "read" { reads.members[String(parts[1]), default: 0] += 1 }
            if parts[0] == "head" { reads.heads[String(parts[1]), default: 0] += 1 }
        }
        return (result, reads)
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test(
        "the nightly verify of a 23-delta chain reads each of its 24 archives once; the next run reads none; a touched link is read again, a damaged one named"
    )
    func nightlyVerifyReadsOnce() throws {
        let site = try DeltaOperatorTests.Site()
        let trace = site.site.folder.child("reads")
        var chain: [String] = []
        for step in 0...23 {
            if step > 0 { try site.change(step) }
            let before = Set(site.archives(Self.alice))
            let backup = try site.site.granary(
                ["backup", Self.alice, "--config", site.config], environment: Self.clock)
            #expect(backup.status == 0, "\(backup.stderr)")
            let added = site.archives(Self.alice).filter { !before.contains($0) }
            #expect(added.count == 1, "\(added)")
            chain.append(added.first ?? "")
        }
        #expect(!chain[0].contains("-delta") && chain.dropFirst().allSatisfy { $0.contains("-delta") }, "\(chain)")
        let tip = try #require(chain.last)
        #expect(try site.manifest(Self.alice, tip).delta?.base?.name == chain[22])

        // The first nightly run: every archive's members read once, its manifest at most once more.
        let (first, reads) = try Self.run(site, ["verify", "--all", "--latest", "--json"], trace: trace)
        #expect(first.status == 0, "\(first.stdout) \(first.stderr)")
        #expect(reads.members == Dictionary(uniqueKeysWithValues: chain.map { ($0, 1) }), "\(reads.members)")
        #expect(reads.heads.keys.allSatisfy(chain.contains) && reads.heads.values.allSatisfy { $0 == 1 })
        let verified = try #require((try Self.json(first.stdout)["archives"] as? [[String: Any]])?.first)
        #expect(verified["state"] as? String == "restorable-verified")
        #expect(verified["chain"] as? [String] == chain.dropLast().reversed())
        #expect(verified["unchangedSince"] is NSNull)
        #expect((verified["bytes"] as? Int ?? 0) > 0)

        // The next run, nothing changed: nothing read; still restorable-verified.
        let (second, none) = try Self.run(site, ["verify", "--all", "--latest", "--json"], trace: trace)
        #expect(second.status == 0, "\(second.stdout) \(second.stderr)")
        #expect(none.members.isEmpty && none.heads.isEmpty, "\(none)")
        #expect(try ShellTools.schemaProblems(second.stdout, schema: "verify").isEmpty)
        let again = try #require((try Self.json(second.stdout)["archives"] as? [[String: Any]])?.first)
        #expect(again["state"] as? String == "restorable-verified")
        #expect(again["unchangedSince"] is String && again["bytes"] as? Int == 0, "\(again)")
        #expect(again["chain"] as? [String] == chain.dropLast().reversed())
        #expect(again["stores"] as? Int == verified["stores"] as? Int)
        let (text, _) = try Self.run(site, ["verify", "--all", "--latest", "-v"], trace: trace)
        #expect(text.stdout.contains("not read again"), "\(text.stdout)")
        let list = try site.granary(["list", Self.alice, "--json"])
        let listed = try #require(try Self.json(list.stdout)["archives"] as? [[String: Any]])
        #expect(listed.first { $0["name"] as? String == tip }?["state"] as? String == "restorable-verified")

        // A link touched since (same bytes, another modification time): the chain is read again.
        let folder = site.repo + "/" + Self.alice + "/"
        var times = [timespec(tv_sec: 1_700_000_000, tv_nsec: 0), timespec(tv_sec: 1_700_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, folder + chain[10], &times, 0) == 0)
        let (touched, reread) = try Self.run(site, ["verify", "--all", "--latest"], trace: trace)
        #expect(touched.status == 0, "\(touched.stdout) \(touched.stderr)")
        #expect(reread.members == Dictionary(uniqueKeysWithValues: chain.map { ($0, 1) }), "\(reread.members)")
        let (settled, noneAgain) = try Self.run(site, ["verify", "--all", "--latest"], trace: trace)
        #expect(settled.status == 0, "\(settled.stdout) \(settled.stderr)")
        #expect(noneAgain.members.isEmpty && noneAgain.heads.isEmpty, "\(noneAgain)")

        // A link cut short since: the record does not let it pass; the tip is bad, the link named.
        try DeltaChainDamageTests.truncate(folder + chain[10], to: 0.9)
        let (damaged, _) = try Self.run(site, ["verify", "--all", "--latest"], trace: trace)
        #expect(damaged.status == 65, "\(damaged.stdout) \(damaged.stderr)")
        #expect(damaged.stderr.contains(chain[10]), "\(damaged.stderr)")
        let (still, _) = try Self.run(site, ["verify", "--all", "--latest"], trace: trace)
        #expect(still.status == 65, "\(still.stdout) \(still.stderr)")
        let check = try site.granary(["check", Self.alice])
        #expect(check.status == 1, "\(check.stdout)")

        // One more backup: a full (the chain holds a bad link, and has 23 deltas); the nightly
        // verify reads that archive alone.
        try site.change(24)
        let before = Set(site.archives(Self.alice))
        let next = try site.site.granary(["backup", Self.alice, "--config", site.config], environment: Self.clock)
        #expect(next.status == 0, "\(next.stderr)")
        let added = site.archives(Self.alice).filter { !before.contains($0) }
        #expect(added.count == 1 && !(added.first ?? "-delta").contains("-delta"), "\(added)")
        let (last, one) = try Self.run(site, ["verify", "--all", "--latest"], trace: trace)
        #expect(last.status == 0, "\(last.stdout) \(last.stderr)")
        #expect(one.members == [added.first ?? "": 1], "\(one.members)")
        #expect(try site.granary(["check", Self.alice]).status == 0)
    }

    @Test(
        "a delta whose own manifest cannot be read is refused with 65 for its own fault, not as a chain that does not restore"
    )
    func unreadableTip() throws {
        let site = try DeltaOperatorTests.Site()
        for step in 0...1 {
            if step > 0 { try site.change(step) }
            let backup = try site.site.granary(
                ["backup", Self.alice, "--config", site.config], environment: Self.clock)
            #expect(backup.status == 0, "\(backup.stderr)")
        }
        let tip = try #require(site.archives(Self.alice).last)
        #expect(tip.contains("-delta"))
        try DeltaChainDamageTests.truncate(site.repo + "/" + Self.alice + "/" + tip, to: 0.02)
        let run = try site.granary(["verify", Self.alice + "/" + tip])
        #expect(run.status == 65, "\(run.stdout) \(run.stderr)")
        #expect(run.stderr.contains(tip) && !run.stderr.contains("its chain"), "\(run.stderr)")
    }
}
