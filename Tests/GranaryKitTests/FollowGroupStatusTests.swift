import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// A segment waiting for the others of its group (``FollowRun/publishGrouped(delay:log:)``) is not
/// shipped yet: the state `check` reads (``FollowRun/prepareStatus()``) does not count its user
/// caught up through the commits it holds until the group is durable, and the user is not read
/// again meanwhile (its next segment would take the same sequence number).
@Suite("follow: the state waits for a segment's group")
struct FollowGroupStatusTests {
    let folder = TemporaryFolder("granary-follow-group-status")

    @Test("a user whose segment waits is neither counted shipped through it nor read again; once published, both")
    func stateWaitsForGroup() throws {
        let rootPath = folder.child("root")
        try FileSystem.makeDirectory(rootPath, mode: 0o755)
        try FileSystem.makeDirectory(rootPath + "/erin")
        let store = rootPath + "/erin/Local.sqlite"
        try FollowDescriptorsTests.makeWALStore(store, rows: ["one"])
        let user = try UserID("erin")
        let root = Root(path: rootPath)
        let repository = LocalRepository(path: initializedRepository(folder.child("repo")))
        let run = FollowRun(
            root: root, repository: repository,
            backup: BackupOperation(root: root, repository: repository, options: BackupOperation.Options()), cap: 0,
            users: [user])
        run.groupedPublish = true
        run.watcher = try #require(FollowWatcher())
        var events: [FollowEvent] = []
        // The first generation: its base and first segment, published at once.
        run.process(user, FollowRun.Pending(since: run.clock.now, whole: true)) { events.append($0) }
        let follower = try #require(run.followers[user], "\(events)")
        #expect(follower.generation != nil, "\(events)")
        #expect(follower.unpublished == nil)
        let sequence = follower.publishedSequence

        let db = try Database(path: store, mode: .readWrite)
        try db.run("INSERT INTO items(body) VALUES ('two')")
        try db.keepWALOnClose()
        let written = ArchiveName.micros(Date())
        usleep(2_000)
        run.process(user, FollowRun.Pending(since: run.clock.now, whole: true)) { events.append($0) }
        #expect(follower.unpublished != nil, "the round's segment waits for its group: \(events)")
        #expect(run.unpublished.map(\.user) == [user])

        // The kernel's events all taken in after the commit: without the wait, erin would count
        // as shipped through that moment.
        run.drainedAt = ArchiveName.micros(Date())
        let waiting = run.prepareStatus().users["erin"]?.shippedThrough
        #expect(
            waiting.map { $0 < written } ?? true,
            "claimed through \(String(describing: waiting)) before the segment is durable")
        #expect(run.prepareStatus().users["erin"]?.sequence == sequence)
        // Not read again while it waits: no second segment under the same number.
        let waitingFile = follower.unpublished?.temporary
        #expect(try follower.round(only: nil).isEmpty)
        #expect(follower.unpublished?.temporary == waitingFile)
        #expect(try follower.ship(only: nil).isEmpty)
        #expect(run.unpublished.count == 1)

        run.publishGrouped(delay: .zero) { events.append($0) }
        #expect(follower.unpublished == nil)
        #expect(run.unpublished.isEmpty)
        let status = run.prepareStatus().users["erin"]
        #expect(status?.sequence == sequence + 1, "\(events)")
        #expect((status?.shippedThrough ?? 0) >= written, "\(String(describing: status))")
        let generation = try #require(
            FollowCatalogue.generations(in: folder.child("repo"), user: user, host: nil).last)
        #expect(generation.segments.map(\.sequence) == Array(1...(sequence + 1)))
    }
}
