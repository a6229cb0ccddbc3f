import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A damaged delta chain is never built on and never green (issue 46): the chain F ← D1 ← D2 of
/// alice, then one link removed, cut short, with a byte flipped in a hash or delta member, or
/// replaced by another archive under its name — with and without the page-hash cache. Until a new
/// full is written, `check` and `verify --latest` are red, naming the archive; the next `backup
/// --delta` writes that full and says why; then both are green. The built binary, real archives.
@Suite("delta chains: damage is never built on, and never green")
struct DeltaChainDamageTests {
    static let alice = DeltaOperatorTests.alice

    /// What is done to the chain, and to which link.
    enum Damage: String, CaseIterable, CustomStringConvertible {
        case removeMiddle, truncateMiddle, truncateTip, truncateFull, flipFullPages, flipMiddleDelta, replaceMiddle
        var description: String { rawValue }
    }

    /// F ← D1 ← D2 of alice, plain tar (so that a member's bytes can be found), each backup checked.
    static func chain() throws -> (site: DeltaOperatorTests.Site, full: String, middle: String, tip: String) {
        let site = try DeltaOperatorTests.Site(config: "delta = true\ncompression = \"none\"\n")
        let full = try site.backup(alice).name
        try site.change(1)
        let middle = try site.backup(alice).name
        try site.change(2)
        let tip = try site.backup(alice).name
        #expect(middle.contains("-delta") && tip.contains("-delta"), "\(middle) \(tip)")
        #expect(try site.manifest(alice, tip).delta?.base?.name == middle)
        return (site, full, middle, tip)
    }

    /// Flips a byte of `member`'s data in the plain tar `path` (its header found by name), keeping
    /// the file's size.
    static func flip(member: String, in path: String) throws {
        var bytes = try #require(FileManager.default.contents(atPath: path))
        var offset = 0
        var found: Int?
        while offset + 512 <= bytes.count {
            let header = bytes[offset..<offset + 512]
            func field(_ start: Int, _ length: Int) -> String {
                let raw = header[(offset + start)..<(offset + start + length)].prefix { $0 != 0 }
                return String(decoding: raw, as: UTF8.self)
            }
            let name = field(0, 100), prefix = field(345, 155)
            if (prefix.isEmpty ? name : prefix + "/" + name) == member {
                found = offset + 512
                break
            }
            offset += 512
        }
        let data = try #require(found, "\(member) in \(path)")
        bytes[data + 7] ^= 0x5A
        try bytes.write(to: URL(fileURLWithPath: path))
    }

    static func truncate(_ path: String, to share: Double) throws {
        let size = try #require(FileSystem.status(path)).st_size
        #expect(Foundation.truncate(path, off_t(Double(size) * share)) == 0)
    }

