import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Publishes the segments `follow` writes for a remote repository in the background, so that the
/// follower goes on reading other users while they upload (docs/follow.md, "A remote
/// repository").
///
/// A follower may hand over several segments of a user (it reads the user's next segment while
/// the last one uploads). Up to ``perUser`` of a user's oldest segments not yet settled upload
/// at once, beside each other (in the same rclone run or in concurrent ones): a commit no longer
/// waits for the upload of its user's previous segment before its own starts. What the follower
/// is told stays in order, a prefix: a segment is reported published only once it and every
/// earlier one of its user are in the repository, each under its final name; one that landed
/// while an earlier one is still missing is held back (it is in the repository, unclaimed:
/// `list` and `restore --at` stop at the first hole, FollowCatalogue) until the earlier one
/// lands. The segments due are uploaded together, by at most ``runs`` rclone runs at once, each
/// run one process for many segments (``RcloneRepository/uploadBatch(_:transfers:deadline:started:uploaded:)``)
/// with a deadline of its own: a stalled transfer holds back the users of its run alone, and each
/// segment counts as landed as soon as rclone reports it copied. A segment whose upload failed is
/// tried again, under the same name and with the same bytes, after a pause (1 s, 2 s, … 8 s) for
/// as long as the follower runs: its user's lag grows meanwhile and `check` says so. A failure
/// that trying again cannot mend (the name taken by other bytes) gives the segment up, and with
/// it every later segment of its user handed over (each built on it); segments of that user
/// handed over before the follower took in the outcome (``take()``) are given up as well. When
/// a later segment was already uploading or landed, the outcome says so (``Finished/orphaned``):
/// the follower then starts a new generation, so that no sequence number of the old one is used
/// twice; otherwise it reads the same commits again from its last published segment.
public final class SegmentShipper: @unchecked Sendable {
    /// A segment to publish: its file (the shipper's from now on: removed once done) and its name
    /// in the repository.
    public struct Parcel: Sendable {
        public let user: UserID
        /// Its sequence in its generation.
        public let sequence: Int
        /// Its name in the repository (what the outcome is matched to, with the sequence).
        public internal(set) var object: String
        public internal(set) var file: String
        /// Later rounds of the user attached to it while it waited (``attach(user:sequence:object:becomes:file:)``):
        /// merged into one segment with ``file`` when its upload begins.
        var parts: [String] = []
        var attempts = 0
        var notBefore = ContinuousClock.now
        var bytes: Int64 = 0
    }

    /// What became of a segment handed over.
    public enum Outcome: Sendable, Equatable {
        case published
        /// Given up: the segment is not in the repository (the reason said).
        case abandoned(String)
    }

    /// Where one of a user's segments stands.
    enum State: Equatable {
        /// Behind ``perUser`` earlier ones: not started.
        case queued
        /// In ``waiting`` (due, or pausing after a failure), or in a run.
        case due
        case running
        /// In the repository under its final name, not reported until every earlier one is.
        case landed
        case abandoned(String)
        /// Left at a stop: neither it nor any later one is reported.
        case dropped

        var isAbandoned: Bool { if case .abandoned = self { true } else { false } }
    }

    struct Entry {
        var parcel: Parcel
        var state: State
        /// Given up while a later one was uploading or had landed.
        var orphaned = false
    }

