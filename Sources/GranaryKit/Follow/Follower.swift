import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One event of `follow` worth a line in the journal.
public struct FollowEvent: Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable { case generation, segment, skipped, paused, polled }
    public let kind: Kind
    public let user: String
    public let message: String
    public var description: String { user.isEmpty ? message : "\(user): \(message)" }
}

/// Follows one user's WAL stores into the repository: a generation begins with a backup (its
/// base), then each round ships the commits read since the last one as a segment
/// (docs/follow.md).
public final class UserFollower {
    public let user: UserID
    let root: Root
    let repository: any Repository
    let backup: BackupOperation
    /// The most page bytes one round reads of this user, and the largest database a frame may
    /// claim (`[limits] bytes_per_user`; 0: no cap).
    let cap: Int64
    let host: String

    /// The generation (its base archive's file name), the last sequence published, and where each
    /// store stands.
    public private(set) var generation: String?
    public private(set) var sequence = 0
    var cursors: [String: Segment.StoreCursor] = [:]
    /// Stores passed over (rollback journal), said once.
    public private(set) var named: Set<String> = []
    /// Stores the last round did not read to the end (the round's budget ran out): read first in
    /// the next round.
    public private(set) var behind: Set<String> = []

    /// The most page bytes one round reads of one user (with `bytes_per_user` when smaller): a
    /// user who writes as fast as the disk allows is read in turns with everyone else, never
    /// ahead of them (docs/follow.md, "Many users").
    public static let roundBytes: Int64 = 64 << 20
    /// What SQLite may sleep, in all, in one turn of one user (``SleepAllowance``): the owner
    /// controls its stores' locks and `-shm` files, which can make SQLite wait on every open (some
    /// 10 s per store for a `-shm` kept inconsistent), and everyone after it waits for the turn.
    /// Past it, a read mark is not taken (``holding(_:_:)``) and a base backup that waits fails.
    public static let turnSleep: Duration = .milliseconds(500)
    /// What SQLite may sleep taking one store's read mark (within the turn's).
    public static let markSleep: Duration = .milliseconds(100)
    /// The newest observation of the newest segment published (microseconds).
    public private(set) var lastShipped: Int64?

    /// How many generations a user may start at once, and how long it takes to earn one more:
    /// an owner whose store is replaced, VACUUMed into a new file or switched between journal
    /// modes in a loop would otherwise cost a base backup each time, every turn, and everyone
    /// after it waits for those backups. Past the burst the user's following pauses (a gap, said
    /// in the journal and in check) until one more may start (docs/follow.md, "Generation storms").
    public static let generationBurst = 4
    public static let generationEvery: Duration = .seconds(10)
    /// The generations this user may still start (``generationBurst``, ``generationEvery``).
    var generations = GenerationBudget(burst: UserFollower.generationBurst, every: UserFollower.generationEvery)
    /// While a new generation waits for the bucket: until when, and why it is needed (said once).
    public private(set) var heldUntil: ContinuousClock.Instant?
    var heldReason: String?
    /// Why the generation that could not start was needed (a start that threw), for the next.
    var startReason: String?
    /// Why this user's following is paused while a new generation waits, for check.
    public private(set) var held: String?

    /// Resumed from an earlier run's segment and not yet read through: what the next reads find
    /// was committed while no follower ran, at moments nobody observed (see ``readRound``).
    var resumed = false
    /// A round failed (a store that cannot be read, the repository refusing a segment): the
    /// moments since the last segment were not followed. The next round reads every store, and
    /// what it finds was committed at moments nobody observed (a gap, as after a resume).
    var unseen = false
    /// For each store, when the last read that went to the end of its `-wal` began (microseconds):
    /// every commit a later read of it finds was acknowledged after that.
    var readThrough: [String: Int64] = [:]
    /// The last segment read was not published (its publish failed, or was given up): the next
    /// round reads its commits again, and the changes the caller reports then are later than
    /// theirs, so only ``readThrough`` bounds when they were acknowledged.
    var rereading = false
    /// How long after its acknowledgement a commit may be observed with the moments in between
    /// still claimed (`follow_interval`; microseconds): a segment that may hold a commit observed
    /// later than that leaves those moments out of its window (``readRound``).
    public var tolerance: Int64 = 1_000_000
    /// The zstd context its segments are written with (one kept by ``FollowRun`` for every user;
    /// nil: a new one per segment).
    public var compressor: SegmentCompressor?
    /// Publishes this user's segments in the background (a remote repository; nil: each is
    /// published within its round). See ``SegmentShipper``.
    public var shipper: SegmentShipper?
    /// The segments handed to ``shipper`` and not yet published, oldest first. The follower reads
    /// on from the newest (``sequence``, ``cursors``… are where the next read begins), while what
    /// is claimed (``publishedSequence``, ``publishedLastShipped``, the state for `check`) moves on
    /// only as each is published, in order: a segment is claimed once it and every earlier one
    /// of its generation are in the repository. One given up takes every later one with it, and
    /// the follower falls back to ``fallback`` (``shipped(_:)``).
    var staged: [Staged] = []
    /// Where the follower stood after its last segment published, while any is staged.
    var fallback: Position?
    /// Why continuity was lost, when a read found it lost while segments were staged: the new
    /// generation starts once they are settled (a generation's segments are never staged behind
    /// another's), whatever the stores look like by then. Kept through a fallback too: what broke
    /// it (a store made, written and removed while uploads stalled) may be gone when the staged
    /// segments settle, and reading on in the old generation would claim moments whose commits
    /// are in no segment.
    var breakWaiting: String?
    /// Whether the follower must be read again whole once its staged segments allow (its reads
    /// fell back, or a new generation waits): taken by ``FollowRun/collectShipped(log:)``.
    var needsRead = false

    /// The most segments, and the most bytes, of one user staged before it is read again:
    /// a user whose uploads stall stops being read (its lag grows in `check`; its commits wait in
    /// its `-wal`) without holding anyone else back, and the work folder stays bounded.
    public static let stagedSegments = 16
    public static let stagedBytes: Int64 = 64 << 20
    /// The most rounds, and the most bytes, one staged segment takes in by merging (a round's
    /// segment joined to the user's newest staged one not yet uploading, ``merge(_:with:)``):
    /// one upload, and the merge its upload begins with, stay small.
    public static let mergedRounds = 16
    public static let mergedBytes: Int64 = 4 << 20

    /// What the follower's reading state is after a segment (or before the first staged).
    struct Position {
        let sequence: Int
        let cursors: [String: Segment.StoreCursor]
        let behind: Set<String>
        let lastShipped: Int64?
        let readThrough: [String: Int64]
        let resumed: Bool
    }

    struct Staged {
        let sequence: Int
        /// Its name in the repository (an outcome is matched to it as well as to the sequence).
        let object: String
        let bytes: Int64
        /// Its commits, frames, first and last observation, cursors.
        let trailer: Segment.Trailer
        /// The rounds it holds (more than one when merged).
        let rounds: Int
        /// Whether its first observation is not after the previous segment's last: it marks a gap
        /// (``FollowCatalogue/Generation/windows``), so nothing is merged into it (the moments
        /// a round merged into it claims would be cut with the gap).
        let marksGap: Bool
        /// When its (last) round began, and whether it left nothing behind (the state for `check`).
        let began: Int64
        let caughtUp: Bool
        let after: Position
        let event: FollowEvent
    }

    /// With a local repository: a round leaves its segment written and not yet durable
    /// (``unpublished``) for ``FollowRun`` to publish with the others of its group, each file
    /// synced, then linked, then each folder synced (docs/follow.md, "Grouped durability").
    var grouped = false
    /// The segment of the last round, written under a temporary name in its generation's folder
    /// and not yet durable, and where the follower stands once it is (``settlePublished(_:)``).
    /// Nothing of it is claimed until then.
    var unpublished: Unpublished?

    struct Unpublished {
        let writer: SegmentWriter
        let temporary: String
        /// Its final path, and its folder (synced once the file is linked there).
        let final: String
        let folder: String
        let after: Position
        let event: FollowEvent
    }

    /// Ends the wait of ``unpublished``: durable (`failure` nil), the follower moves on to where
    /// its round left it and the segment's event is returned; not (its file is removed), the
    /// follower stays where it was and the next round reads the same commits again.
    func settlePublished(_ failure: Error?) -> FollowEvent? {
        guard let done = unpublished else { return nil }
        unpublished = nil
        if failure != nil {
            unlink(done.temporary)
            return nil
        }
        rereading = false
        sequence = done.after.sequence
        cursors = done.after.cursors
        behind = done.after.behind
        lastShipped = done.after.lastShipped
        readThrough = done.after.readThrough
        return done.event
    }

    /// The descriptors of busy stores kept between rounds (one kept by ``FollowRun`` for every
    /// user; nil: each store opened beneath the root every round). See ``FollowDescriptors``.
    var descriptors: FollowDescriptors?

    var position: Position {
        Position(
            sequence: sequence, cursors: cursors, behind: behind, lastShipped: lastShipped, readThrough: readThrough,
            resumed: resumed)
    }

    /// Whether segments of this user are being published (``shipper``).
    public var uploading: Bool { !staged.isEmpty }

    /// Whether this user is not to be read now: its last round's segment waits for the others
    /// of its group to be made durable (``unpublished``), or ``waitsForUploads``.
    var waits: Bool { unpublished != nil || waitsForUploads }

    /// Whether this user is not to be read until some of its staged segments are settled: as many
    /// staged as ``stagedSegments`` or ``stagedBytes`` allow, or a new generation waits for them.
    public var waitsForUploads: Bool {
        guard !staged.isEmpty else { return false }
        return breakWaiting != nil || staged.count >= Self.stagedSegments
            || staged.reduce(Int64(0)) { $0 + $1.bytes } >= Self.stagedBytes
    }

    /// The last sequence published, and the newest observation it holds (what is claimed).
    public var publishedSequence: Int { fallback?.sequence ?? sequence }
    public var publishedLastShipped: Int64? { staged.isEmpty ? lastShipped : fallback?.lastShipped }

