import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Who acts in a folder: a `Folder<UserOwned>` runs its calls with its owner's credentials, a
/// `Folder<GranaryOwned>` as granary, and a rename says which it uses. The folders here belong to
/// uids that have no account (the kernel's credentials need none), so these run as root only.
@Suite("who acts in a folder: user-owned and granary-owned folders", .enabled(if: geteuid() == 0))
struct FolderTrustTests {
    static let alice: uid_t = 61_001
    static let bob: uid_t = 61_002

    let folder = TemporaryFolder()

    /// A folder at `name` in the test's folder, owned by `uid` with `mode`.
    func makeFolder(_ name: String, uid: uid_t, mode: mode_t = 0o700) throws -> String {
        let path = folder.child(name)
        try FileSystem.makeDirectory(path)
        #expect(chown(path, uid, uid) == 0)
        #expect(chmod(path, mode) == 0)
        return path
    }

    /// A file at `path` owned by `uid`.
    func makeFile(_ path: String, uid: uid_t) throws {
        try Data("content\n".utf8).write(to: URL(fileURLWithPath: path))
        #expect(chown(path, uid, uid) == 0)
    }

    @Test("a user's folder opened by path belongs to the folder's owner")
    func ownerFromTheFolder() throws {
        let path = try makeFolder("alice", uid: Self.alice)
        let opened = try Folder<UserOwned>.open(path: path)
        #expect(opened.owner == Self.alice)
        #expect(opened.ownerUID == Self.alice)
        #expect(try Folder<GranaryOwned>.open(path: path).ownerUID == nil)
    }

    @Test("a rename from one user's folder into another user's is refused, and nothing moves")
    func crossOwnerRenameRefused() throws {
        let a = try makeFolder("alice", uid: Self.alice)
        let b = try makeFolder("bob", uid: Self.bob)
        try makeFile(a + "/Local.sqlite", uid: Self.alice)
        let from = try Folder<UserOwned>.open(path: a)
        let to = try Folder<UserOwned>.open(path: b)
        let error = #expect(throws: FolderError.self) {
            try from.renameAsOwner("Local.sqlite", to: to, as: "Local.sqlite")
        }
        guard case .differentOwners(_, _, let uid, let other) = error else {
            Issue.record("expected differentOwners, got \(String(describing: error))")
            return
        }
        #expect(uid == Self.alice && other == Self.bob)
        #expect(error?.description.contains("two users' folders") == true)
        #expect(FileSystem.status(a + "/Local.sqlite") != nil)
        #expect(FileSystem.status(b + "/Local.sqlite") == nil)
    }

    @Test("a rename within one user's folders runs with the owner's credentials: what the owner cannot do fails")
    func ownerRenameUsesOwnerCredentials() throws {
        let a = try makeFolder("alice", uid: Self.alice)
        try FileSystem.makeDirectory(a + "/Open")
        try FileSystem.makeDirectory(a + "/Closed")
        #expect(chown(a + "/Open", Self.alice, Self.alice) == 0)
        #expect(chown(a + "/Closed", Self.alice, Self.alice) == 0)
        #expect(chmod(a + "/Closed", 0o500) == 0)  // the owner may not write in it; root may
        try makeFile(a + "/Local.sqlite", uid: Self.alice)
        let user = try Folder<UserOwned>.open(path: a)
        try user.renameAsOwner("Local.sqlite", to: try user.folder("Open"), as: "Local.sqlite", .noReplace)
        #expect(FileSystem.status(a + "/Open/Local.sqlite") != nil)
        // As root this would succeed; as alice the kernel refuses it.
        #expect(throws: FolderError.self) {
            try user.folder("Open").renameAsOwner(
                "Local.sqlite", to: try user.folder("Closed"), as: "Local.sqlite", .noReplace)
        }
        #expect(FileSystem.status(a + "/Open/Local.sqlite") != nil)
        #expect(FileSystem.status(a + "/Closed/Local.sqlite") == nil)
    }

    @Test("a rename from granary's folder into a user's runs as granary: the owner's own permissions do not bind it")
    func granaryRenameRunsAsGranary() throws {
        let work = try makeFolder("work", uid: 0)
        let a = try makeFolder("alice", uid: Self.alice, mode: 0o500)
        try makeFile(work + "/staged.sqlite", uid: Self.alice)
        let staging = try Folder<GranaryOwned>.open(path: work)
        try staging.renameAsGranary("staged.sqlite", to: try Folder<UserOwned>.open(path: a), as: "Local.sqlite")
        #expect(FileSystem.status(a + "/Local.sqlite") != nil)
        #expect(FileSystem.status(work + "/staged.sqlite") == nil)
    }

    @Test("removing an empty folder whose name was swapped for a link removes nothing behind the link")
    func removeEmptyFolderNeverFollowsALink() throws {
        let a = try makeFolder("alice", uid: Self.alice)
        let victim = try makeFolder("victim", uid: Self.bob)
        try FileSystem.makeDirectory(victim + "/Empty")
        #expect(symlink(victim + "/Empty", a + "/Empty") == 0)
        #expect(lchown(a + "/Empty", Self.alice, Self.alice) == 0)
        let user = try Folder<UserOwned>.open(path: a)
        #expect(user.removeEmptyFolder("Empty") == false)
        #expect(FileSystem.isDirectory(victim + "/Empty"))
        try FileSystem.makeDirectory(a + "/Real")
        #expect(chown(a + "/Real", Self.alice, Self.alice) == 0)
        #expect(user.removeEmptyFolder("Real"))
        #expect(FileSystem.status(a + "/Real") == nil)
    }

    @Test("a user folder's own mode is set with its owner's credentials, through its descriptor")
    func setModeAsOwner() throws {
        let a = try makeFolder("alice", uid: Self.alice, mode: 0o500)
        let user = try Folder<UserOwned>.open(path: a)
        try user.setMode(0o700)
        #expect(try user.status().mode == 0o700)
        // Bob's folder opened as bob's, then handed to alice behind its back: alice's credentials
        // cannot change a folder that is not hers (root could).
        let b = try makeFolder("bob", uid: Self.bob, mode: 0o700)
        let bobs = try Folder<UserOwned>.open(path: b)
        #expect(chown(b, Self.alice, Self.alice) == 0)
        #expect(throws: FolderError.self) { try bobs.setMode(0o755) }
        #expect(try bobs.status().mode == 0o700)
    }
}