    let repository: any Repository
    /// The rclone runs uploading at once (`follow_uploads`).
    public let runs: Int
    /// How many of a user's oldest segments not yet settled upload at once.
    public let perUser: Int
    /// Transfers within one run.
    public var transfers = 16
    /// How often a segment is tried before it is given up (`follow --once`: a few; a follower
    /// that runs on: for as long as it runs).
    public var attempts = Int.max
    private let condition = NSCondition()
    /// The segments due and not in a run.
    private var waiting: [Parcel] = []
    /// Each user's segments handed over and not yet reported, in sequence order.
    private var lanes: [UserID: [Entry]] = [:]
    private var running = 0
    /// How many runs under way carry segments of each user.
    private var runsOf: [UserID: Int] = [:]
    /// The most runs one user's segments ride at once: a user whose uploads stall holds back no
    /// more runs than that (each stalled run waits for its deadline), however many of its
    /// segments may upload side by side.
    public static let runsPerUser = 2
    /// Users a segment of whom was given up since the follower last took the outcomes: whatever
    /// else of theirs is handed over until then is built on it, and is given up too.
    private var refused: Set<UserID> = []
    private var finished: [Finished] = []
    /// The rclone runs under way (killed by ``stop()``).
    private var processes: [pid_t: RcloneProcess] = [:]
    private var notices: [FollowEvent] = []
    private var stopped = false

    public init(repository: any Repository, runs: Int = 4, perUser: Int = 4) {
        self.repository = repository
        self.runs = max(1, runs)
        self.perUser = max(1, perUser)
        Thread.detachNewThread { [self] in retryLoop() }
    }

    /// What became of one segment handed over (its user's outcomes come in the order of their
    /// sequences).
    public struct Finished: Sendable {
        public let user: UserID
        public let sequence: Int
        /// The segment's name in the repository: a follower matches an outcome to its segment by
        /// it as well as by the sequence (a user followed again may reuse a sequence).
        public let object: String
        public let outcome: Outcome
        /// Given up while a later segment of its user was uploading or had landed: a segment
        /// after a hole may be in the repository (never claimed; its sequence is taken).
        public var orphaned = false
    }

    /// Whether a segment of `user` is being published.
    public func uploading(_ user: UserID) -> Bool { condition.withLock { lanes[user] != nil } }

    /// Whether nothing is being published.
    public var idle: Bool { condition.withLock { lanes.isEmpty } }

    /// Hands over a segment: uploaded beside its user's earlier ones (at most ``perUser`` at
    /// once), reported published once every earlier one is.
    public func send(user: UserID, sequence: Int, object: String, file: String) {
        var parcel = Parcel(user: user, sequence: sequence, object: object, file: file)
        parcel.bytes = FileSystem.size(file)
        condition.withLock {
            if refuses(user) {
                unlink(file)
                finished.append(
                    Finished(
                        user: user, sequence: sequence, object: object,
                        outcome: .abandoned(stopped ? "stopping" : "an earlier segment was not published")))
                condition.broadcast()
                return
            }
            lanes[user, default: []].append(Entry(parcel: parcel, state: .queued))
            admit(user)
            startRuns()
        }
    }

    /// Attaches the segment of a later round of `user` to the user's newest segment handed over
    /// (`sequence`, named `object`), when no upload of that one has begun (not in a run, never
    /// tried: no object of its name can be in the repository). The two are then one segment
    /// under that sequence, named `becomes` (its first observation to the later round's last),
    /// merged when its upload begins: the earlier one's records, then each later round's, every
    /// store run with its own observation (docs/follow.md, "Merged while waiting"). `file` is the
    /// shipper's once attached. False (and `file` the caller's) when that segment is not, or no
    /// longer, the newest, or started.
    public func attach(user: UserID, sequence: Int, object: String, becomes: String, file: String) -> Bool {
        let bytes = FileSystem.size(file)
        return condition.withLock { () -> Bool in
            guard !refuses(user), var lane = lanes[user], let last = lane.indices.last,
                lane[last].parcel.sequence == sequence, lane[last].parcel.object == object,
                lane[last].parcel.attempts == 0
            else { return false }
            switch lane[last].state {
            case .queued: break
            case .due:
                guard
                    let at = waiting.firstIndex(where: {
                        $0.user == user && $0.object == object && $0.sequence == sequence
                    })
                else { return false }
                waiting[at].object = becomes
                waiting[at].parts.append(file)
                waiting[at].bytes += bytes
            default: return false
            }
            lane[last].parcel.object = becomes
            lane[last].parcel.parts.append(file)
            lane[last].parcel.bytes += bytes
            lanes[user] = lane
            return true
        }
    }