    /// Applies `damage`; returns the archive at fault (the one messages must name).
    static func apply(
        _ damage: Damage, to site: DeltaOperatorTests.Site, full: String, middle: String, tip: String
    ) throws -> String {
        let folder = site.repo + "/" + alice + "/"
        switch damage {
        case .removeMiddle:
            try FileSystem.removeFile(folder + middle)
            return middle
        case .truncateMiddle:
            try truncate(folder + middle, to: 0.9)
            return middle
        case .truncateTip:
            try truncate(folder + tip, to: 0.9)
            return tip
        case .truncateFull:
            try truncate(folder + full, to: 0.9)
            return full
        case .flipFullPages:
            try flip(member: PageFiles.pagesMember("Local.sqlite"), in: folder + full)
            return full
        case .flipMiddleDelta:
            try flip(member: PageFiles.deltaMember("Local.sqlite"), in: folder + middle)
            return middle
        case .replaceMiddle:
            // Another archive of alice's (the full) put there under the middle link's name.
            try FileSystem.removeFile(folder + middle)
            try FileManager.default.copyItem(atPath: folder + full, toPath: folder + middle)
            return middle
        }
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test(
        "a damaged link makes check and verify --latest red, naming it, the next backup --delta a full that says why, and then both green",
        arguments: Damage.allCases, [true, false])
    func damagedChain(damage: Damage, cache: Bool) throws {
        let (site, full, middle, tip) = try Self.chain()
        let healthy = try site.granary(["check", Self.alice])
        #expect(healthy.status == 0, "\(healthy.stdout)\(healthy.stderr)")
        let fault = try Self.apply(damage, to: site, full: full, middle: middle, tip: tip)
        if !cache { FileSystem.removeTree(site.repo + "/.granary-tmp/page-hashes") }

        // check is red before any verify ran, naming the archive and the fix.
        let red = try site.granary(["check", Self.alice, "--json"])
        #expect(red.status == 1, "\(damage): \(red.stdout)")
        let user = try #require((try Self.json(red.stdout)["users"] as? [[String: Any]])?.first)
        #expect(user["ok"] as? Bool == false)
        let reason = user["reason"] as? String ?? ""
        #expect(reason.contains(fault) && reason.contains("granary backup"), "\(damage): \(reason)")
        #expect(user["unrestorable"] is String, "\(damage): \(user)")
        let prom = site.site.folder.child("granary.prom")
        _ = try site.granary(["check", Self.alice, "--textfile", prom])
        let metrics = try String(contentsOfFile: prom, encoding: .utf8)
        #expect(metrics.contains("granary_unrestorable_archive{user=\"\(Self.alice)\"} 1"), "\(metrics)")

        // verify --all --latest (the shipped nightly unit) is red, on a copy of the repository
        // (its records would otherwise tell the backup below what the chain check must find).
        let copy = site.site.folder.child("copy")
        let copied = try GranaryProcess.runExecutable("/bin/cp", ["-a", site.repo, copy])
        #expect(copied.status == 0, "\(copied.stderr)")
        let verify = try GranaryProcess.run(
            ["verify", "--all", "--latest", "--json", "--root", site.root, "--repo", copy, "--config", site.config])
        #expect(verify.status == 65, "\(damage): \(verify.stdout) \(verify.stderr)")
        let verifiedCheck = try GranaryProcess.run(
            ["check", Self.alice, "--root", site.root, "--repo", copy, "--config", site.config])
        #expect(verifiedCheck.status == 1, "\(damage): \(verifiedCheck.stdout)")

        // The next backup --delta writes a full, and says why (naming the link at fault).
        try site.change(3)
        let next = try site.backup(Self.alice, ["--json"])
        #expect(!next.name.contains("-delta"), "\(damage) (cache \(cache)): \(next.run.stdout)")
        let users = try #require(try Self.json(next.run.stdout)["users"] as? [[String: Any]])
        let delta = try #require(users.first?["delta"] as? [String: Any])
        #expect(delta["kind"] as? String == "full")
        let why = delta["reason"] as? String ?? ""
        #expect(why.contains(fault), "\(damage) (cache \(cache)): \(why)")

        // Then green: check, and verify of the newest.
        let green = try site.granary(["check", Self.alice])
        #expect(green.status == 0, "\(damage): \(green.stdout)")
        let verified = try site.granary(["verify", "--user", Self.alice, "--latest"])
        #expect(verified.status == 0, "\(damage): \(verified.stdout) \(verified.stderr)")
        // And the next delta is built on the new full.
        try site.change(4)
        let after = try site.backup(Self.alice, ["--json"])
        #expect(after.name.contains("-delta"), "\(after.run.stdout)")
        #expect(try site.manifest(Self.alice, after.name).delta?.base?.name == next.name)
    }

    @Test(
        "verify --latest of a delta verifies its whole chain: the JSON names each link, the record says restorable-verified, and list and check say so"
    )
    func verifyLatestVerifiesTheChain() throws {
        let (site, full, middle, tip) = try Self.chain()
        let run = try site.granary(["verify", "--all", "--latest", "--json"])
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        #expect(try ShellTools.schemaProblems(run.stdout, schema: "verify").isEmpty)
        let archive = try #require((try Self.json(run.stdout)["archives"] as? [[String: Any]])?.first)
        #expect(archive["archive"] as? String == tip)
        #expect(archive["state"] as? String == "restorable-verified")
        #expect(archive["chain"] as? [String] == [middle, full])
        let text = try site.granary(["verify", "--user", Self.alice, "--latest", "-v"])
        #expect(text.stdout.contains("restorable with its chain of 2"), "\(text.stdout)")
        let list = try site.granary(["list", Self.alice, "--json"])
        #expect(try ShellTools.schemaProblems(list.stdout, schema: "list").isEmpty)
        let listed = try #require(try Self.json(list.stdout)["archives"] as? [[String: Any]])
        #expect(listed.first { $0["name"] as? String == tip }?["state"] as? String == "restorable-verified")
        #expect(listed.first { $0["name"] as? String == middle }?["state"] as? String == "checked-by-backup")
        let check = try site.granary(["check", Self.alice, "--json"])
        #expect(try ShellTools.schemaProblems(check.stdout, schema: "check").isEmpty)
        let user = try #require((try Self.json(check.stdout)["users"] as? [[String: Any]])?.first)
        #expect(user["state"] as? String == "restorable-verified" && user["verified"] as? Bool == true)
    }

    @Test(
        "a delta whose base verify found bad is not counted by check, though an older archive is good; the next backup is a full"
    )
    func badBaseIsNeverGood() throws {
        let (site, full, middle, _) = try Self.chain()
        // verify of the middle link alone, after its bytes were damaged: recorded bad.
        try Self.truncate(site.repo + "/" + Self.alice + "/" + middle, to: 0.95)
        let verify = try site.granary(["verify", Self.alice + "/" + middle])
        #expect(verify.status == 65, "\(verify.stdout)")
        let check = try site.granary(["check", Self.alice])
        #expect(check.status == 1, "\(check.stdout)")
        #expect(check.stdout.contains(middle), "\(check.stdout)")
        #expect(!check.stdout.contains("OK"), "\(check.stdout)")
        let nagios = try site.granary(["check", Self.alice, "--nagios"])
        #expect(nagios.status == 2 && nagios.stdout.hasPrefix("GRANARY CRITICAL"), "\(nagios.stdout)")
        try site.change(5)
        let next = try site.backup(Self.alice, ["--json"])
        #expect(!next.name.contains("-delta"), "\(next.run.stdout)")
        #expect(next.run.stdout.contains(middle), "\(next.run.stdout)")
        #expect(try site.granary(["check", Self.alice]).status == 0)
        _ = full
    }
}
