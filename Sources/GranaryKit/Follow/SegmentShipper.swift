import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Publishes the segments `follow` writes for a remote repository in the background, so that the
/// follower goes on reading other users while they upload (docs/follow.md, "A remote
/// repository").
///
/// A follower may hand over several segments of a user (it reads the user's next segment while
/// the last one uploads); the shipper uploads each user's segments strictly in order, one at a
/// time: the next is started only once the one before it is published, so a later segment of a
/// generation is never uploaded while an earlier one may be missing, and the catalogue never sees
/// a hole. The segments due (the oldest not yet published of each user) are uploaded together, by
/// at most ``runs`` rclone runs at once, each run one process for many segments
/// (``RcloneRepository/uploadBatch(_:transfers:deadline:uploaded:)``) with a deadline of its own:
/// a stalled transfer holds back the users of its run alone, and each segment counts as
/// published as soon as rclone reports it copied (its user's next one is then due at once). A
/// segment whose upload failed is tried again, under the same name and with the same bytes,
/// after a pause (1 s, 2 s, … 8 s) for as long as the follower runs: its user's lag grows
/// meanwhile and `check` says so. A failure that trying again cannot mend (the name taken by
/// other bytes) gives the segment up, and with it every later segment of its user handed over
/// (each built on it); segments of that user handed over before the follower took in the
/// outcome (``take()``) are given up as well. The follower then reads the same commits again
/// from its last published segment.
public final class SegmentShipper: @unchecked Sendable {
    /// A segment to publish: its file (the shipper's from now on: removed once done) and its name
    /// in the repository.
    public struct Parcel: Sendable {
        public let user: UserID
        /// Its sequence in its generation (what the outcome is matched to).
        public let sequence: Int
        public let object: String
        public let file: String
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

    let repository: any Repository
    /// The rclone runs uploading at once (`follow_uploads`).
    public let runs: Int
    /// Transfers within one run.
    public var transfers = 16
    /// How often a segment is tried before it is given up (`follow --once`: a few; a follower
    /// that runs on: for as long as it runs).
    public var attempts = Int.max
    private let condition = NSCondition()
    /// The segments due: the oldest not yet published of each user (and not being uploaded).
    private var waiting: [Parcel] = []
    /// Each user's later segments, in order, behind the one waiting or being uploaded.
    private var queued: [UserID: [Parcel]] = [:]
    private var running = 0
    /// The users with a segment waiting or being uploaded.
    private var busy: Set<UserID> = []
    /// Users a segment of whom was given up since the follower last took the outcomes: whatever
    /// else of theirs is handed over until then is built on it, and is given up too.
    private var refused: Set<UserID> = []
    private var finished: [Finished] = []
    /// The rclone runs under way (killed by ``stop()``).
    private var processes: [pid_t: RcloneProcess] = [:]
    private var notices: [FollowEvent] = []
    private var stopped = false

    public init(repository: any Repository, runs: Int = 4) {
        self.repository = repository
        self.runs = max(1, runs)
        Thread.detachNewThread { [self] in retryLoop() }
    }

    /// What became of one segment handed over (its user's outcomes come in the order of their
    /// sequences).
    public struct Finished: Sendable {
        public let user: UserID
        public let sequence: Int
        public let outcome: Outcome
    }

    /// Whether a segment of `user` is being published.
    public func uploading(_ user: UserID) -> Bool { condition.withLock { busy.contains(user) } }

    /// Whether nothing is being published.
    public var idle: Bool { condition.withLock { busy.isEmpty } }

    /// Hands over a segment: uploaded once every segment of its user handed over before it is
    /// published.
    public func send(user: UserID, sequence: Int, object: String, file: String) {
        var parcel = Parcel(user: user, sequence: sequence, object: object, file: file)
        parcel.bytes = FileSystem.size(file) ?? 0
        condition.withLock {
            if refused.contains(user) || stopped {
                unlink(file)
                finished.append(
                    Finished(
                        user: user, sequence: sequence,
                        outcome: .abandoned(stopped ? "stopping" : "an earlier segment was not published")))
                condition.broadcast()
                return
            }
            if busy.contains(user) {
                queued[user, default: []].append(parcel)
                return
            }
            busy.insert(user)
            waiting.append(parcel)
            startRuns()
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
        while !busy.isEmpty {
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
    /// whole and in order); the segments not yet published are left, their files removed. Waits
    /// for the runs to end (their staging folders removed) for at most `grace`.
    public func stop(grace: Duration = .milliseconds(200)) {
        let deadline = Date(timeIntervalSinceNow: grace.timeInterval)
        condition.lock()
        defer { condition.unlock() }
        stopped = true
        for parcel in waiting + queued.values.flatMap({ $0 }) { unlink(parcel.file) }
        waiting = []
        queued = [:]
        for pid in processes.keys { kill(pid, SIGKILL) }
        condition.broadcast()
        while running > 0 && Date() < deadline {
            _ = condition.wait(until: min(deadline, Date(timeIntervalSinceNow: 0.02)))
        }
    }

    /// Starts runs for the segments due while fewer than ``runs`` go on (the lock held).
    private func startRuns() {
        guard !stopped else { return }
        let now = ContinuousClock.now
        while running < runs {
            let due = waiting.filter { $0.notBefore <= now }
            guard !due.isEmpty else { return }
            waiting.removeAll { $0.notBefore <= now }
            running += 1
            Thread.detachNewThread { [self] in upload(due) }
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

    private func upload(_ parcels: [Parcel]) {
        var byObject: [String: Parcel] = [:]
        for parcel in parcels { byObject[parcel.object] = parcel }
        var done: Set<String> = []
        var timedOut = true
        var failure: String?
        if let remote = repository as? RcloneRepository, remote.uploadsBatches() {
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
            if condition.withLock({ stopped }) {
                // Stopped (its run killed): left, never published behind the follower's back.
                unlink(parcel.file)
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
            startRuns()
            condition.broadcast()
        }
    }

    /// Settles a segment: published, its user's next one is due at once; given up, so is every
    /// later one of its user (each built on it).
    private func finish(_ parcel: Parcel, _ outcome: Outcome) {
        unlink(parcel.file)
        condition.withLock {
            finished.append(Finished(user: parcel.user, sequence: parcel.sequence, outcome: outcome))
            var later = queued.removeValue(forKey: parcel.user) ?? []
            switch outcome {
            case .published where !later.isEmpty && !stopped:
                var next = later.removeFirst()
                next.notBefore = ContinuousClock.now
                waiting.append(next)
                if !later.isEmpty { queued[parcel.user] = later }
                startRuns()
            case .published:
                busy.remove(parcel.user)
            case .abandoned:
                for dropped in later {
                    unlink(dropped.file)
                    finished.append(
                        Finished(
                            user: dropped.user, sequence: dropped.sequence,
                            outcome: .abandoned("segment \(parcel.sequence) before it was not published")))
                }
                refused.insert(parcel.user)
                busy.remove(parcel.user)
            }
            condition.broadcast()
        }
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
            if stopped {
                unlink(parcel.file)
                for dropped in queued.removeValue(forKey: parcel.user) ?? [] { unlink(dropped.file) }
                busy.remove(parcel.user)
            } else {
                if again.attempts == 1 {
                    notices.append(
                        FollowEvent(
                            kind: .paused, user: parcel.user.rawValue,
                            message: "segment upload failed (\(reason)); tried again until it succeeds"))
                }
                waiting.append(again)
            }
            condition.broadcast()
        }
    }
}