    /// The sequences staged and not published, oldest first, and the commits they hold.
    public var stagedSequences: [Int] { staged.map(\.sequence) }
    public var stagedCommits: Int { staged.reduce(0) { $0 + $1.trailer.commits } }

    /// What became of a segment handed to ``shipper``.
    public struct Settled {
        public var events: [FollowEvent] = []
        /// When published: when its round began, and whether it left nothing behind.
        public var began: Int64?
        public var caughtUp = false
    }

    /// What became of a segment handed to ``shipper`` (outcomes come in order; one that is not
    /// the oldest staged, by sequence and name, left from a segment already fallen back from, is
    /// ignored). Published: it is claimed. Given up: so is every later one staged, and the
    /// follower falls back to its last published segment: the next round reads the same commits
    /// again, in the same generation, unless a later segment may have landed behind the one
    /// given up (``SegmentShipper/Finished/orphaned``): its sequence is taken, so continuity is
    /// lost and a new generation starts.
    public func shipped(_ done: SegmentShipper.Finished) -> Settled {
        var settled = Settled()
        guard let head = staged.first, head.sequence == done.sequence, head.object == done.object else {
            return settled
        }
        switch done.outcome {
        case .published:
            staged.removeFirst()
            fallback = staged.isEmpty ? nil : head.after
            settled.events = [head.event]
            settled.began = head.began
            settled.caughtUp = head.caughtUp
            if staged.isEmpty && breakWaiting != nil { needsRead = true }
        case .abandoned(let reason):
            let sequences = staged.map(\.sequence)
            if let back = fallback {
                sequence = back.sequence
                cursors = back.cursors
                behind = back.behind
                lastShipped = back.lastShipped
                readThrough = back.readThrough
                resumed = back.resumed
            }
            staged = []
            fallback = nil
            needsRead = true
            rereading = true
            if done.orphaned {
                breakWaiting = "segment \(done.sequence) not published while a later one was uploading"
            }
            let which =
                sequences.count == 1 ? "segment \(sequences[0])" : "segments \(sequences[0])–\(sequences.last!)"
            settled.events = [
                FollowEvent(
                    kind: .paused, user: user.rawValue,
                    message: "following paused: \(which) not published (\(reason)); their commits are read again")
            ]
        }
        return settled
    }

    public init(user: UserID, root: Root, repository: any Repository, backup: BackupOperation, cap: Int64) {
        self.user = user
        self.root = root
        self.repository = repository
        self.backup = backup
        self.cap = cap
        self.host = repository.context.host
    }

    /// The stores followed (their names relative to the user's folder).
    public var followed: Set<String> { Set(cursors.keys) }

    /// Whether `store` is followed (one of ``followed``, without making the set).
    func follows(_ store: String) -> Bool { cursors[store] != nil }

    /// The folder of this host's segments of the user, in the repository.
    var followFolder: String { user.rawValue + "/follow/" + host }

    /// Resumes from the newest published segment, when its cursors still hold (``round()`` checks
    /// them on its first read). Returns false when there is nothing to resume. The newest
    /// segment is that of the generation's prefix (its segments from 1 without a hole, what is
    /// claimed): segments after a hole (uploaded beside an earlier one that never landed: the run
    /// was killed in between) are removed first, newest first, since the next segments take
    /// their sequences; when one cannot be removed, a new generation starts instead.
    public func resume() -> Bool {
        guard let generations = try? FollowCatalogue.generations(in: repository, user: user, host: host),
            let newest = generations.last, let last = newest.segments.last,
            newest.segments.count == last.sequence,
            (try? Self.removeOrphans(of: newest, user: user, in: repository, inFlight: shipper?.perUser ?? 1)) != nil,
            let (header, trailer) = try? FollowedGenerations.withLocalCopy(
                of: last.object, size: last.size, in: repository, SegmentReader.check),
            header.generation == newest.name,
            // Its base still there (removed behind follow's back, it would replay onto nothing):
            // else a new generation starts.
            (try? repository.objects(in: user.rawValue))?.contains(where: { $0.name == newest.name }) == true
        else { return false }
        generation = newest.name
        sequence = last.sequence
        cursors = trailer.cursors
        lastShipped = trailer.last
        resumed = true
        return true
    }

    /// Removes the segments of `generation` after its claimed prefix (newest first) in a remote
    /// repository, when they are what uploads side by side leave (at most `inFlight` of a user's
    /// segments upload at once: each within that many of the hole); throws when there are some in
    /// a local one, or any further on (a claimed segment lost behind granary's back, whose later
    /// ones a mirror may still repair: kept, and a new generation starts).
    static func removeOrphans(
        of generation: FollowCatalogue.Generation, user: UserID, in repository: any Repository, inFlight: Int
    ) throws {
        guard
            let listed = try FollowedGenerations.list(in: repository, user: user, host: generation.host).last(where: {
                $0.base == generation.name
            })
        else { return }
        let claimed = Set(generation.segments.map(\.name))
        let orphans = listed.segments.filter { !claimed.contains($0.name) }
        guard !orphans.isEmpty else { return }
        // Only an upload beside an earlier one leaves segments after a hole; in a local
        // repository (published one by one) a hole is someone else's doing: left alone, and a
        // new generation starts.
        guard repository.localPath == nil else { throw FollowedGenerations.HoleLeft() }
        let hole = (generation.segments.last?.sequence ?? 0) + 1
        guard orphans.allSatisfy({ $0.sequence > hole && $0.sequence < hole + inFlight }) else {
            throw FollowedGenerations.HoleLeft()
        }
        for orphan in orphans.reversed() {
            try repository.deleteSmall(listed.object + "/" + orphan.name)
        }
    }

    /// One round: a new generation when there is none, or when continuity cannot be proven;
    /// otherwise the commits since the last round as the next segment. `only` names the stores
    /// to read (those that changed; the others are not opened); nil reads every store, after a
    /// scan of the user's folders. Returns what is worth logging.
    /// `changedAfter`: a moment before every change the caller knows of that this round reads
    /// (the kernel's events were taken in then, microseconds); nil when it knows none.
    public func round(only: Set<String>? = nil, changedAfter: Int64? = nil) throws -> [FollowEvent] {
        try SleepAllowance.within(Self.turnSleep) { () throws -> [FollowEvent] in
            try turn(only: only, changedAfter: changedAfter)
        }
    }

    func turn(only: Set<String>?, changedAfter: Int64?) throws -> [FollowEvent] {
        var events: [FollowEvent] = []
        // As many segments staged as a user may have, or its last segment waiting for its
        // group: those are published first.
        guard !waits else { return events }
        if let reason = breakWaiting {
            // Its staged segments are settled: the generation whose continuity was lost ends.
            breakWaiting = nil
            return try startGeneration(reason: reason, events: &events)
        }
        if generation == nil {
            return try startGeneration(reason: "following starts", events: &events)
        }
        switch try readRound(only: only.map { $0.union(behind) }, changedAfter: changedAfter) {
        case .shipped(let event):
            if let event { events.append(event) }
            return events
        case .broken(let reason):
            descriptors?.forget(user)
            if !staged.isEmpty {
                // Its staged segments are settled first (published, or fallen back from).
                breakWaiting = reason
                events.append(
                    FollowEvent(
                        kind: .paused, user: user.rawValue,
                        message:
                            "continuity lost (\(reason)): a new generation starts once the \(staged.count) segments staged are settled"
                    ))
                return events
            }
            return try startGeneration(reason: reason, events: &events)
        }
    }

    /// Ships what the stores (all, or those of `only`) hold now, without starting a generation
    /// when continuity is lost (that waits for the next run): what `follow` does when stopped.
    /// With ``shipper`` the segment is staged behind the user's others (whatever their number:
    /// the run is ending), for the stop's last uploads.
    public func ship(only: Set<String>?, changedAfter: Int64? = nil) throws -> [FollowEvent] {
        // (A segment waiting for its group holds this user's next sequence number.)
        guard generation != nil, breakWaiting == nil, unpublished == nil else { return [] }
        let outcome = try SleepAllowance.within(Self.turnSleep) { () throws -> RoundOutcome in
            try readRound(
                only: only.map { $0.union(behind) }, changedAfter: changedAfter, background: shipper != nil)
        }
        switch outcome {
        case .shipped(let event): return event.map { [$0] } ?? []
        case .broken(let reason):
            descriptors?.forget(user)
            return [
                FollowEvent(
                    kind: .paused, user: user.rawValue,
                    message: "not shipped at stop: \(reason); a new generation starts with the next run")
            ]
        }
    }

    /// Merges the segment just written into the user's newest staged one, when the shipper still
    /// holds that one back (no upload of it begun, ``SegmentShipper/attach(user:sequence:object:becomes:file:)``):
    /// one segment under the earlier one's sequence, its records first, then the new one's
    /// (written when its upload begins), from the earlier one's first observation to the new
    /// one's last. What it claims is what the two claimed (``FollowCatalogue/Generation/windows``),
    /// so only a new segment that continues the earlier one is merged (its first observation
    /// after the earlier one's last: not one that marks a gap), never into one that marks a gap
    /// (its gap would cut what the new one claims), and only up to ``mergedRounds`` rounds and
    /// ``mergedBytes``. Nil when not merged (the file is the caller's still).
    func merge(
        _ shipper: SegmentShipper, with new: (file: String, bytes: Int64, trailer: Segment.Trailer)
    ) -> (object: String, bytes: Int64, trailer: Segment.Trailer, rounds: Int)? {
        guard let generation, let earlier = staged.last, earlier.sequence == sequence, !earlier.marksGap,
            new.trailer.first > earlier.trailer.last, earlier.rounds < Self.mergedRounds,
            earlier.bytes + new.bytes <= Self.mergedBytes
        else { return nil }
        var trailer = new.trailer
        trailer.first = earlier.trailer.first
        trailer.commits += earlier.trailer.commits
        trailer.frames += earlier.trailer.frames
        let name = Segment.fileName(sequence: earlier.sequence, first: trailer.first, last: trailer.last)
        let object = followFolder + "/" + generation + "/" + name
        guard
            shipper.attach(
                user: user, sequence: earlier.sequence, object: earlier.object, becomes: object, file: new.file)
        else { return nil }
        return (object, earlier.bytes + new.bytes, trailer, earlier.rounds + 1)
    }

