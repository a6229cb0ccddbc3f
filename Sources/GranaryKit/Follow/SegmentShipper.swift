import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Publishes the segments `follow` writes for a remote repository in the background, so that the
/// follower goes on reading other users while they upload (docs/follow.md, "A remote
/// repository").
///
/// A follower hands over at most one segment of a user at a time and reads that user again only
/// once it is published (``UserFollower/shipped(_:)``): a later segment of a generation is never
/// uploaded while an earlier one may be missing, so the catalogue never sees a hole. The
/// segments waiting are uploaded together, by at most ``runs`` rclone runs at once, each run one
/// process for many segments (``RcloneRepository/uploadBatch(_:transfers:deadline:uploaded:)``)
/// with a deadline of its own: a stalled transfer holds back the users of its run alone, and
/// each segment counts as published as soon as rclone reports it copied. A segment whose upload
/// failed is tried again, under the same name and with the same bytes, after a pause (1 s, 2 s,
/// … 8 s) for as long as the follower runs: its user's lag grows meanwhile and `check` says so.
/// A failure that trying again cannot mend (the name taken by other bytes) gives the segment
/// up: the follower reads the same commits again from its last published segment.
public final class SegmentShipper: @unchecked Sendable {
    /// A segment to publish: its file (the shipper's from now on: removed once done) and its name
    /// in the repository.
    public struct Parcel: Sendable {
        public let user: UserID
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
    private var waiting: [Parcel] = []
    private var running = 0
    private var busy: Set<UserID> = []
    private var finished: [(UserID, Outcome)] = []
    private var notices: [FollowEvent] = []
    private var stopped = false

    public init(repository: any Repository, runs: Int = 4) {
        self.repository = repository
        self.runs = max(1, runs)
        Thread.detachNewThread { [self] in retryLoop() }
    }

    /// Whether a segment of `user` is being published.
    public func uploading(_ user: UserID) -> Bool { condition.withLock { busy.contains(user) } }

    /// Whether nothing is being published.
    public var idle: Bool { condition.withLock { busy.isEmpty } }

    /// Hands over a segment (the user must have none being published).
    public func send(user: UserID, object: String, file: String) {
        var parcel = Parcel(user: user, object: object, file: file)
        parcel.bytes = FileSystem.size(file) ?? 0
        condition.withLock {
            busy.insert(user)
            waiting.append(parcel)
            startRuns()
        }
    }

    /// The outcomes since the last call, and what is worth a line in the journal (a retry).
    public func take() -> (outcomes: [(UserID, Outcome)], notices: [FollowEvent]) {
        condition.withLock {
            defer {
                finished = []
                notices = []
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

    /// No more runs start; the segments not yet published are left (their files removed). A
    /// run under way ends with granary (rclone is started to die with it).
    public func stop() {
        condition.withLock {
            stopped = true
            for parcel in waiting { unlink(parcel.file) }
            waiting = []
            condition.broadcast()
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
                done = try remote.uploadBatch(
                    parcels.map { RcloneRepository.Upload(object: $0.object, file: $0.file) }, transfers: transfers,
                    deadline: deadline
                ) { object in
                    if let parcel = byObject[object] { finish(parcel, .published) }
                }
                timedOut = (ContinuousClock.now - started).timeInterval >= deadline
            } catch {
                failure = error.description
            }
        } else {
            timedOut = false
        }
        for parcel in parcels where !done.contains(parcel.object) {
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

    private func finish(_ parcel: Parcel, _ outcome: Outcome) {
        unlink(parcel.file)
        condition.withLock {
            finished.append((parcel.user, outcome))
            busy.remove(parcel.user)
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
