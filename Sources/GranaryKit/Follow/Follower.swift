import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One event of `follow` worth a line in the journal.
public struct FollowEvent: Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable { case generation, segment, skipped, paused }
    public let kind: Kind
    public let user: String
    public let message: String
    public var description: String { "\(user): \(message)" }
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
    var named: Set<String> = []
    /// The last round stopped at `bytes_per_user` with commits left to read.
    public private(set) var behind = false
    /// The newest observation of the newest segment published (microseconds).
    public private(set) var lastShipped: Int64?

    public init(user: UserID, root: Root, repository: any Repository, backup: BackupOperation, cap: Int64) {
        self.user = user
        self.root = root
        self.repository = repository
        self.backup = backup
        self.cap = cap
        self.host = repository.context.host
    }

    /// The folder of this host's segments of the user, in the repository.
    var followFolder: String { user.rawValue + "/follow/" + host }

    /// Resumes from the newest published segment, when its cursors still hold (``round()`` checks
    /// them on its first read). Returns false when there is nothing to resume.
    public func resume() -> Bool {
        guard let local = repository.localPath else { return false }
        let generations = FollowCatalogue.generations(in: local, user: user, host: host)
        guard let newest = generations.last, let last = newest.segments.last,
            newest.segments.count == last.sequence,
            let (header, trailer) = try? SegmentReader.check(last.path), header.generation == newest.name
        else { return false }
        generation = newest.name
        sequence = last.sequence
        cursors = trailer.cursors
        lastShipped = trailer.last
        return true
    }

    /// One round: a new generation when there is none, or when continuity cannot be proven;
    /// otherwise the commits since the last round as the next segment. Returns what is worth
    /// logging.
    public func round() throws -> [FollowEvent] {
        var events: [FollowEvent] = []
        if generation == nil {
            return try startGeneration(reason: "following starts", events: &events)
        }
        switch try readRound() {
        case .shipped(let event):
            if let event { events.append(event) }
            return events
        case .broken(let reason):
            return try startGeneration(reason: reason, events: &events)
        }
    }

    enum RoundOutcome {
        case shipped(FollowEvent?)
        case broken(String)
    }

    func walStores(_ events: inout [FollowEvent]) throws -> [StoreFile] {
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
        var why = reason
        while true {
            attempts += 1
            let stores = try walStores(&events)
            var start: [String: Segment.StoreCursor] = [:]
            for store in stores {
                let wal = try holding(store) { () throws -> WALCursor? in
                    guard
                        let reader = try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid)
                    else { return nil }
                    let read = try reader.read(from: nil, limit: .max, maxDatabaseBytes: cap > 0 ? cap : .max) { _, _ in
                    }
                    return read.broken == nil ? read.cursor : nil
                }
                start[store.name] = Segment.StoreCursor(device: store.device, inode: store.inode, wal: wal)
            }
            let result = try backup.run(user)
            generation = result.entry.name.fileName
            sequence = 0
            cursors = start
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

    /// Reads every store from its cursor into one segment and publishes it (the first segment of
    /// a generation always, later ones when they hold commits).
    func readRound(first: Bool = false) throws -> RoundOutcome {
        var ignored: [FollowEvent] = []
        let stores = try walStores(&ignored)
        let names = Set(stores.map(\.name))
        if names != Set(cursors.keys) {
            let added = names.subtracting(cursors.keys).sorted()
            let gone = Set(cursors.keys).subtracting(names).sorted()
            return .broken(
                (added.isEmpty ? "" : "new store \(added.joined(separator: ", "))")
                    + (gone.isEmpty ? "" : (added.isEmpty ? "" : "; ") + "store gone: \(gone.joined(separator: ", "))"))
        }
        let work = try repository.prepareWorkFolder()
        let temporary = work + "/follow-\(user.rawValue)-\(getpid()).seg.tmp"
        unlink(temporary)
        guard let generation else { return .broken("no generation") }
        let writer = try SegmentWriter(
            path: temporary,
            header: Segment.Header(user: user.rawValue, host: host, generation: generation, sequence: sequence + 1))
        let began = ArchiveName.micros(Date())
        var next = cursors
        var budget = cap > 0 ? cap : Int64.max
        var capped = false
        for store in stores {
            guard let saved = cursors[store.name] else { continue }
            if store.device != saved.device || store.inode != saved.inode {
                return .broken("\(store.name): \(WALBreak.storeReplaced)")
            }
            let outcome = try holding(store) { () throws -> Result<WALRead?, WALBreakReason> in
                guard let reader = try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid)
                else {
                    return saved.wal == nil
                        ? .success(nil) : .failure(.init(text: "\(store.name): \(WALBreak.missing)"))
                }
                if saved.wal == nil && reader.length >= Int64(WALReader.headerSize) {
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
                    capped = capped || read.capped
                    budget -= read.bytes
                    next[store.name]?.wal = read.cursor
                }
            }
        }
        let ended = ArchiveName.micros(Date())
        behind = capped
        guard first || writer.trailer.commits > 0 else { return .shipped(nil) }
        try writer.finish(first: began, last: ended, cursors: next)
        let trailer = writer.trailer
        let name = Segment.fileName(sequence: sequence + 1, first: trailer.first, last: trailer.last)
        let object = followFolder + "/" + generation + "/" + name
        try repository.publishObject(object, from: temporary)
        unlink(temporary)
        sequence += 1
        cursors = next
        lastShipped = trailer.last
        return .shipped(
            FollowEvent(
                kind: .segment, user: user.rawValue,
                message: "segment \(sequence) of \(generation): \(trailer.commits) commits, \(trailer.frames) frames"))
    }

    struct WALBreakReason: Error { let text: String }

    /// Runs `body` inside a read transaction on `store` (its read mark keeps the owner's
    /// checkpoints from restarting the `-wal` under the copy), released at once after.
    func holding<T>(_ store: StoreFile, _ body: () throws -> T) throws -> T {
        let db: Database
        do {
            db = try Database(store.sqliteName(), mode: .readOnly, busyTimeout: .milliseconds(500))
            try db.execute("BEGIN")
            _ = try db.scalar("SELECT count(*) FROM sqlite_schema")
        } catch {
            // Without the mark the reader's checks still hold; it only proves less often.
            return try body()
        }
        defer { try? db.execute("COMMIT") }
        return try body()
    }
}