    enum RoundOutcome {
        case shipped(FollowEvent?)
        case broken(String)
    }

    func walStores(_ events: inout [FollowEvent]) throws -> [StoreFile] {
        ReadTrace.follow("scan \(user.rawValue)")
        let folder = try root.user(user)
        var stores: [StoreFile] = []
        for store in folder.stores() {
            if store.header.isWAL {
                stores.append(store)
            } else if named.insert(store.name).inserted {
                events.append(
                    FollowEvent(
                        kind: .skipped, user: user.rawValue, message: "\(store.name) not followed: rollback journal"))
            }
        }
        return stores
    }

    /// The read position of each store now (read to the end, nothing kept), then the base backup,
    /// then the first segment: everything committed from those positions on.
    func startGeneration(reason: String, events: inout [FollowEvent]) throws -> [FollowEvent] {
        var attempts = 0
        // The reason the first held attempt had: what lost continuity, not the wait.
        var why = heldReason ?? startReason ?? reason
        descriptors?.forget(user)
        // The generation followed until now ends here, whatever comes of the new one: a start
        // that fails (the base backup, a store that cannot be read) leaves none, so that no later
        // round publishes onto the old one across what broke it. The reason is kept for the
        // next attempt.
        generation = nil
        startReason = why
        while true {
            attempts += 1
            if let until = generations.take(now: .now) {
                // Too many generations lately: paused, the old window ends where it ended (the
                // moments after it are a gap) and nothing is read until one more may start.
                let wait = max(.zero, until - .now)
                let message =
                    "following paused: more than \(Self.generationBurst) new generations lately (one more every \(DurationText.format(Self.generationEvery))); the next starts in \(DurationText.format(.seconds(Int64((wait / .seconds(1)).rounded(.up))))) (\(why))"
                if heldUntil == nil {
                    events.append(FollowEvent(kind: .paused, user: user.rawValue, message: message))
                }
                heldUntil = until
                heldReason = why
                held = message
                generation = nil
                return events
            }
            heldUntil = nil
            heldReason = nil
            held = nil
            let stores = try walStores(&events)
            var start: [String: Segment.StoreCursor] = [:]
            for store in stores {
                if (store.folder.entry(store.fileName + "-wal")?.size ?? 0) < Int64(WALReader.headerSize) {
                    // No -wal: nothing to read (and no connection opened, which would make one);
                    // the main file's mark proves a -wal that begins later whole from its start.
                    start[store.name] = Segment.StoreCursor(
                        device: store.device, inode: store.inode, wal: nil, main: Self.mark(store))
                    continue
                }
                var unreadable: String?
                let wal = try holding(store) { () throws -> WALCursor? in
                    guard
                        let reader = try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid)
                    else { return nil }
                    var claimed: UInt32 = 0
                    let read = try reader.read(from: nil, limit: .max, maxDatabaseBytes: cap > 0 ? cap : .max) {
                        frame, _ in
                        if frame.isCommit { claimed = frame.commitPages }
                    }
                    if let broken = read.broken {
                        unreadable = broken.description
                        return nil
                    }
                    // The main file as it is now: a checkpoint may have grown it since the scan.
                    let mainSize = max(store.size, store.folder.entry(store.fileName)?.size ?? 0)
                    if let cursor = read.cursor, let why = Self.implausible(claimed, cursor: cursor, mainSize: mainSize)
                    {
                        unreadable = why
                        return nil
                    }
                    return read.cursor
                }
                if let unreadable {
                    // Read from its first frame, the -wal cannot be followed (a frame past the
                    // cap): the first segment would fail after the backup, every attempt, each
                    // leaving a base archive. No backup: paused until the -wal changes.
                    events.append(
                        FollowEvent(
                            kind: .paused, user: user.rawValue,
                            message: "following paused: no generation could start (\(store.name): \(unreadable))"))
                    generation = nil
                    return events
                }
                start[store.name] = Segment.StoreCursor(device: store.device, inode: store.inode, wal: wal)
            }
            let result = try backup.run(user)
            generation = result.entry.name.fileName
            startReason = nil
            sequence = 0
            cursors = start
            behind = []
            resumed = false
            readThrough = [:]
            rereading = false
            events.append(
                FollowEvent(
                    kind: .generation, user: user.rawValue,
                    message: "new generation on \(result.entry.name.fileName): \(why)"))
            switch try readRound(first: true) {
            case .shipped(let event):
                if let event { events.append(event) }
                return events
            case .broken(let reason):
                generation = nil
                if attempts >= 3 {
                    events.append(
                        FollowEvent(
                            kind: .paused, user: user.rawValue,
                            message: "following paused: no generation could start (\(reason)); tried again next round"))
                    return events
                }
                why = reason
            }
        }
    }

    /// Why a `-wal` whose last commit claims `pages` pages cannot be a store's (nil: it can): every
    /// page past the main file's end was written by a frame of the chain since the last restart
    /// (a checkpoint that restarts the `-wal` has first copied every frame into the main file), so
    /// a store holds at most the main file's pages, the chain's frames and the lock-byte page
    /// SQLite never writes. A claim past that (a few valid frames claiming a store of gigabytes)
    /// would have the base backup read that much of nothing, in the user's turn, while everyone
    /// waits: no generation starts from it.
    static func implausible(_ pages: UInt32, cursor: WALCursor, mainSize: Int64) -> String? {
        guard cursor.pageSize > 0 else { return nil }
        let bound = mainSize / Int64(cursor.pageSize) + Int64(cursor.frame) + 1
        guard Int64(pages) > bound else { return nil }
        return
            "its -wal's last commit claims \(pages) pages, more than the store and its -wal hold (\(bound)); "
            + "SQLite would read the rest as zeros"
    }

    /// After a round that threw: the next is whole, and its commits are marked unobserved since
    /// the last segment (``unseen``, ``resumed``), so no moment of the failure is claimed.
    func roundFailed() {
        unseen = true
        if generation != nil { resumed = true }
    }

    /// Opens one followed store again, beneath the root, with every check a scan makes: nil
    /// when it is no longer a WAL store there (gone, a link, another kind of file). With
    /// ``descriptors``, the store's kept descriptors when every name on the way is still the
    /// inode kept (``FollowDescriptors``), else opened afresh and kept.
    func resolve(_ name: String) -> StoreFile? {
        if let descriptors {
            if let store = descriptors.store(name, of: user, root: root) {
                ReadTrace.follow("kept \(user.rawValue)/\(name)")
                return store
            }
            return descriptors.open(name, of: user, root: root)
        }
        guard let top = try? root.user(user), let parent = try? top.folder.parent(of: name),
            case let (folder, fileName) = parent, let entry = folder.entry(fileName), entry.kind == .file,
            let file = try? folder.openFile(fileName), let bytes = try? file.read(count: 100, at: 0),
            let header = StoreHeader(bytes), header.isWAL
        else { return nil }
        return StoreFile(
            name: name, folder: folder, fileName: fileName, size: entry.size, allocated: entry.allocated,
            header: header, uid: entry.uid, gid: entry.gid, mode: entry.mode, walSize: nil, hasSHM: false,
            hasJournal: false, hasExternalData: false, device: entry.device, inode: entry.inode)
    }

    /// Reads every store (or those of `only`) from its cursor into one segment and publishes it
    /// (the first segment of a generation always, later ones when they hold commits).
    /// With ``shipper`` and `background` (not a first segment), the segment is handed to it and
    /// the state moves on once it is published (``shipped(_:)``).
    func readRound(first: Bool = false, only: Set<String>? = nil, changedAfter: Int64? = nil, background: Bool = true)
        throws -> RoundOutcome
    {
        if !first { CrashPoint.reach(.followRead) }
        let stores: [StoreFile]
        if let only, !first {
            var found: [StoreFile] = []
            for name in only.sorted() {
                guard cursors[name] != nil else { return .broken("new store \(name)") }
                guard let store = resolve(name) else { return .broken("\(name) gone or no longer a WAL store") }
                found.append(store)
            }
            stores = found
        } else {
            var ignored: [FollowEvent] = []
            stores = try walStores(&ignored)
            let names = Set(stores.map(\.name))
            if names != Set(cursors.keys) {
                let added = names.subtracting(cursors.keys).sorted()
                let gone = Set(cursors.keys).subtracting(names).sorted()
                return .broken(
                    (added.isEmpty ? "" : "new store \(added.joined(separator: ", "))")
                        + (gone.isEmpty
                            ? "" : (added.isEmpty ? "" : "; ") + "store gone: \(gone.joined(separator: ", "))"))
            }
        }
        guard let generation else { return .broken("no generation") }
        // Written in the generation's folder itself (a hidden temporary name, as a publish's copy
        // would have), so that publishing it is a rename: no copy and no second file to sync.
        let folder: String
        if let local = repository.localPath {
            folder = local + "/" + followFolder + "/" + generation
            do { try FileSystem.makeDirectory(folder) } catch { throw RepositoryError.local(error) }
        } else {
            folder = try repository.prepareWorkFolder()
        }
        let temporary = folder + "/" + FileSystem.temporaryName(for: "segment.seg")
        let writer = try SegmentWriter(
            path: temporary,
            header: Segment.Header(user: user.rawValue, host: host, generation: generation, sequence: sequence + 1),
            compressor: compressor)
        let began = ArchiveName.micros(Date())
        var next = cursors
        // The first segment must reach past the base's snapshot: only bytes_per_user bounds it.
        var budget = first ? (cap > 0 ? cap : Int64.max) : min(cap > 0 ? cap : Int64.max, Self.roundBytes)
        var left: Set<String> = []
        // The stores read to the end of their -wal, and the earliest moment a commit read may have
        // been acknowledged (nil: no commit read; .min: not known).
        var readToEnd: [String] = []
        var oldest: Int64?
        for store in stores {
            guard let saved = cursors[store.name] else { continue }
            if store.device != saved.device || store.inode != saved.inode {
                return .broken("\(store.name): \(WALBreak.storeReplaced)")
            }
            if budget <= 0 {
                // This turn's budget is spent: the store waits for the user's next turn.
                left.insert(store.name)
                continue
            }
            if saved.wal == nil,
                (store.folder.entry(store.fileName + "-wal")?.size ?? 0) < Int64(WALReader.headerSize)
            {
                // Still no -wal: nothing to read, and no connection opened. SQLite would make the
                // -wal and remove it again on close, each an event that reads the store again.
                // A main file changed since it was marked was written through a -wal begun and
                // removed between two reads: those commits were never read.
                if let mark = saved.main, !Self.unchanged(store, since: mark) {
                    return .broken("\(store.name): written through a -wal that began and ended between two reads")
                }
                continue
            }
            ReadTrace.follow("read \(user.rawValue)/\(store.name)")
            // A -wal not grown past the cursor (its size, beneath the folder's descriptor), its
            // chain the same (its header's salts): nothing new to copy, or at most frames
            // rewritten in place after a rollback, which the reader checks like any other. No
            // read mark is taken for it, nor the store opened through SQLite to take one.
            var unheld: WALReader?
            if let cursor = saved.wal, let size = store.folder.entry(store.fileName + "-wal")?.size,
                size <= cursor.fileLength,
                let peek = try openWAL(store),
                let header = try peek.header(), header.salt1 == cursor.salt1, header.salt2 == cursor.salt2
            {
                unheld = peek
            }
            let outcome = try holding(store, unless: unheld != nil) { () throws -> Result<WALRead?, WALBreakReason> in
                guard
                    let reader = try unheld ?? openWAL(store)
                else {
                    return saved.wal == nil
                        ? .success(nil) : .failure(.init(text: "\(store.name): \(WALBreak.missing)"))
                }
                if saved.wal == nil && reader.length >= Int64(WALReader.headerSize) && saved.main == nil {
                    return .failure(.init(text: "\(store.name): a -wal began that was not followed from its start"))
                }
                var runSalt: UInt32?
                let read = try reader.read(from: saved.wal, limit: budget, maxDatabaseBytes: cap > 0 ? cap : .max) {
                    frame, page in
                    if runSalt != frame.salt1 {
                        // Observed once the chain was read through: each of its commits is older.
                        runSalt = frame.salt1
                        try writer.store(
                            Segment.StoreRun(
                                store: store.name, pageSize: page.count, observed: ArchiveName.micros(Date())))
                    }
                    try writer.frame(frame, page: page)
                }
                if let broken = read.broken { return .failure(.init(text: "\(store.name): \(broken)")) }
                if saved.wal == nil, let mark = saved.main, !Self.unchanged(store, since: mark) {
                    // Read from its first frame, then the main file checked: unchanged, no
                    // checkpoint copied frames into it since the mark, so no restart or removal of
                    // a -wal hid any; changed, the frames read may not be all there were.
                    return .failure(
                        .init(
                            text: "\(store.name): a -wal began and a checkpoint wrote into the store before it was read"
                        ))
                }
                if first && read.capped {
                    // The first segment must reach past the base's snapshot.
                    return .failure(.init(text: "\(store.name): more committed since the base than bytes_per_user"))
                }
                return .success(read)
            }
            switch outcome {
            case .failure(let reason): return .broken(reason.text)
            case .success(let read):
                if let read {
                    budget -= read.bytes
                    next[store.name]?.wal = read.cursor
                    if read.cursor != nil { next[store.name]?.main = nil }
                    if read.capped { left.insert(store.name) }
                    if read.commits > 0 {
                        // Acknowledged after the last read through this store began, and after
                        // the change the kernel reported (when it reported one).
                        let after = max(readThrough[store.name] ?? .min, rereading ? .min : (changedAfter ?? .min))
                        oldest = min(oldest ?? after, after)
                    }
                }
                if read?.capped != true { readToEnd.append(store.name) }
            }
        }
        let ended = ArchiveName.micros(Date())
        // After a resume, the commits read were made at unobserved moments since the last segment:
        // this segment's first observation is then that segment's last, which marks the moments
        // between as a gap (FollowCatalogue.Generation.windows), not as window.
        var unobservedSince = resumed && !first ? lastShipped : nil
        // A commit read here may have been acknowledged more than `tolerance` before `ended` (the
        // follower lagged: a loaded machine, another user's base backup): the moments from
        // `tolerance` after the earliest it may have been acknowledged are not claimed, and the
        // first observation says so as a resume's does (no later than the last segment's last).
        if !first, let oldest, let last = lastShipped, oldest == .min || ended - oldest > tolerance {
            let from = oldest == .min ? last : min(last, oldest + tolerance - 1)
            unobservedSince = min(unobservedSince ?? from, from)
        }
        if left.isEmpty { resumed = false }
        guard first || writer.trailer.commits > 0 else {
            behind = left
            for name in readToEnd { readThrough[name] = began }
            return .shipped(nil)
        }
        // A local repository's publish syncs the file before it renames it: one sync, not two.
        try writer.finish(
            first: unobservedSince ?? began, last: ended, cursors: next, sync: repository.localPath == nil)
        let trailer = writer.trailer
        let name = Segment.fileName(sequence: sequence + 1, first: trailer.first, last: trailer.last)
        let object = followFolder + "/" + generation + "/" + name
        if let shipper, background, !first {
            // Published in the background (the file is the shipper's now, uploaded after the
            // user's segments staged before it): the next read goes on from here, the claim
            // once it is published (shipped(_:)). When the user's newest staged segment has not
            // begun to upload, the two are merged into one (the uploads lag: one object fewer).
            let bytes = FileSystem.size(temporary)
            let merged = merge(shipper, with: (file: temporary, bytes: bytes, trailer: trailer))
            let marksGap = merged == nil && lastShipped.map { trailer.first <= $0 } == true
            if staged.isEmpty { fallback = position }
            if merged == nil { sequence += 1 }
            cursors = next
            behind = left
            lastShipped = trailer.last
            rereading = false
            for name in readToEnd { readThrough[name] = began }
            let segment =
                merged ?? (object: object, bytes: bytes, trailer: trailer, rounds: 1)
            if merged != nil { staged.removeLast() }
            staged.append(
                Staged(
                    sequence: sequence, object: segment.object, bytes: segment.bytes, trailer: segment.trailer,
                    rounds: segment.rounds, marksGap: marksGap, began: began,
                    caughtUp: left.isEmpty,
                    after: position,
                    event: FollowEvent(
                        kind: .segment, user: user.rawValue,
                        message:
                            "segment \(sequence) of \(generation): \(segment.trailer.commits) commits, \(segment.trailer.frames) frames"
                            + (segment.rounds > 1 ? " (\(segment.rounds) rounds merged while uploads lagged)" : "")
                    )))
            if merged == nil { shipper.send(user: user, sequence: sequence, object: object, file: temporary) }
            return .shipped(nil)
        }
        if grouped, background, !first, let local = repository.localPath {
            // Published with the other segments of its group (FollowRun.publishGrouped): its
            // bytes start out now, and nothing moves on until its folder is synced.
            writer.startWriteback()
            rereading = true
            var through = readThrough
            for name in readToEnd { through[name] = began }
            unpublished = Unpublished(
                writer: writer, temporary: temporary, final: local + "/" + object, folder: folder,
                after: Position(
                    sequence: sequence + 1, cursors: next, behind: left, lastShipped: trailer.last,
                    readThrough: through, resumed: resumed),
                event: FollowEvent(
                    kind: .segment, user: user.rawValue,
                    message:
                        "segment \(sequence + 1) of \(generation): \(trailer.commits) commits, \(trailer.frames) frames"
                ))
            return .shipped(nil)
        }
        // Renamed into place by the publish, or copied (then the temporary is left behind).
        defer { unlink(temporary) }
        rereading = true
        try repository.publishObject(object, from: temporary)
        rereading = false
        sequence += 1
        cursors = next
        behind = left
        lastShipped = trailer.last
        for name in readToEnd { readThrough[name] = began }
        return .shipped(
            FollowEvent(
                kind: .segment, user: user.rawValue,
                message: "segment \(sequence) of \(generation): \(trailer.commits) commits, \(trailer.frames) frames"))
    }

    struct WALBreakReason: Error { let text: String }

    /// The `-wal` of a followed store, through its kept descriptor when there is one
    /// (``FollowDescriptors/wal(of:user:)``); nil when there is none.
    func openWAL(_ store: StoreFile) throws -> WALReader? {
        if let descriptors { return try descriptors.wal(of: store, user: user) }
        return try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid)
    }

    /// The store's main file now, as a mark (``Segment/StoreMark``), taken only when any later
    /// change of the file is sure to show in its `st_ctim`: the coarse clock the kernel stamps
    /// files with is read first and must be past the file's last change (on a file system that
    /// keeps whole seconds only, by two seconds). Tried three times a clock tick apart; nil when
    /// the file keeps changing (or is no longer the store followed).
    static func mark(_ store: StoreFile) -> Segment.StoreMark? {
        var tick = timespec()
        clock_getres(CLOCK_REALTIME_COARSE, &tick)
        for attempt in 0..<3 {
            if attempt > 0 { usleep(useconds_t(max(1_000, tick.tv_nsec / 1_000 + 1_000))) }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME_COARSE, &now)
            let coarse = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
            guard let entry = store.folder.entry(store.fileName), entry.kind == .file,
                entry.device == store.device, entry.inode == store.inode
            else { return nil }
            let wholeSeconds = entry.changed % 1_000_000_000 == 0
            if wholeSeconds ? entry.changed + 2_000_000_000 <= coarse : entry.changed < coarse {
                return Segment.StoreMark(changed: entry.changed, size: entry.size)
            }
        }
        return nil
    }

    /// Whether the store's main file is still as `mark` saw it (same inode, change time, size).
    static func unchanged(_ store: StoreFile, since mark: Segment.StoreMark) -> Bool {
        guard let entry = store.folder.entry(store.fileName) else { return false }
        return entry.kind == .file && entry.device == store.device && entry.inode == store.inode
            && entry.changed == mark.changed && entry.size == mark.size
    }

    /// Begins a read transaction on `db` that holds a read mark in the store's `-shm` until it
    /// ends: no checkpoint restarts or truncates the `-wal` meanwhile while it holds frames not
    /// yet checkpointed (a `-wal` checkpointed whole may be restarted under the read: the
    /// reader's checks then find it). It reads the header (which
    /// takes the mark) without parsing the schema (``Database/beginReadWithoutSchema()``): a store
    /// of many tables and indexes (a Core Data model) costs what one of a single table does.
    static func takeReadMark(_ db: Database) throws {
        _ = try db.beginReadWithoutSchema()
    }

    /// Ends the read transaction of ``takeReadMark(_:)`` (the schema still unread).
    static func releaseReadMark(_ db: Database) {
        try? db.endReadWithoutSchema()
    }

    /// Runs `body` inside a read transaction on `store` (its read mark keeps the owner's
    /// checkpoints from restarting the `-wal` under the copy), released at once after.
    /// `unless` true runs `body` without it.
    func holding<T>(_ store: StoreFile, unless unheld: Bool = false, _ body: () throws -> T) throws -> T {
        if unheld {
            ReadTrace.follow("unheld \(user.rawValue)/\(store.name)")
            return try body()
        }
        let db: Database
        do {
            // The owner's locks and -shm can keep SQLite waiting: the mark is taken within
            // markSleep of the turn's sleeping, or not at all.
            db = try SleepAllowance.within(Self.markSleep) { () throws -> Database in
                let db = try Database(store.sqliteName(), mode: .readOnly, busyTimeout: .milliseconds(500))
                try Self.takeReadMark(db)
                return db
            }
        } catch {
            // Without the mark the reader's checks still hold; it only proves less often.
            return try body()
        }
        defer { Self.releaseReadMark(db) }
        return try body()
    }
}

