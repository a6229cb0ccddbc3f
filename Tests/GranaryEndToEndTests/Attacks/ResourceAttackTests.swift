import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Beyond issue 16's classes: what a user can make granary spend outside their folder.
    @Suite("11. resources spent outside the user's folder")
    struct Resources {
        @Test("a sparse store (a few KiB on disk, hundreds of MiB long) does not make granary fill the repository")
        func sparseStore() throws {
            // The attacker's quota counts the blocks their file uses; granary's snapshot in the
            // repository's scratch folder writes every page. A header claiming 64 Ki pages of 4 KiB
            // over a hole costs the user 8 KiB and the repository 256 MiB (a header can claim 256 TiB).
            let lab = try Lab()
            let repo = lab.base + "/smalldisk"
            try FileManager.default.createDirectory(atPath: repo, withIntermediateDirectories: true)
            let mounted = try GranaryProcess.runExecutable(
                "/bin/mount", ["-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", repo])
            guard mounted.status == 0 else {
                Issue.record("cannot mount a tmpfs here: \(mounted.stderr)")
                return
            }
            defer { _ = try? GranaryProcess.runExecutable("/bin/umount", ["-l", repo]) }
            initializedRepository(repo)
            let store = lab.attackerHome + "/Sparse.sqlite"
            try Lab.makeStore(store, wal: false, marker: lab.attackerMarker, rows: 1)
            let file = try #require(FileHandle(forUpdatingAtPath: store))
            try file.seek(toOffset: 28)
            try file.write(contentsOf: Data([0x00, 0x01, 0x00, 0x00]))  // 65,536 pages
            try file.truncate(atOffset: 4096 * 65_536)
            try file.close()
            Lab.chownTree(store, to: lab.attacker)
            let allocated = Int64(FileSystem.status(store)!.st_blocks) * 512
            #expect(allocated < 1 << 20)
            let outcome = try lab.granary(["backup", "attacker"], repo: repo)
            Lab.expectDocumented(outcome, "backup of a sparse store")
            #expect(
                !outcome.stderr.contains("is full"),
                "a user's \(allocated / 1024) KiB store filled a 32 MiB repository: \(outcome)")
        }
    }
}