/// The generations and segments of a user in a local repository.
public enum FollowCatalogue {
    public struct SegmentFile: Sendable, Equatable {
        public let path: String
        public let name: String
        public let sequence: Int
        public let first: Int64
        public let last: Int64
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
        public static func == (a: Generation, b: Generation) -> Bool {
            a.name == b.name && a.host == b.host && a.segments == b.segments
        }
    }

    /// The generations of `user` by `host` (every host's when nil), oldest first.
    public static func generations(in repository: String, user: UserID, host: String?) -> [Generation] {
        let base = repository + "/" + user.rawValue + "/follow"
        var result: [Generation] = []
        for hostName in FileSystem.contents(of: base).sorted() where host == nil || hostName == host {
            for name in FileSystem.contents(of: base + "/" + hostName).sorted() {
                guard ArchiveName(fileName: name) != nil else { continue }
                let folder = base + "/" + hostName + "/" + name
                let segments = FileSystem.contents(of: folder).compactMap { file -> SegmentFile? in
                    guard let parsed = Segment.parse(fileName: file) else { return nil }
                    return SegmentFile(
                        path: folder + "/" + file, name: file, sequence: parsed.sequence, first: parsed.first,
                        last: parsed.last)
                }.sorted { $0.sequence < $1.sequence }
                result.append(Generation(name: name, host: hostName, segments: segments))
            }
        }
        return result.sorted {
            (ArchiveName(fileName: $0.name)?.micros ?? 0, $0.host) < (
                ArchiveName(fileName: $1.name)?.micros ?? 0, $1.host
            )
        }
    }

    /// The generation whose window holds `at` (the newest such), with the segments to replay.
    public static func covering(_ at: Int64, in repository: String, user: UserID, host: String?) -> Generation? {
        generations(in: repository, user: user, host: host).last { generation in
            guard let window = generation.window else { return false }
            return window.from <= at && at <= window.to
        }
    }
}