/// At most `burst` new generations of one user at once, and one more every `every` (a token
/// bucket): the bound on a generation storm (docs/follow.md, "Generation storms").
public struct GenerationBudget: Sendable {
    public let burst: Int
    public let every: Duration
    /// Generations that may start now, as of ``counted``.
    var tokens: Double
    var counted: ContinuousClock.Instant?

    public init(burst: Int, every: Duration) {
        self.burst = burst
        self.every = every
        tokens = Double(burst)
    }

    /// Takes one generation at `now`: nil when it may start, else the moment the next may.
    public mutating func take(now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        if let counted { tokens = min(Double(burst), tokens + (now - counted) / every) }
        counted = now
        guard tokens >= 1 else { return now + every * (1 - tokens) }
        tokens -= 1
        return nil
    }
}

/// The generations and segments of a user in a repository, local or remote (the names alone,
/// from ``FollowedGenerations``: one listing).
public enum FollowCatalogue {
    public struct SegmentFile: Sendable, Equatable {
        /// Its name in the repository (`USER/follow/HOST/BASE/NAME`).
        public let object: String
        /// Its file, in a local repository; what is shown, in a remote one (read it through
        /// ``FollowedGenerations/withLocalCopy(of:size:in:_:)``).
        public let path: String
        public let name: String
        public let sequence: Int
        public let first: Int64
        public let last: Int64
        /// Its size as listed.
        public var size: Int64 = 0
    }

