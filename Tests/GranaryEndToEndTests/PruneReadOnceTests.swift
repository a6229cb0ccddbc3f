import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A prune that merges a chain of deltas reads each archive's manifest once (the plan, the chains a
/// kept delta needs, the merge, the plan after it and the proof all ask for them), and the merge's
/// base once: its page-hash lists serve the merge and the proof. Counted by the debug build's
/// trace (`GRANARY_TEST_READ_TRACE`: `head NAME` for a manifest read alone, `read NAME` for an
/// archive's members).
@Suite("prune: each manifest read once")
struct PruneReadOnceTests {
    static let alice = DeltaOperatorTests.alice

    @Test(
        "prune --keep-last 1 of a full and five deltas reads each manifest once, the full's lists once, each replaced delta once and the merged archive once; every archive left restores"
    )
    func mergeReadsOnce() throws {
        let site = try DeltaOperatorTests.Site()
        var chain: [String] = []
        for step in 0...5 {
            if step > 0 { try site.change(step) }
            chain.append(try site.backup(Self.alice).name)
        }
        #expect(!chain[0].contains("-delta") && chain.dropFirst().allSatisfy { $0.contains("-delta") }, "\(chain)")
        let trace = site.site.folder.child("reads")
        let prune = try site.site.granary(
            ["prune", Self.alice, "--keep-last", "1", "--json", "--config", site.config],
            environment: ["GRANARY_TEST_READ_TRACE": trace])
        #expect(prune.status == 0, "\(prune.stdout) \(prune.stderr)")
        let left = site.archives(Self.alice)
        let merged = try #require(left.first { !chain.contains($0) }, "\(left)")
        #expect(Set(left) == [chain[0], merged], "\(left)")
        var heads: [String: Int] = [:]
        var members: [String: Int] = [:]
        let text = (try? String(contentsOfFile: trace, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            if parts[0] == "head" { heads[parts[1], default: 0] += 1 }
            if parts[0] == "read" { members[parts[1], default: 0] += 1 }
        }
        #expect(!heads.isEmpty && heads.values.allSatisfy { $0 == 1 }, "\(heads)")
        // The full's lists, each replaced delta's pages, and the merged archive read back once each.
        #expect(members == Dictionary(uniqueKeysWithValues: (chain + [merged]).map { ($0, 1) }), "\(members)")
        let verify = try site.granary(["verify", "--all", "--chain"])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
    }
}
