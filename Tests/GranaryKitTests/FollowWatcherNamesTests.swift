import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// What the kernel's events come to (``FollowWatcher/drain(into:)``): a write to a `-wal` or a
/// file says which store to read, a `-shm`, `-journal` or hidden name none. Writes are most of
/// the events, so what each name came to is remembered per watch (``FollowWatcher/modified``):
/// these tests write each name again and again, past the names remembered, and move a folder so
/// that the same watch stands for another path.
@Suite("follow: the watcher's names")
struct FollowWatcherNamesTests {
    let folder = TemporaryFolder("granary-follow-watcher-names")

    func append(_ path: String) {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        #expect(fd >= 0, "\(path)")
        #expect(write(fd, "x", 1) == 1)
        close(fd)
    }

    /// The events reported within a second of the writes (they are there at once: the kernel
    /// queues them as the writes return).
    func changes(_ watcher: FollowWatcher) -> FollowChanges {
        var changes = FollowChanges()
        watcher.wait(.seconds(1))
        watcher.drain(into: &changes)
        return changes
    }

    @Test("writes come to their stores, each time; a folder moved and watched again, to its new path")
    func writesToStores() throws {
        let rootPath = folder.child("root")
        try FileSystem.makeDirectory(rootPath, mode: 0o755)
        try FileSystem.makeDirectory(rootPath + "/dana/App", mode: 0o700)
        let names = [
            "App/Store.sqlite-wal", "App/Store.sqlite-shm", "App/Old.sqlite-journal", "App/.hidden", "Top.db",
            "App/a.db-wal", "App/b.db-wal", "App/c.db-wal", "App/d.db-wal", "App/e.db-wal", "App/f.db-wal",
            "App/g.db-wal", "App/h.db-wal",
        ]
        for name in names { append(rootPath + "/dana/" + name) }
        let user = try UserID("dana")
        let watcher = try #require(FollowWatcher())
        #expect(watcher.watch(try Root(path: rootPath).user(user)) == nil)
        let expected: Set<String> = [
            "App/Store.sqlite", "Top.db", "App/a.db", "App/b.db", "App/c.db", "App/d.db", "App/e.db", "App/f.db",
            "App/g.db", "App/h.db",
        ]
        for _ in 0..<4 {
            for name in names { append(rootPath + "/dana/" + name) }
            let found = changes(watcher)
            #expect(found.stores[user] == expected)
            #expect(found.users.isEmpty && !found.root && !found.overflow)
        }
        #expect(watcher.modified.values.allSatisfy { $0.count <= FollowWatcher.modifiedNames })
        #expect(!watcher.modified.isEmpty, "writes are remembered")

        // The store's write remembered last (more names than a watch remembers were written).
        append(rootPath + "/dana/App/Store.sqlite-wal")
        #expect(changes(watcher).stores[user] == ["App/Store.sqlite"])
        #expect(watcher.modified.values.contains { $0.contains { $0.raw == Array("Store.sqlite-wal".utf8) } })
        // The folder moved: the watch on its inode stays, and stands for the new path once the
        // user's folders are watched again (as a whole round does after such an event).
        #expect(rename(rootPath + "/dana/App", rootPath + "/dana/Moved") == 0)
        #expect(changes(watcher).users == [user])
        #expect(watcher.watch(try Root(path: rootPath).user(user)) == nil)
        append(rootPath + "/dana/Moved/Store.sqlite-wal")
        append(rootPath + "/dana/Moved/Store.sqlite-shm")
        #expect(changes(watcher).stores[user] == ["Moved/Store.sqlite"])
    }
}