    public struct Generation: Sendable, Equatable {
        /// The base archive's file name.
        public let name: String
        public let host: String
        public let segments: [SegmentFile]
        /// The window: from the first segment's last observation to the last segment's, when the
        /// segments run from 1 without a hole.
        public var window: (from: Int64, to: Int64)? {
            guard let first = segments.first, first.sequence == 1,
                segments.enumerated().allSatisfy({ $0.offset + 1 == $0.element.sequence })
            else { return nil }
            return (first.last, segments.last!.last)
        }
        /// The moments a restore may claim: the window less its gaps. A segment whose first
        /// observation is not after the previous segment's last holds commits observed late: the
        /// first of a follower started again (resumed; its commits were made while none ran) or
        /// of one that lagged more than `follow_interval`. The moments after its first, up to its
        /// own last, are a gap.
        public var windows: [(from: Int64, to: Int64)] {
            guard let window else { return [] }
            var pieces: [(from: Int64, to: Int64)] = [(window.from, window.from)]
            for (previous, segment) in zip(segments, segments.dropFirst()) {
                if segment.first <= previous.last {
                    // Unobserved after `first` (a resume: the previous segment's last; a lag: as
                    // early as it may reach): those moments are cut from what came before.
                    while let piece = pieces.last, piece.from > segment.first { pieces.removeLast() }
                    if let piece = pieces.last, piece.to > segment.first { pieces[pieces.count - 1].to = segment.first }
                    pieces.append((segment.last, segment.last))
                } else {
                    pieces[pieces.count - 1].to = segment.last
                }
            }
            return pieces
        }
        public static func == (a: Generation, b: Generation) -> Bool {
            a.name == b.name && a.host == b.host && a.segments == b.segments
        }
    }

    /// The generations of `user` by `host` (every host's when nil) in `repository`, oldest first.
    public static func generations(in repository: any Repository, user: UserID, host: String?) throws(RepositoryError)
        -> [Generation]
    {
        try FollowedGenerations.list(in: repository, user: user, host: host).map { generation in
            Generation(
                name: generation.base, host: generation.host,
                segments: generation.claimed.map { segment in
                    let object = generation.object + "/" + segment.name
                    return SegmentFile(
                        object: object,
                        path: repository.localPath.map { $0 + "/" + object } ?? repository.display(object),
                        name: segment.name, sequence: segment.sequence, first: segment.first, last: segment.last,
                        size: segment.size)
                })
        }
    }

    /// The generations of `user` in the local repository at `repository`.
    public static func generations(in repository: String, user: UserID, host: String?) -> [Generation] {
        (try? generations(in: LocalRepository(path: repository), user: user, host: host)) ?? []
    }

    /// The generation whose window holds `at` (the newest such), with the segments to replay.
    public static func covering(_ at: Int64, in generations: [Generation]) -> Generation? {
        generations.last { generation in
            generation.windows.contains { $0.from <= at && at <= $0.to }
        }
    }
}

/// How long `follow` waits after a user's first change not yet shipped before it reads the user
/// (docs/follow.md, "Many users"): as long as the interval allows, so that a busy user's commits
/// are grouped into as few segments as possible, less what a read has lately taken to be durable
/// after it was due. Each event-made round reports its overshoot: from the moment before its
/// first change (the events taken in before it) plus the wait, to its segment durable. The wait
/// is the interval less ``safety`` and the largest of: the overshoots of the last two windows
/// (each ``window`` long; a window with no round keeps what was known), and ``floor`` (three
/// tenths of the interval). It is never less than half the interval (the wait before pacing), which is also
/// where it starts, before anything was measured. A commit is then observed, and durable, within
/// the interval (the lag rule: ``UserFollower/tolerance``) as long as no round overshoots by more
/// than the recent ones did; a loaded machine falls back to half the interval.
public struct FollowPacing: Sendable, Equatable {
    /// `follow_interval` (microseconds).
    public let interval: Int64
    /// Kept below the interval besides the overshoot: the events' and the clock's granularity.
    public var safety: Int64 = 50_000
    /// How long one window of overshoots lasts (microseconds).
    public var window: Int64 = 2_000_000
    var windowStart: Int64?
    var current: Int64
    var previous: Int64

    public init(interval: Int64) {
        self.interval = interval
        // Nothing measured yet: as if rounds overshot by half the interval.
        current = interval / 2
        previous = interval / 2
    }

    /// The least margin kept for the overshoot, whatever was measured.
    /// Three tenths of the interval: with a fifth (a 750 ms wait at 1 s), the RPO's p99 on a
    /// lightly loaded machine went from 0.51–0.74 s to 0.75–1.66 s (docs/follow.md, "Measured").
    public var floor: Int64 { interval * 3 / 10 }

    /// The wait after a user's first change (microseconds).
    public var delay: Int64 {
        let wanted = interval - max(current, previous, floor) - safety
        return min(max(wanted, interval / 2), interval - safety)
    }

    /// A round that was due at `due` (the moment before its first change plus the wait,
    /// microseconds) ended, its segment durable, at `ended`.
    public mutating func record(due: Int64, ended: Int64) {
        if let start = windowStart, ended - start < window {
            current = max(current, ended - due)
            return
        }
        // A new window: the one just over becomes the previous one (when it measured anything).
        if windowStart != nil { previous = current }
        windowStart = ended
        current = ended - due
    }
}

/// `granary follow`: every (or the named) user's WAL stores, driven by the kernel's events
/// (``FollowWatcher``) until a signal (docs/follow.md, "Many users").
///
/// A user is read when a store of theirs changes, ``FollowPacing/delay`` after the first change
/// not yet shipped (so that a busy user's commits are grouped, and each is shipped within the
/// interval); only the stores that changed are opened. Users are served oldest change first,
/// each round reading at most ``UserFollower/roundBytes`` of a user: a user who writes without
/// pause takes turns with the others. Every user is also read whole every ``sweep`` (the safety
/// net for an event the kernel dropped), and users whose folders cannot be watched every
/// interval.
public final class FollowRun {
    let root: Root
    let repository: any Repository
    let backup: BackupOperation
    let cap: Int64
    let named: [UserID]
    var followers: [UserID: UserFollower] = [:]
    /// Users whose last round failed, and why (said once until it changes).
    var failing: [UserID: String] = [:]
    /// Each user's following as of the last round (written to the repository after each round).
    public private(set) var status: FollowStatus
    /// Why the state could not be written (said once until it changes).
    var statusFailure: String?
    /// One zstd context for every user's segments (users are read one at a time).
    let compressor = SegmentCompressor()
    /// Busy stores' descriptors, kept between rounds for every user (``FollowDescriptors``).
    let descriptors = FollowDescriptors()
    /// How often every user is read whole (and the root listed) without an event: 5 minutes.
    public var sweep: Duration = .seconds(300)
    /// Publishes segments in the background to a remote repository (nil for a local one, where a
    /// publish is a rename): ``SegmentShipper``.
    let shipper: SegmentShipper?

