import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// One archive builder (``ArchiveBuilder``): a backup, the safety archive of a restore and a final
/// archive carry the same manifest fields (the folder's and the store folders' owners, each
/// store's owner, the check as configured) and the same members (`stores/` and what is under it).
@Suite("backup, safety and final archives are built alike")
struct ArchiveBuilderTests {
    let folder = TemporaryFolder("granary-builder")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var config: String { folder.child("granary.toml") }
    let bob = "bob@example.com"

    init() throws {
        try GranaryProcess.run([root], tool: "granary-sample")
        try "check = \"full\"\n".write(toFile: config, atomically: true, encoding: .utf8)
    }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo, "--config", config])
    }

    /// The archive of `kind` (one of each).
    func archive(_ kind: ArchiveKind) throws -> String {
        let names = FileSystem.contents(of: repo + "/" + bob).filter { !$0.hasPrefix(".") }.sorted()
        let name = try #require(
            names.first { name in
                switch kind {
                case .backup: return !name.contains("-")
                case .safety: return name.contains("-pre-restore.")
                case .final: return name.contains("-final.")
                }
            }, "\(names)")
        return repo + "/" + bob + "/" + name
    }

    func members(_ archive: String) throws -> [String] {
        let listed = try GranaryProcess.runExecutable("/usr/bin/tar", ["--zstd", "-tf", archive])
        return listed.stdout.split(separator: "\n").map(String.init)
    }

    @Test(
        "with check = full configured: the backup, the safety archive of a restore and the final archive record check full, every store's owner, the folder's owner and the store folders' owners, and hold stores/"
    )
    func sameManifestFields() throws {
        let backup = try granary(["backup", bob])
        try #require(backup.status == 0, "\(backup.stderr)")
        let restored = try granary(["restore", bob])
        try #require(restored.status == 0, "\(restored.stderr)")
        let retired = try granary(["retire", bob, "--yes"])
        try #require(retired.status == 0, "\(retired.stderr)")

        var folders: [[String]] = []
        for kind in [ArchiveKind.backup, .safety, .final] {
            let path = try archive(kind)
            let manifest = try ArchiveHead(file: path).manifest
            #expect((manifest.kind ?? .backup) == kind, "\(path)")
            #expect(manifest.folder != nil, "\(kind): no folder owner")
            #expect(
                !manifest.stores.isEmpty && manifest.stores.allSatisfy { $0.owner != nil }, "\(kind): a store owner")
            #expect(manifest.stores.allSatisfy { $0.check == "full" }, "\(kind): \(manifest.stores.map(\.check))")
            folders.append((manifest.folders ?? [:]).keys.sorted())
            #expect(try members(path).contains("stores/"), "\(kind): no stores/ member")
        }
        #expect(!folders[0].isEmpty && folders.allSatisfy { $0 == folders[0] }, "\(folders)")
    }
}