    /// Whether whatever else of `user` is handed over is given up at once (under the lock): the
    /// shipper stops; a segment of the user was given up since the follower last took the
    /// outcomes; or the user's lane holds a segment given up whose outcome waits behind an earlier
    /// one still uploading. Everything after such a segment is built on it, and its sequence may
    /// be taken again by the follower's fallback.
    private func refuses(_ user: UserID) -> Bool {
        stopped || refused.contains(user) || lanes[user]?.contains(where: \.state.isAbandoned) == true
    }

    /// Removes a parcel's files.
    static func remove(_ parcel: Parcel) {
        unlink(parcel.file)
        for part in parcel.parts { unlink(part) }
    }

    /// Compression contexts for merges, kept between them (at most one per run).
    private var compressors: [SegmentCompressor] = []

    /// Writes a parcel's rounds, its file and then each part attached, as one segment beside
    /// them: the first one's header, every record in order, the last one's cursors, from the
    /// first one's first observation to the last one's last. Each file's digest is checked as
    /// it is copied (a file that does not check out throws before the merged one is finished,
    /// and that one is removed); the result must be what the parcel's name says.
    static func merged(_ parcel: Parcel, compressor: SegmentCompressor) throws -> String {
        let path =
            (parcel.file as NSString).deletingLastPathComponent + "/" + FileSystem.temporaryName(for: "segment.seg")
        var writer: SegmentWriter?
        var head: Segment.Header?
        var first: Int64 = 0
        var last: Int64 = 0
        var cursors: [String: Segment.StoreCursor] = [:]
        do {
            for (index, file) in ([parcel.file] + parcel.parts).enumerated() {
                let trailer = try SegmentReader.read(file) { record in
                    if case .header(let header) = record {
                        if let head {
                            guard header.user == head.user, header.host == head.host,
                                header.generation == head.generation
                            else { throw Segment.Failure.corrupt(path: file, reason: "another user's or generation's") }
                        } else {
                            head = header
                            writer = try SegmentWriter(path: path, header: header, compressor: compressor)
                        }
                    }
                    try writer?.copy(record)
                }
                if index == 0 { first = trailer.first }
                last = trailer.last
                cursors = trailer.cursors
            }
            guard let writer, let head else { throw Segment.Failure.corrupt(path: parcel.file, reason: "no header") }
            try writer.finish(first: first, last: last, cursors: cursors)
            let name = (parcel.object as NSString).lastPathComponent
            guard let named = Segment.parse(fileName: name), named.sequence == head.sequence,
                named.first == writer.trailer.first, named.last == writer.trailer.last
            else { throw Segment.Failure.corrupt(path: path, reason: "the merged rounds are not \(name)") }
            return path
        } catch {
            writer = nil
            unlink(path)
            throw error
        }
    }

    /// Forgets `user` (gone from the root): its segments not started are dropped (their files
    /// removed), those uploading are no longer reported, and outcomes not yet taken are dropped.
    public func forget(_ user: UserID) {
        condition.withLock {
            for entry in lanes.removeValue(forKey: user) ?? [] where entry.state != .running {
                Self.remove(entry.parcel)
            }
            waiting.removeAll { $0.user == user }
            finished.removeAll { $0.user == user }
            refused.remove(user)
            condition.broadcast()
        }
    }

    /// The outcomes since the last call, and what is worth a line in the journal (a retry).
    public func take() -> (outcomes: [Finished], notices: [FollowEvent]) {
        condition.withLock {
            defer {
                finished = []
                notices = []
                refused = []
            }
            return (finished, notices)
        }
    }