    /// A user's work waiting: since when, which stores, or all of them after a scan.
    struct Pending {
        var since: ContinuousClock.Instant
        var stores: Set<String> = []
        var whole = false
        /// When the kernel's events were taken in before those that made this work (microseconds):
        /// the changes reported were made after it. Nil for work no event made (a sweep).
        var changedAfter: Int64?
    }
    var pending: [UserID: Pending] = [:]
    /// When each user is next read whole without an event.
    var nextWhole: [UserID: ContinuousClock.Instant] = [:]
    var watcher: FollowWatcher?
    /// Users said to be polled (said once).
    var saidPolled: Set<UserID> = []
    /// The most folders of one user watched (`follow_watches`): a user with more is read whole
    /// every ``overCapEvery`` instead, holding no watch (``FollowWatcher``).
    public var watchesPerUser = FollowWatcher.defaultPerUser
    /// How often a user with more folders than ``watchesPerUser`` is read whole: ten intervals.
    /// Such a user's scan is as long as its folders are many; read every interval, it would take
    /// that time from everyone else's turns.
    var overCapEvery: Duration { interval * 10 }
    let clock = ContinuousClock()
    /// `follow_interval`.
    var interval: Duration = .seconds(1)
    /// How long a user is read after its first change (``FollowPacing``).
    public internal(set) var pacing = FollowPacing(interval: 1_000_000)
    /// Called with ``status`` each time it is written (`follow --textfile`).
    public var statusWritten: ((FollowStatus) throws -> Void)?
    /// When the state was last written, and when the watcher's events were last all taken in.
    var statusWrittenAt: ContinuousClock.Instant?
    var drainedAt = ArchiveName.micros(Date())

    /// `uploads`: the rclone runs publishing segments at once, with a remote repository
    /// (`follow_uploads`).
    public init(
        root: Root, repository: any Repository, backup: BackupOperation, cap: Int64, users: [UserID], uploads: Int = 4
    ) {
        self.root = root
        shipper = repository.localPath == nil ? SegmentShipper(repository: repository, runs: uploads) : nil
        self.repository = repository
        self.backup = backup
        self.cap = cap
        self.named = users
        // What an earlier follower wrote stays for the users this one does not follow (their lag
        // goes on growing from where it was).
        let host = repository.context.host
        status = FollowStatus.read(from: repository, host: host) ?? FollowStatus(host: host)
        // No stretch of an earlier follower goes on in this one: nobody followed in between.
        for user in status.users.keys { status.users[user]?.steadySince = nil }
        #if TEST_HOOKS
            if let ms = CrashPoint.plan.followStopMilliseconds { stopBudget = .milliseconds(ms) }
        #endif
    }

    /// Now on the monotonic clock (microseconds), as a test's trace reads it.
    static func monotonicMicros() -> Int64 {
        var monotonic = timespec()
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        return Int64(monotonic.tv_sec) * 1_000_000 + Int64(monotonic.tv_nsec) / 1_000
    }

    static func micros(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000 + duration.components.attoseconds / 1_000_000_000_000
    }

    /// How many users are followed, and how many folders watched.
    public var counts: (users: Int, watches: Int) { (followers.count, watcher?.count ?? 0) }

    /// One round over every user, each read whole (new users are picked up; a user's failure is
    /// that user's): `--once`.
    public func round(log: (FollowEvent) -> Void) throws {
        try repository.prepare()
        let users = named.isEmpty ? try root.scan().users : named
        // One run: a segment whose upload keeps failing is given up after a few tries (said),
        // not tried for as long as a follower that runs on would.
        shipper?.attempts = 2
        for user in users {
            try Interruption.check()
            process(user, Pending(since: clock.now, whole: true), log: log)
        }
        shipper?.waitIdle(until: nil)
        collectShipped(log: log)
        try writeStatus(log: log)
    }

    /// Takes in what the shipper published (or gave up) since the last call: each user's claim
    /// and status move on, and a user whose reads fell back (or whose new generation waited) is
    /// due again.
    func collectShipped(log: (FollowEvent) -> Void) {
        guard let shipper else { return }
        let (outcomes, notices) = shipper.take()
        for notice in notices { log(notice) }
        for done in outcomes {
            let user = done.user
            guard let follower = followers[user] else { continue }
            let settled = follower.shipped(done)
            for event in settled.events { log(event) }
            if let began = settled.began {
                status.record(
                    user: user.rawValue, generation: follower.generation, sequence: follower.publishedSequence,
                    lastShipped: follower.publishedLastShipped, began: began, caughtUp: settled.caughtUp,
                    paused: failing[user].map { "following paused: \($0)" })
            }
            if follower.needsRead {
                follower.needsRead = false
                add(user, stores: [], whole: true, since: clock.now - interval / 2)
            } else if !follower.behind.isEmpty && !follower.uploading {
                add(user, stores: follower.behind, whole: false, since: clock.now - interval / 2)
            }
        }
    }

    /// Follows until a signal, then ships what is held and returns.
    public func run(interval: Duration, log: (FollowEvent) -> Void) throws {
        try repository.prepare()
        self.interval = interval
        watcher = FollowWatcher(perUser: watchesPerUser)
        let rootWatched = (try? root.open()).map { watcher?.watchRoot($0) ?? false } ?? false
        if watcher == nil {
            log(FollowEvent(kind: .polled, user: "", message: "no inotify instance: every user is read every interval"))
        }
        pacing = FollowPacing(interval: Self.micros(interval))
        groupedPublish = repository.localPath != nil
        for follower in followers.values { follower.grouped = groupedPublish }
        try discover(log: log)
        var nextRootScan = clock.now + (rootWatched ? sweep : interval)
        while true {
            let passStarted = clock.now
            collectShipped(log: log)
            descriptors.expire()
            // Due users, oldest change first (a user whose segment is being published waits for it).
            let now = clock.now
            let delay = Duration.microseconds(pacing.delay)
            // (A loop, not a filtered copy of `pending`: passes come tens of times a second.)
            var due: [(user: UserID, since: ContinuousClock.Instant)] = []
            for (user, work) in pending where work.since + delay <= now && followers[user]?.waits != true {
                due.append((user, work.since))
            }
            due.sort { $0.since < $1.since }
            for user in due.map(\.user) {
                if Interruption.isRequested { break }
                // Its work as it stands now (changes seen since the list was made included).
                guard let work = pending.removeValue(forKey: user) else { continue }
                // A group that fell due during the rounds before (rounds that left no segment
                // included) is not held back by this one.
                if groupDue { publishGrouped(delay: delay, log: log) }
                process(user, work, log: log)
                if followers[user]?.unpublished == nil {
                    settle(user, work, delay: delay)
                } else if groupDue {
                    publishGrouped(delay: delay, log: log)
                }
                // Events keep coming while users are read: taken in now and then, so that the
                // kernel's queue does not overflow behind a long turn.
                if let watcher {
                    var changes = FollowChanges()
                    let before = ArchiveName.micros(Date())
                    watcher.drain(into: &changes)
                    let previous = drainedAt
                    drainedAt = before
                    apply(changes, changedAfter: previous, log: log)
                }
            }
            // The group is published when its first segment has waited groupWait (or it is
            // full), not at the end of each pass: passes come up to 40 times a second, and each
            // group costs the file system two journal commits, which the owners' own syncs wait
            // behind (docs/follow.md, "Grouped durability").
            // (The flag read once: a stop always publishes the group before its last reads.)
            let stopping = Interruption.isRequested
            if groupDue || stopping { publishGrouped(delay: delay, log: log) }
            if stopping {
                if let written = flush(log: log) {
                    try statusWritten?(written)
                } else {
                    try writeStatus(log: log)
                }
                return
            }
            let after = clock.now
            if after >= nextRootScan {
                try? discover(log: log)
                nextRootScan = after + (rootWatched ? sweep : interval)
            }
            for (user, when) in nextWhole where when <= after {
                add(user, stores: [], whole: true, since: after - .microseconds(pacing.delay))
                let polled = watcher?.polled[user] != nil || watcher == nil
                let overCap = watcher?.overCap.contains(user) == true
                nextWhole[user] = after + (overCap ? overCapEvery : polled ? interval : sweep)
            }
            // Wait for events until the next user is due (100 ms at most, so that a signal that
            // came just before the wait is seen soon).
            var earliest: ContinuousClock.Instant?
            for (user, work) in pending where followers[user]?.waits != true {
                earliest = min(earliest ?? work.since, work.since)
            }
            var next = earliest.map { $0 + .microseconds(pacing.delay) } ?? (after + .seconds(1))
            if let first = unpublished.first?.written { next = min(next, first + groupWait) }
            var wait = min(max(next - clock.now, .zero), .milliseconds(100))
            if let watcher {
                // Owners' commits make events all the time (several a commit): a pass for each
                // batch cost more CPU than the reads themselves. With nobody due, the events wait
                // in the kernel's queue until ``minimumPass`` after this pass began; they are
                // taken in as changed after the last drain, and as first seen when the pause
                // began (never later than they came), so no user is due later for it.
                var pausedFrom: ContinuousClock.Instant?
                let spacing = passStarted + Self.minimumPass - clock.now
                if wait > .zero, spacing > .zero {
                    let pause = min(spacing, wait)
                    pausedFrom = clock.now
                    Thread.sleep(forTimeInterval: pause.timeInterval)
                    // (A signal does not end the sleep: one that came during it ends the wait.)
                    wait = Interruption.isRequested ? .zero : wait - pause
                }
                watcher.wait(wait)
                var changes = FollowChanges()
                let before = ArchiveName.micros(Date())
                watcher.drain(into: &changes)
                let previous = drainedAt
                drainedAt = before
                apply(changes, changedAfter: previous, seen: pausedFrom, log: log)
            } else if wait > .zero {
                Thread.sleep(forTimeInterval: wait.timeInterval)
            }
            // The state for check (and the --textfile) once an interval.
            if statusWrittenAt.map({ clock.now >= $0 + interval }) ?? true { try writeStatus(log: log) }
        }
    }

    /// The least time from one pass of ``run(interval:log:)`` to the next when nobody is due
    /// (events then wait in the kernel's queue): at most 40 passes a second however often the
    /// owners commit.
    static let minimumPass: Duration = .milliseconds(25)

