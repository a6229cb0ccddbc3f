import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// `follow`'s kept descriptors (``FollowDescriptors``): a store's folders, file and `-wal` are
/// used again only while every name on the way is still the inode kept. Each test warms the
/// cache (the store opened, then found kept), swaps one thing on the way for a link, another file
/// or a hard link, and checks that the kept descriptors are not used: what is found is what a
/// fresh open beneath the root finds.
@Suite("follow: kept descriptors checked again each round")
struct FollowDescriptorsTests {
    let folder = TemporaryFolder("granary-follow-kept")
    var rootPath: String { folder.child("root") }
    var home: String { rootPath + "/erin" }
    var store: String { home + "/Data/Busy.sqlite" }
    let user: UserID
    let root: Root

    init() throws {
        try FileSystem.makeDirectory(folder.child("root"), mode: 0o755)
        try FileSystem.makeDirectory(folder.child("root") + "/erin/Data")
        user = try UserID("erin")
        root = Root(path: folder.child("root"))
        try Self.makeWALStore(folder.child("root") + "/erin/Data/Busy.sqlite", rows: ["one", "two"])
    }

    static func makeWALStore(_ path: String, rows: [String]) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        for row in rows { try db.run("INSERT INTO items(body) VALUES (?)", [.text(row)]) }
        try db.keepWALOnClose()
    }

    static func inode(_ path: String) -> UInt64 {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt64(info.st_ino) : 0
    }

    static func inode(of reader: WALReader) throws -> UInt64 { UInt64(try reader.file.status().st_ino) }

    /// A cache with the store and its `-wal` kept, found kept once.
    func warm() throws -> (FollowDescriptors, StoreFile) {
        let descriptors = FollowDescriptors()
        let opened = try #require(descriptors.open("Data/Busy.sqlite", of: user, root: root))
        _ = try #require(try descriptors.wal(of: opened, user: user))
        let kept = try #require(descriptors.store("Data/Busy.sqlite", of: user, root: root))
        #expect(kept.inode == Self.inode(store))
        let wal = try #require(try descriptors.wal(of: kept, user: user))
        #expect(try Self.inode(of: wal) == Self.inode(store + "-wal"))
        let entry = try #require(descriptors.kept[.init(user: "erin", store: "Data/Busy.sqlite")])
        #expect(entry.wal != nil)
        return (descriptors, kept)
    }

    @Test("kept: the same inodes, read through the kept descriptors, each name looked at again")
    func keptWhileUnchanged() throws {
        let (descriptors, kept) = try warm()
        let again = try #require(descriptors.store("Data/Busy.sqlite", of: user, root: root))
        #expect(again.folder === kept.folder, "the kept folder descriptor was not used")
        #expect(again.inode == kept.inode && again.header.isWAL)
    }

    @Test("the -wal swapped for a link to a copy of itself: refused, the kept -wal not read")
    func walSwappedForLink() throws {
        let (descriptors, kept) = try warm()
        let copy = folder.child("copy-wal")
        #expect(copy.withCString { target in (store + "-wal").withCString { Glibc.link($0, target) } } == 0)
        #expect(unlink(store + "-wal") == 0)
        #expect(symlink(copy, store + "-wal") == 0)
        let found = try #require(descriptors.store("Data/Busy.sqlite", of: user, root: root))
        #expect(found.inode == kept.inode)
        #expect(throws: (any Error).self) { try descriptors.wal(of: found, user: user) }
        #expect(descriptors.kept[.init(user: "erin", store: "Data/Busy.sqlite")]?.wal == nil)
    }

    @Test("the -wal swapped for a hard link to another owner's file: refused, not read")
    func walSwappedForHardLink() throws {
        let (descriptors, kept) = try warm()
        let other = folder.child("other-wal")
        #expect(FileManager.default.createFile(atPath: other, contents: Data(repeating: 7, count: 4096)))
        #expect(chown(other, 65534, 65534) == 0)
        #expect(unlink(store + "-wal") == 0)
        #expect(Glibc.link(other, store + "-wal") == 0)
        #expect(throws: (any Error).self) { try descriptors.wal(of: kept, user: user) }
    }

    @Test("the -wal replaced by another file of the owner's: that file is read, not the kept one")
    func walReplaced() throws {
        let (descriptors, kept) = try warm()
        let copy = folder.child("copy-wal")
        #expect(
            FileManager.default.createFile(atPath: copy, contents: FileManager.default.contents(atPath: store + "-wal"))
        )
        #expect(rename(copy, store + "-wal") == 0)
        let reader = try #require(try descriptors.wal(of: kept, user: user))
        #expect(try Self.inode(of: reader) == Self.inode(store + "-wal"))
    }

    @Test("the store swapped for a link to a copy: not kept, and a fresh open refuses the link")
    func storeSwappedForLink() throws {
        let (descriptors, _) = try warm()
        let copy = folder.child("copy.sqlite")
        #expect(copy.withCString { target in store.withCString { Glibc.link($0, target) } } == 0)
        #expect(unlink(store) == 0)
        #expect(symlink(copy, store) == 0)
        #expect(descriptors.store("Data/Busy.sqlite", of: user, root: root) == nil)
        #expect(descriptors.kept.isEmpty)
        #expect(descriptors.open("Data/Busy.sqlite", of: user, root: root) == nil)
    }

    @Test("the store replaced by another file: not kept, the new inode found (a replaced store)")
    func storeReplaced() throws {
        let (descriptors, kept) = try warm()
        let copy = folder.child("copy.sqlite")
        #expect(FileManager.default.createFile(atPath: copy, contents: FileManager.default.contents(atPath: store)))
        #expect(rename(copy, store) == 0)
        #expect(descriptors.store("Data/Busy.sqlite", of: user, root: root) == nil)
        let fresh = try #require(descriptors.open("Data/Busy.sqlite", of: user, root: root))
        #expect(fresh.inode != kept.inode && fresh.inode == Self.inode(store))
    }

    @Test("the store's folder swapped for a link to a folder with a copy: not kept, the link refused")
    func folderSwappedForLink() throws {
        let (descriptors, _) = try warm()
        let outside = folder.child("outside")
        #expect(rename(home + "/Data", outside) == 0)
        #expect(symlink(outside, home + "/Data") == 0)
        #expect(descriptors.store("Data/Busy.sqlite", of: user, root: root) == nil)
        #expect(descriptors.open("Data/Busy.sqlite", of: user, root: root) == nil)
    }

    @Test("the user's folder swapped for a link to a copy: not kept, the link refused")
    func userFolderSwappedForLink() throws {
        let (descriptors, _) = try warm()
        let outside = folder.child("outside-home")
        #expect(rename(home, outside) == 0)
        #expect(symlink(outside, home) == 0)
        #expect(descriptors.store("Data/Busy.sqlite", of: user, root: root) == nil)
        #expect(descriptors.open("Data/Busy.sqlite", of: user, root: root) == nil)
    }

    @Test("a store whose folder changed owner is opened afresh")
    func folderOwnerChanged() throws {
        let (descriptors, _) = try warm()
        #expect(chown(home + "/Data", 65534, 65534) == 0)
        #expect(descriptors.store("Data/Busy.sqlite", of: user, root: root) == nil)
        // Opened afresh: a folder of another owner's on the way is refused.
        #expect(descriptors.open("Data/Busy.sqlite", of: user, root: root) == nil)
    }

    @Test("bounded: least recently used stores let go past the budget, idle ones after the idle time")
    func bounded() throws {
        for name in ["A", "B", "C"] { try Self.makeWALStore(home + "/\(name).sqlite", rows: ["x"]) }
        // Each store in the user's folder holds 3 descriptors: room for two.
        let descriptors = FollowDescriptors(budget: 7, idle: .seconds(3600))
        for name in ["A", "B", "C"] { _ = try #require(descriptors.open("\(name).sqlite", of: user, root: root)) }
        #expect(descriptors.held <= 7)
        #expect(Set(descriptors.kept.keys.map(\.store)) == ["B.sqlite", "C.sqlite"])
        _ = try #require(descriptors.store("B.sqlite", of: user, root: root))
        _ = try #require(descriptors.open("A.sqlite", of: user, root: root))
        #expect(Set(descriptors.kept.keys.map(\.store)) == ["A.sqlite", "B.sqlite"])
        let idle = FollowDescriptors(idle: .zero)
        _ = try #require(idle.open("A.sqlite", of: user, root: root))
        idle.expire()
        #expect(idle.kept.isEmpty && idle.held == 0)
    }
}