    /// Waits until nothing is being published, or until `deadline`; whether it is idle.
    @discardableResult
    public func waitIdle(until deadline: ContinuousClock.Instant?) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !lanes.isEmpty {
            if let deadline {
                let left = deadline - ContinuousClock.now
                if left <= .zero { return false }
                _ = condition.wait(until: Date(timeIntervalSinceNow: min(left.timeInterval, 0.1)))
            } else {
                _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1))
            }
        }
        return true
    }

    /// No more runs start, and the runs under way are ended (their rclone killed: an object
    /// store keeps nothing of an upload cut short, and a segment whose upload completed first is
    /// whole under its final name); the segments not yet published are left, their files
    /// removed, and never reported (nor is any later one of their user, landed or not: the claim
    /// stays a prefix). Waits for the runs to end (their staging folders removed) for at most
    /// `grace`.
    public func stop(grace: Duration = .milliseconds(200)) {
        let deadline = Date(timeIntervalSinceNow: grace.timeInterval)
        condition.lock()
        defer { condition.unlock() }
        stopped = true
        for user in Array(lanes.keys) { drop(user) }
        waiting = []
        for pid in processes.keys { kill(pid, SIGKILL) }
        condition.broadcast()
        while running > 0 && Date() < deadline {
            _ = condition.wait(until: min(deadline, Date(timeIntervalSinceNow: 0.02)))
        }
    }

    /// The user's segments not in a run are left (the lock held): their files removed, each
    /// marked so that nothing after it is ever reported.
    private func drop(_ user: UserID) {
        guard var lane = lanes[user] else { return }
        for index in lane.indices where lane[index].state == .queued || lane[index].state == .due {
            Self.remove(lane[index].parcel)
            lane[index].state = .dropped
        }
        lanes[user] = lane
        waiting.removeAll { $0.user == user }
    }

    /// Lets the first ``perUser`` of the user's segments not settled start (the lock held).
    private func admit(_ user: UserID) {
        guard !stopped, var lane = lanes[user] else { return }
        let now = ContinuousClock.now
        for index in lane.indices.prefix(perUser) where lane[index].state == .queued {
            lane[index].state = .due
            lane[index].parcel.notBefore = now
            waiting.append(lane[index].parcel)
        }
        lanes[user] = lane
    }

    /// Starts runs for the segments due while fewer than ``runs`` go on (the lock held).
    private func startRuns() {
        guard !stopped else { return }
        let now = ContinuousClock.now
        while running < runs {
            let due = waiting.filter { $0.notBefore <= now && runsOf[$0.user, default: 0] < Self.runsPerUser }
            guard !due.isEmpty else { return }
            let taken = Set(due.map(\.object))
            waiting.removeAll { taken.contains($0.object) }
            for parcel in due { setState(of: parcel, .running) }
            for user in Set(due.map(\.user)) { runsOf[user, default: 0] += 1 }
            running += 1
            Thread.detachNewThread { [self] in upload(due) }
        }
    }

    /// The index of `parcel` in its user's lane (the lock held).
    private func index(of parcel: Parcel) -> Int? {
        lanes[parcel.user]?.firstIndex { $0.parcel.object == parcel.object && $0.parcel.sequence == parcel.sequence }
    }

    private func setState(of parcel: Parcel, _ state: State) {
        if let index = index(of: parcel) { lanes[parcel.user]![index].state = state }
    }

    /// Whether `parcel` is still to be uploaded: neither given up, left at a stop, nor its user
    /// forgotten.
    private func wanted(_ parcel: Parcel) -> Bool {
        condition.withLock {
            guard !stopped, let index = index(of: parcel) else { return false }
            return lanes[parcel.user]![index].state == .running
        }
    }

    /// Starts the runs of segments whose pause after a failure is over.
    private func retryLoop() {
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.2))
            startRuns()
        }
    }

    /// The deadline of a run: the repository's bound for one operation, at most 10 s plus a
    /// second for every 256 KiB (a stalled upload stops holding its users back soon).
    static func deadline(bytes: Int64, bound: Double) -> Double {
        min(bound, 10 + Double(bytes) / 262_144)
    }

    private func upload(_ taken: [Parcel]) {
        // Rounds attached to a segment while it waited become one file now (each round's bytes
        // written once more, whatever the number attached); a merge that fails gives the segment
        // up (its commits are read again).
        var parcels = taken
        var unmerged: [(Parcel, String)] = []
        if parcels.contains(where: { !$0.parts.isEmpty }) {
            let compressor = condition.withLock { compressors.popLast() } ?? SegmentCompressor()
            for index in parcels.indices where !parcels[index].parts.isEmpty && wanted(parcels[index]) {
                let parcel = parcels[index]
                do {
                    let merged = try Self.merged(parcel, compressor: compressor)
                    Self.remove(parcel)
                    parcels[index].file = merged
                    parcels[index].parts = []
                    parcels[index].bytes = FileSystem.size(merged)
                    condition.withLock {
                        if let at = self.index(of: parcel) { lanes[parcel.user]![at].parcel = parcels[index] }
                    }
                } catch {
                    unmerged.append((parcel, "its rounds could not be merged: \(error)"))
                }
            }
            condition.withLock { compressors.append(compressor) }
        }
        for (parcel, reason) in unmerged {
            // Its user's later segments in this run have not begun to upload either: they are
            // given up with it as segments not started (none can be in the repository, so the
            // follower reads their commits again in the same generation).
            let later = parcels.filter { $0.user == parcel.user && $0.sequence > parcel.sequence }
            condition.withLock { for other in later { setState(of: other, .due) } }
            parcels.removeAll { $0.user == parcel.user && $0.sequence >= parcel.sequence }
            finish(parcel, .abandoned(reason))
        }
        var byObject: [String: Parcel] = [:]
        for parcel in parcels { byObject[parcel.object] = parcel }
        var done: Set<String> = []
        var timedOut = true
        var failure: String?
        if parcels.isEmpty {
            timedOut = false
        } else if let remote = repository as? RcloneRepository, remote.uploadsBatches() {
            let bytes = parcels.reduce(Int64(0)) { $0 + $1.bytes }
            let deadline = Self.deadline(bytes: bytes, bound: remote.deadline)
            let started = ContinuousClock.now
            do {
                var process: RcloneProcess?
                done = try remote.uploadBatch(
                    parcels.map { RcloneRepository.Upload(object: $0.object, file: $0.file) }, transfers: transfers,
                    deadline: deadline,
                    started: { run in
                        process = run
                        condition.withLock {
                            if stopped { kill(run.pid, SIGKILL) }
                            processes[run.pid] = run
                        }
                    }
                ) { object in
                    if let parcel = byObject[object] { finish(parcel, .published) }
                }
                if let process { condition.withLock { processes[process.pid] = nil } }
                timedOut = (ContinuousClock.now - started).timeInterval >= deadline
            } catch {
                failure = error.description
            }
        } else {
            timedOut = false
        }
        for parcel in parcels where !done.contains(parcel.object) {
            if !wanted(parcel) {
                // Stopped (its run killed), given up with an earlier one, or its user gone:
                // never published behind the follower's back.
                Self.remove(parcel)
                continue
            }
            if timedOut || failure != nil {
                // Stopped at its deadline (a stall) or not started: tried again after a pause,
                // in a run of its own kind (nothing else is waited for).
                retry(parcel, because: failure ?? "no upload within its deadline")
                continue
            }
            // The run ended without reporting it copied: failed, or its name taken (maybe by an
            // earlier try whose answer was lost). The publish of one object settles it.
            do {
                try repository.publishObject(parcel.object, from: parcel.file)
                finish(parcel, .published)
            } catch let error as RepositoryError {
                if case .transport(_, _, true) = error {
                    retry(parcel, because: error.description)
                } else {
                    finish(parcel, .abandoned(error.description))
                }
            } catch {
                if error is InterruptedError {
                    retry(parcel, because: "interrupted")
                } else {
                    finish(parcel, .abandoned("\(error)"))
                }
            }
        }
        condition.withLock {
            running -= 1
            for user in Set(taken.map(\.user)) {
                let left = runsOf[user, default: 1] - 1
                runsOf[user] = left > 0 ? left : nil
            }
            startRuns()
            condition.broadcast()
        }
    }

    /// Settles a segment: landed, it is reported once every earlier one of its user is (then
    /// its user's next one may start); given up, so is every later one of its user (each built
    /// on it).
    private func finish(_ parcel: Parcel, _ outcome: Outcome) {
        Self.remove(parcel)
        condition.withLock {
            defer { condition.broadcast() }
            guard let at = index(of: parcel), var lane = lanes[parcel.user],
                lane[at].state == .running
                    || lane[at].state == .due
            else { return }
            switch outcome {
            case .published:
                lane[at].state = .landed
            case .abandoned(let reason):
                lane[at].state = .abandoned(reason)
                for later in lane.indices.dropFirst(at + 1) {
                    switch lane[later].state {
                    case .running, .landed:
                        lane[at].orphaned = true
                    case .queued, .due:
                        // One tried already may be there all the same (a run stopped after the
                        // server took it, said failed): its number may be taken.
                        if lane[later].parcel.attempts > 0 { lane[at].orphaned = true }
                        Self.remove(lane[later].parcel)
                        let parcel = lane[later].parcel
                        waiting.removeAll { $0.object == parcel.object && $0.user == parcel.user }
                    case .abandoned, .dropped:
                        break
                    }
                    lane[later].state = .abandoned("segment \(parcel.sequence) before it was not published")
                }
            }
            lanes[parcel.user] = lane
            release(parcel.user)
            admit(parcel.user)
            startRuns()
        }
    }

    /// Reports the user's settled segments from the oldest on, as far as they run without one
    /// still uploading (the lock held): a landed one after a missing one waits.
    private func release(_ user: UserID) {
        guard var lane = lanes[user] else { return }
        while let head = lane.first {
            if head.state == .landed {
                finished.append(
                    Finished(
                        user: user, sequence: head.parcel.sequence, object: head.parcel.object, outcome: .published))
                lane.removeFirst()
                continue
            }
            guard case .abandoned(let reason) = head.state else { break }
            var first = Finished(
                user: user, sequence: head.parcel.sequence, object: head.parcel.object, outcome: .abandoned(reason))
            first.orphaned = head.orphaned
            finished.append(first)
            for entry in lane.dropFirst() {
                finished.append(
                    Finished(
                        user: user, sequence: entry.parcel.sequence, object: entry.parcel.object,
                        outcome: .abandoned("segment \(head.parcel.sequence) before it was not published")))
            }
            refused.insert(user)
            lane = []
        }
        lanes[user] = lane.isEmpty ? nil : lane
    }

    private func retry(_ parcel: Parcel, because reason: String) {
        var again = parcel
        again.attempts += 1
        if again.attempts >= attempts {
            finish(parcel, .abandoned(reason))
            return
        }
        again.notBefore = ContinuousClock.now + RemoteLimits.backoff(try: again.attempts)
        condition.withLock {
            guard let at = index(of: parcel), lanes[parcel.user]![at].state == .running else {
                Self.remove(parcel)
                return
            }
            if stopped {
                Self.remove(parcel)
                lanes[parcel.user]![at].state = .dropped
            } else {
                if again.attempts == 1 {
                    notices.append(
                        FollowEvent(
                            kind: .paused, user: parcel.user.rawValue,
                            message: "segment upload failed (\(reason)); tried again until it succeeds"))
                }
                lanes[parcel.user]![at].state = .due
                lanes[parcel.user]![at].parcel = again
                waiting.append(again)
            }
            condition.broadcast()
        }
    }
}