    /// How long a stop goes on reading users with work waiting before it exits: what is left
    /// stays in their `-wal` files for the next run (docs/follow.md, "Stopping").
    public var stopBudget: Duration = .milliseconds(500)
    /// With a remote repository, how long from the start of a stop the uploads may go on (those
    /// under way and those of the segments the stop read): what is not published by then is
    /// left, said per user, and shipped by the next run from the `-wal`. The runs still going
    /// then are killed (``stopGrace`` at most to see them end), and the last state for check is
    /// written beside the uploads, within ``stopUploads`` plus ``stopGrace`` too: the whole stop
    /// of a remote follower fits in that bound, after its last reads.
    public var stopUploads: Duration = .milliseconds(600)
    public var stopGrace: Duration = .milliseconds(100)

    /// After a signal: one last read of the users with work waiting, oldest change first, for at
    /// most ``stopBudget`` (no new generation, no backup: those wait for the next run), with
    /// further signals held back. Users not reached are named in one line; their commits stay
    /// in their `-wal` files and the next run resumes from their last segment. With a remote
    /// repository, the segments read are staged like any other, and the uploads go on until
    /// ``stopUploads`` from the start of the stop; then the rest is left, said per user. The
    /// last state for check is then written beside the uploads (not after them), within the same
    /// bound: returned when so (nil: the caller writes it).
    func flush(log: (FollowEvent) -> Void) -> FollowStatus? {
        let start = clock.now
        let deadline = start + stopBudget
        collectShipped(log: log)
        var changes = FollowChanges()
        watcher?.drain(into: &changes)
        apply(changes, changedAfter: drainedAt, log: log)
        var shipped = 0
        var left = 0
        // The users whose changes this stop did not ship: they stay pending, so that the state
        // written last never says them shipped through a moment after a commit left in the -wal.
        var unshipped: Set<UserID> = []
        Interruption.heldBack {
            for (user, work) in pending.sorted(by: { $0.value.since < $1.value.since }) {
                guard let follower = followers[user], follower.generation != nil else { continue }
                // The oldest is always read, however slow the machine.
                if shipped > 0 && clock.now >= deadline {
                    left += 1
                    unshipped.insert(user)
                    continue
                }
                shipped += 1
                do {
                    for event in try follower.ship(
                        only: work.whole ? nil : work.stores, changedAfter: work.changedAfter)
                    {
                        if event.kind == .paused { unshipped.insert(user) }
                        log(event)
                    }
                } catch {
                    unshipped.insert(user)
                    log(FollowEvent(kind: .paused, user: user.rawValue, message: "not shipped at stop: \(error)"))
                }
            }
        }
        if left > 0 {
            log(
                FollowEvent(
                    kind: .paused, user: "",
                    message:
                        "stopping: \(left) users with changes not read in the \(stopBudget) a stop takes; the next run ships them"
                ))
        }
        var written: FollowStatus?
        if let shipper {
            // The state for check is written as the last uploads go on, within the stop's bound:
            // it claims what was published when they began (a segment published later is in the
            // repository all the same, where list and restore see it; check's lag for its user
            // stays the earlier one until the next run writes the state again).
            collectShipped(log: log)
            let state = statusWrite(until: start + stopUploads + stopGrace)
            written = state.status
            // Uploads under way (each user's in order) go on until the stop's bound; what is not
            // published then is never claimed: its commits are still in the -wal.
            shipper.waitIdle(until: start + stopUploads)
            collectShipped(log: log)
            shipper.stop(grace: stopGrace)
            // An upload that ended between the two (published as its run was stopped) is taken in
            // too: what the repository holds is claimed, and not said to be left.
            collectShipped(log: log)
            for (user, follower) in followers.sorted(by: { $0.key.rawValue < $1.key.rawValue }) where follower.uploading
            {
                let sequences = follower.stagedSequences
                let which =
                    sequences.count == 1 ? "segment \(sequences[0])" : "segments \(sequences[0])–\(sequences.last!)"
                log(
                    FollowEvent(
                        kind: .paused, user: user.rawValue,
                        message:
                            "stopping: \(which) (\(follower.stagedCommits) commits) not uploaded within the \(stopUploads) a stop gives uploads; the next run ships them from the -wal"
                    ))
            }
            if let failure = state.finish() {
                log(
                    FollowEvent(
                        kind: .paused, user: "follow",
                        message: "stopping: its state for check not written (\(failure)); check reads the one before"))
            }
        }
        pending = pending.filter { unshipped.contains($0.key) }
        return written
    }

    /// The state for check as it stands, written in the background to the repository by
    /// `deadline` (the run stopped then); `finish()` waits for the write and says why it failed.
    func statusWrite(until deadline: ContinuousClock.Instant) -> (status: FollowStatus, finish: () -> String?) {
        let snapshot = prepareStatus()
        let done = DispatchSemaphore(value: 0)
        // Set before the signal, read after the wait.
        final class Failure: @unchecked Sendable { var text: String? }
        let failure = Failure()
        let repository = self.repository
        let seconds = max(0.05, (deadline - clock.now).timeInterval)
        Thread.detachNewThread {
            do {
                try snapshot.write(to: repository, within: seconds)
            } catch {
                failure.text = (error as? GranaryError)?.description ?? "\(error)"
            }
            done.signal()
        }
        return (
            snapshot,
            {
                // The rclone run is stopped at the deadline: the wait ends soon after.
                done.wait()
                return failure.text
            }
        )
    }

    /// Lists the root (or takes the named users): new users are followed (their folders watched,
    /// read whole at once), users gone are forgotten.
    func discover(log: (FollowEvent) -> Void) throws {
        let users = named.isEmpty ? try root.scan().users : named
        let now = clock.now
        for (index, user) in users.enumerated() where followers[user] == nil {
            _ = follower(of: user, log: log)
            // The sweep of each user at its own moment, spread over the sweep's length.
            nextWhole[user] =
                watcher == nil ? now + interval : now + sweep + sweep * (Double(index) / Double(max(users.count, 1)))
            // Due at once (a first generation, or a user who just appeared).
            add(user, stores: [], whole: true, since: now - interval)
        }
        if named.isEmpty {
            for gone in Set(followers.keys).subtracting(users) {
                // A segment of its written and not yet durable is dropped with it.
                _ = followers[gone]?.settlePublished(CancellationError())
                unpublished.removeAll { $0.user == gone }
                followers[gone] = nil
                shipper?.forget(gone)
                descriptors.forget(gone)
                pending[gone] = nil
                nextWhole[gone] = nil
                overCapWalked[gone] = nil
                failing[gone] = nil
                watcher?.forget(gone)
                log(FollowEvent(kind: .paused, user: gone.rawValue, message: "user gone: following stops"))
            }
        }
    }

    func add(
        _ user: UserID, stores: Set<String>, whole: Bool, since: ContinuousClock.Instant, changedAfter: Int64? = nil
    ) {
        // Changed in place (a copy taken out and put back would copy its set of stores: events
        // come several times a commit).
        func merge(_ work: inout Pending) {
            work.since = min(work.since, since)
            if let changedAfter { work.changedAfter = min(work.changedAfter ?? changedAfter, changedAfter) }
            work.stores.formUnion(stores)
            work.whole = work.whole || whole
        }
        merge(&pending[user, default: Pending(since: since, changedAfter: changedAfter)])
    }

    /// `seen`: when the changes were first seen, if earlier than now (a pause began then).
    func apply(
        _ changes: FollowChanges, changedAfter: Int64, seen: ContinuousClock.Instant? = nil,
        log: (FollowEvent) -> Void
    ) {
        guard !changes.isEmpty else { return }
        let now = min(seen ?? clock.now, clock.now)
        if changes.overflow {
            log(FollowEvent(kind: .polled, user: "", message: "inotify queue overflowed: every user is read whole"))
            for user in followers.keys { add(user, stores: [], whole: true, since: now, changedAfter: changedAfter) }
        }
        if changes.root || changes.overflow { try? discover(log: log) }
        for user in changes.users where followers[user] != nil {
            add(user, stores: [], whole: true, since: now, changedAfter: changedAfter)
        }
        for (user, stores) in changes.stores {
            guard let follower = followers[user] else { continue }
            // (Sets made only when a store is passed over: this runs for every user at every
            // drain.)
            let wanted = follower.named.isEmpty ? stores : stores.subtracting(follower.named)
            guard !wanted.isEmpty else { continue }
            // A change to a file that is not a followed store: it may be one now.
            add(
                user, stores: wanted, whole: !wanted.allSatisfy(follower.follows), since: now,
                changedAfter: changedAfter)
        }
    }

    /// The user's follower: the one known, or a new one resumed from its last segment.
    func follower(of user: UserID, log: (FollowEvent) -> Void) -> UserFollower {
        if let known = followers[user] { return known }
        let follower = UserFollower(user: user, root: root, repository: repository, backup: backup, cap: cap)
        follower.tolerance = max(
            1_000_000, interval.components.seconds * 1_000_000 + interval.components.attoseconds / 1_000_000_000_000)
        follower.compressor = compressor
        follower.descriptors = descriptors
        follower.shipper = shipper
        follower.grouped = groupedPublish
        if follower.resume(), let generation = follower.generation {
            log(
                FollowEvent(
                    kind: .generation, user: user.rawValue,
                    message: "resuming \(generation) after segment \(follower.sequence)"))
        }
        followers[user] = follower
        return follower
    }

    /// After a user's turn (its segment durable, when it made one): what it left is read in its
    /// next turn, a failing user or one with no generation is read again after ten intervals, a
    /// held one when its next generation may start.
    func settle(_ user: UserID, _ work: Pending, delay: Duration) {
        guard let follower = followers[user] else { return }
        if !follower.behind.isEmpty {
            // Read on in its next turn, after everyone waiting now.
            add(user, stores: follower.behind, whole: false, since: clock.now - delay, changedAfter: work.changedAfter)
        }
        if failing[user] != nil || follower.generation == nil {
            nextWhole[user] = min(nextWhole[user] ?? .now, clock.now + interval * 10)
        }
        if let until = follower.heldUntil {
            // Read again when its next generation may start, event or not.
            nextWhole[user] = min(nextWhole[user] ?? until, until)
        }
    }