/// `granary follow`: every (or the named) user's WAL stores, round after round, until a signal.
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

    public init(root: Root, repository: any Repository, backup: BackupOperation, cap: Int64, users: [UserID]) {
        self.root = root
        self.repository = repository
        self.backup = backup
        self.cap = cap
        self.named = users
        // What an earlier follower wrote stays for the users this one does not follow (their lag
        // goes on growing from where it was).
        let host = repository.context.host
        status =
            repository.localPath.flatMap { FollowStatus.read(repository: $0, host: host) } ?? FollowStatus(host: host)
    }

    /// One round over every user (new users are picked up; a user's failure is that user's).
    public func round(log: (FollowEvent) -> Void) throws {
        try repository.prepare()
        let users = named.isEmpty ? try root.scan().users : named
        for user in users {
            try Interruption.check()
            let follower: UserFollower
            if let known = followers[user] {
                follower = known
            } else {
                follower = UserFollower(user: user, root: root, repository: repository, backup: backup, cap: cap)
                if follower.resume(), let generation = follower.generation {
                    log(
                        FollowEvent(
                            kind: .generation, user: user.rawValue,
                            message: "resuming \(generation) after segment \(follower.sequence)"))
                }
                followers[user] = follower
            }
            let began = ArchiveName.micros(Date())
            var paused: String?
            do {
                let events = try follower.round()
                for event in events { log(event) }
                if follower.generation == nil {
                    paused = events.last(where: { $0.kind == .paused })?.message ?? "no generation"
                }
                failing[user] = nil
            } catch let error as InterruptedError {
                throw error
            } catch {
                let text = (error as? GranaryError)?.description ?? "\(error)"
                if failing[user] != text {
                    log(FollowEvent(kind: .paused, user: user.rawValue, message: "following paused: \(text)"))
                }
                failing[user] = text
                paused = "following paused: \(text)"
            }
            status.record(
                user: user.rawValue, generation: follower.generation, sequence: follower.sequence,
                lastShipped: follower.lastShipped, began: began, caughtUp: !follower.behind, paused: paused)
        }
        writeStatus(log: log)
    }

    /// Writes ``status`` to the repository for `check` (FollowStatus); a failure is logged once.
    func writeStatus(log: (FollowEvent) -> Void) {
        guard let local = repository.localPath else { return }
        status.updated = ArchiveName.micros(Date())
        do {
            try status.write(repository: local)
            statusFailure = nil
        } catch {
            let text = (error as? GranaryError)?.description ?? "\(error)"
            if statusFailure != text {
                log(FollowEvent(kind: .paused, user: "follow", message: "cannot write its state for check: \(text)"))
            }
            statusFailure = text
        }
    }
}

/// `restore --at`: the followed window that holds the time, its base and the replay.
public enum FollowRestore {
    /// When a generation of `request.user` (this host's) covers `request.at`, points the request
    /// at its base and replays its commits up to `at` once staged; otherwise leaves the request
    /// as it is and says so when the user is followed at all.
    public static func prepare(_ request: inout RestoreRequest, repository: any Repository, cap: Int64) {
        guard let at = request.at, request.archive == nil, !request.undo else { return }
        guard let local = repository.localPath else {
            // Segments are read from a local repository or mirror only (docs/follow.md): said, so
            // that a restore to the archive before the time is never taken for the time itself.
            request.notes.append(
                "\(repository.location) is not a local repository and follow's segments are read only from one: restoring the newest archive at or before \(ArchiveName.stamp(micros: ArchiveName.micros(at), precise: true)) without the commits after it (to replay them, copy the repository to a local folder and restore from there: docs/follow.md)"
            )
            return
        }
        let micros = ArchiveName.micros(at)
        // A time to the second covers that second, as for archives.
        let end = micros % 1_000_000 == 0 ? micros + 999_999 : micros
        let host = repository.context.host
        let user = request.user
        guard let generation = FollowCatalogue.covering(end, in: local, user: user, host: host) else {
            if !FollowCatalogue.generations(in: local, user: user, host: host).isEmpty {
                request.notes.append(
                    "\(ArchiveName.stamp(micros: end, precise: true)) is outside every followed window of \(user.rawValue): restoring the newest archive at or before it"
                )
            }
            return
        }
        request.archive = generation.name
        request.at = nil
        let limits = request.context.limits
        request.notes.append(
            "within the followed window of \(generation.name): its commits replayed up to \(ArchiveName.stamp(micros: end, precise: true))"
        )
        request.afterStaging = { staged in
            _ = try FollowReplay.replay(generation, user: user, at: end, staged: staged, cap: cap, limits: limits)
        }
    }
}