    /// The most segments made durable together (``publishGrouped(delay:log:)``).
    static let groupSegments = 64
    /// The most syncs of a group under way at once (threads, the caller's among them).
    static let syncWidth = 8
    /// The threads that issue a group's syncs, kept from group to group.
    let syncs = Parallel.Pool(width: FollowRun.syncWidth)
    /// How long the first segment of a group waits for others: a tenth of the interval, at most
    /// 100 ms (at 1 s, at most ten groups a second unless 64 segments wait at once).
    var groupWait: Duration { min(.milliseconds(100), interval / 10) }

    /// Whether the segments waiting (``unpublished``) are to be made durable now: as many as a
    /// group holds, or the first has waited ``groupWait``.
    var groupDue: Bool {
        guard let first = unpublished.first?.written else { return false }
        return unpublished.count >= Self.groupSegments || clock.now - first >= groupWait
    }

    /// The users whose round left a segment written and not yet durable (``UserFollower/unpublished``),
    /// in the order they were read, with what their turn's record needs.
    struct Deferred {
        let user: UserID
        let work: Pending
        let began: Int64
        let paced: Int64?
        let caughtUp: Bool
        let written: ContinuousClock.Instant
    }
    var unpublished: [Deferred] = []
    /// When each user over the watch cap was last walked for watches (``process(_:_:log:)``).
    var overCapWalked: [UserID: ContinuousClock.Instant] = [:]
    /// Whether rounds leave their segments for ``publishGrouped(delay:log:)`` (``run(interval:log:)``
    /// with a local repository; `--once` and a stop's last reads publish each at once).
    var groupedPublish = false

    /// Makes the segments of a group of rounds durable together (docs/follow.md, "Grouped
    /// durability"): every file synced (their writeback started as each was finished, so the
    /// first sync commits most of them), then each linked to its final name, then each folder
    /// synced once; only then does each user's follower move on and its segment count as
    /// shipped. A user whose file, link or folder fails keeps its state (its commits are read
    /// again) and is paused with the reason, as a failed round is; the others are not held back.
    func publishGrouped(delay: Duration, log: (FollowEvent) -> Void) {
        guard !unpublished.isEmpty else { return }
        let group = unpublished
        unpublished = []
        // (Built only in a debug build: the line is an autoclosure that a release build drops.)
        ReadTrace.follow(
            "publish \(group.count) waited \(Self.micros(clock.now - group[0].written)) at \(Self.monotonicMicros())")
        var failed: [UserID: Error] = [:]
        // The files' syncs issued together (as the folders' below): each waits for its data and
        // a cache flush, which the kernel then shares among them instead of one after another.
        let files = group.compactMap { entry in followers[entry.user]?.unpublished.map { (entry.user, $0.writer) } }
        let fds = files.map(\.1.fd)
        let codes = syncs.each(fds.count) { index -> Int32 in
            fsync(fds[index]) == 0 ? 0 : errno
        }
        for (index, (user, writer)) in files.enumerated() where codes[index] != 0 {
            failed[user] = Segment.Failure.io(
                path: writer.path, reason: "fsync: \(String(cString: strerror(codes[index])))")
        }
        CrashPoint.reach(.followSynced)
        for entry in group where failed[entry.user] == nil {
            guard let segment = followers[entry.user]?.unpublished else { continue }
            do {
                try FileSystem.renameNoReplace(segment.temporary, to: segment.final)
            } catch {
                failed[entry.user] = error
            }
        }
        CrashPoint.reach(.followLinked)
        var linked: [String] = []
        var seen: Set<String> = []
        for entry in group where failed[entry.user] == nil {
            guard let segment = followers[entry.user]?.unpublished else { continue }
            if seen.insert(segment.folder).inserted { linked.append(segment.folder) }
        }
        let paths = linked
        let folderErrors = syncs.each(paths.count) { index -> (any Error)? in
            do { try FileSystem.sync(paths[index]) } catch { return error }
            return nil
        }
        let folders = Dictionary(uniqueKeysWithValues: zip(paths, folderErrors))
        for entry in group where failed[entry.user] == nil {
            guard let segment = followers[entry.user]?.unpublished else { continue }
            if let error = folders[segment.folder] ?? nil {
                failed[entry.user] = error
                // Linked but not durable: not claimed, and its name given back (the next round
                // publishes the same commits under the same sequence number).
                unlink(segment.final)
            }
        }
        for entry in group {
            guard let follower = followers[entry.user] else { continue }
            let user = entry.user
            var paused: String?
            if let error = failed[user] {
                _ = follower.settlePublished(error)
                // As a round that threw (process): the next is whole, its commits unobserved.
                follower.roundFailed()
                let text = (error as? GranaryError)?.description ?? "\(error)"
                if failing[user] != text {
                    log(FollowEvent(kind: .paused, user: user.rawValue, message: "following paused: \(text)"))
                }
                failing[user] = text
                paused = "following paused: \(text)"
            } else {
                if let event = follower.settlePublished(nil) { log(event) }
                if let paced = entry.paced, entry.caughtUp {
                    pacing.record(due: paced, ended: ArchiveName.micros(Date()))
                }
                failing[user] = nil
            }
            status.record(
                user: user.rawValue, generation: follower.generation, sequence: follower.publishedSequence,
                lastShipped: follower.publishedLastShipped, began: entry.began,
                caughtUp: follower.behind.isEmpty && !follower.uploading, paused: paused)
            settle(user, entry.work, delay: delay)
        }
    }

    /// One user's work: before a whole round, the user's folders watched again; then a round
    /// (every store, or those that changed).
    func process(_ user: UserID, _ work: Pending, log: (FollowEvent) -> Void) {
        let follower = follower(of: user, log: log)
        // Watched before it is read: a change made after the scan is then an event.
        // A user over the watch cap is walked for watches again at most once a sweep: each walk
        // lists up to follow_watches of its folders, on top of the read's own scan.
        let walkedLately =
            watcher?.overCap.contains(user) == true && overCapWalked[user].map { clock.now < $0 + sweep } == true
        if work.whole, !walkedLately, let watcher, let folder = try? root.user(user) {
            overCapWalked[user] = nil
            if let why = watcher.watch(folder) {
                if watcher.overCap.contains(user) { overCapWalked[user] = clock.now }
                let overCap = watcher.overCap.contains(user)
                let every = overCap ? overCapEvery : interval
                if saidPolled.insert(user).inserted {
                    log(
                        FollowEvent(
                            kind: .polled, user: user.rawValue,
                            message:
                                "read whole every \(overCap ? "\(DurationText.format(every))" : "interval"), no folder watched: its folders cannot all be watched (\(why))"
                        ))
                }
                nextWhole[user] = min(nextWhole[user] ?? .now, clock.now + every)
            } else {
                saidPolled.remove(user)
            }
        }
        let began = ArchiveName.micros(Date())
        var paused: String?
        // Its overshoot paces everyone's reads when it is an ordinary turn: event-made, not
        // caught up from an earlier turn, no generation started.
        let paced = work.changedAfter.map { $0 + pacing.delay }
        let caughtUp = follower.behind.isEmpty
        // After a round that failed, only a whole one: what happened meanwhile (a store made,
        // another removed) was not seen, and a round of the stores that changed would go on
        // claiming moments as if it had been.
        let whole = work.whole || follower.unseen
        do {
            let events = try follower.round(only: whole ? nil : work.stores, changedAfter: work.changedAfter)
            if whole { follower.unseen = false }
            for event in events { log(event) }
            if follower.unpublished != nil {
                // Recorded once its segment is durable, with the others of its group
                // (publishGrouped).
                unpublished.append(
                    Deferred(
                        user: user, work: work, began: began, paced: paced, caughtUp: caughtUp, written: clock.now))
                return
            }
            if let paced, caughtUp, follower.generation != nil, !events.contains(where: { $0.kind == .generation }) {
                pacing.record(due: paced, ended: ArchiveName.micros(Date()))
            }
            if follower.generation == nil {
                paused = events.last(where: { $0.kind == .paused })?.message ?? follower.held ?? "no generation"
            }
            failing[user] = nil
        } catch is InterruptedError {
            return  // stopping: the generation under way is abandoned, as a backup's would be
        } catch {
            follower.roundFailed()
            let text = (error as? GranaryError)?.description ?? "\(error)"
            if failing[user] != text {
                log(FollowEvent(kind: .paused, user: user.rawValue, message: "following paused: \(text)"))
            }
            failing[user] = text
            paused = "following paused: \(text)"
        }
        if follower.uploading && paused == nil {
            // Recorded as its segments are published (collectShipped).
            return
        }
        status.record(
            user: user.rawValue, generation: follower.generation, sequence: follower.publishedSequence,
            lastShipped: follower.publishedLastShipped, began: began,
            caughtUp: follower.behind.isEmpty && !follower.uploading, paused: paused)
    }

    /// ``status`` brought up to now, to be written.
    func prepareStatus() -> FollowStatus {
        for (user, follower) in followers
        where pending[user] == nil && failing[user] == nil && follower.behind.isEmpty && follower.generation != nil
            && !follower.uploading && follower.unpublished == nil && watcher != nil && watcher?.polled[user] == nil
        {
            status.caughtUp(user: user.rawValue, through: drainedAt)
        }
        statusWrittenAt = clock.now
        status.updated = ArchiveName.micros(Date())
        return status
    }

    /// Writes ``status`` to the repository for `check` (FollowStatus), then hands it to
    /// ``statusWritten``; a failure to write it is logged once. A watched user with no change
    /// waiting is shipped through the moment the watcher's events were last taken in: the kernel
    /// reports every write to a watched folder, so nothing of theirs is unshipped.
    func writeStatus(log: (FollowEvent) -> Void) throws {
        _ = prepareStatus()
        do {
            try status.write(to: repository)
            statusFailure = nil
        } catch {
            let text = (error as? GranaryError)?.description ?? "\(error)"
            if statusFailure != text {
                log(FollowEvent(kind: .paused, user: "follow", message: "cannot write its state for check: \(text)"))
            }
            statusFailure = text
        }
        try statusWritten?(status)
    }
}
