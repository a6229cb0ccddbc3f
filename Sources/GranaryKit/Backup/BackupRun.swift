import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Backs up several users, `jobs` at a time, going on past failures.
public enum BackupRun {
    /// One user's outcome.
    public struct Outcome: Sendable {
        public let user: UserID
        /// The archive, when the backup succeeded.
        public var result: BackupOperation.Result?
        /// Why it failed, otherwise.
        public var error: (any GranaryError & Sendable)?
        /// With a retention policy: the user's archives after the backup, each kept or removed.
        public var pruned: [ArchiveRemoval.Item]?
        /// With a retention policy: why pruning failed after a backup that succeeded.
        public var pruneError: (any GranaryError)?
    }

    /// Runs `operation` for every user, then, with a `prune` policy, prunes each user whose
    /// backup succeeded: under the user's lock, after the new archive is published (in order
    /// of `users`, stopping at the first user whose backup an interruption cut short).
    public static func run(_ operation: BackupOperation, users: [UserID], jobs: Int, prune policy: RetentionPolicy?)
        throws -> [Outcome]
    {
        var outcomes = run(operation, users: users, jobs: jobs)
        guard let policy else { return outcomes }
        for index in outcomes.indices {
            if outcomes[index].error is InterruptedError { break }
            guard let result = outcomes[index].result else { continue }
            do {
                outcomes[index].pruned = try ArchiveRemoval.prune(
                    user: result.user, repository: operation.repository, policy: policy, root: operation.root,
                    lockTimeout: operation.options.lockTimeout)
            } catch let error as any GranaryError {
                outcomes[index].pruneError = error
            }
        }
        return outcomes
    }

    /// Runs `operation` for every user (in order of `users` in the outcome list).
    ///
    /// With mirrors, each new archive is sent to them beside the next users' backups, on a queue of
    /// its own (one upload at a time), never under a user's lock and never before the next user's
    /// snapshot: a slow or dead mirror delays no local backup. A mirror that failed for one user
    /// (anything but a taken name) is not tried again in this run: every later archive is reported
    /// as not sent to it, for `granary sync` to send; nor are the mirrors in `failedMirrors` (those
    /// that failed in an earlier worker process of the same run, ``FailedMirror``).
    ///
    /// With `sendMirrors` false, nothing is sent: each outcome's result keeps the archive's local
    /// file (``BackupOperation/Result/mirrorFile``) for the caller to send (a worker process hands
    /// it to its parent, which sends it beside the next workers' backups, ``MirrorSender``).
    public static func run(
        _ operation: BackupOperation, users: [UserID], jobs: Int, failedMirrors: [FailedMirror] = [],
        sendMirrors: Bool = true
    ) -> [Outcome] {
        let results = Results(count: users.count)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = max(1, jobs)
        let mirrorQueue = OperationQueue()
        mirrorQueue.maxConcurrentOperationCount = 1
        var options = operation.options
        options.mirrorsLater = !operation.mirrors.isEmpty
        let operation = BackupOperation(
            root: operation.root, repository: operation.repository, mirrors: operation.mirrors, options: options,
            progress: operation.progress)
        let health = MirrorHealth(failed: failedMirrors)
        for (index, user) in users.enumerated() {
            queue.addOperation {
                if Interruption.isRequested {
                    results.set(index, Outcome(user: user, error: (InterruptedError(signal: Interruption.signal))))
                    return
                }
                do {
                    let result = try operation.run(user)
                    results.set(index, Outcome(user: user, result: result))
                    if sendMirrors, let file = result.mirrorFile {
                        mirrorQueue.addOperation {
                            defer { if file.removeAfter { unlink(file.path) } }
                            // Under the user's lock, as every write of the user's archives is (a sync
                            // of the user must not take this upload for a dead run's).
                            let lock: UserLock
                            do throws(LockError) {
                                lock = try UserLock.acquire(
                                    root: operation.root, user: user, timeout: operation.options.lockTimeout)
                            } catch {
                                let uploads = operation.mirrors.map {
                                    BackupOperation.MirrorUpload(
                                        location: $0.location, archive: nil, error: error, seconds: 0)
                                }
                                results.update(index) { $0.result?.mirrors = uploads }
                                return
                            }
                            defer { lock.release() }
                            let uploads = operation.mirrors.map { mirror in
                                health.send(file.path, as: result.entry, to: mirror, from: operation.repository)
                            }
                            results.update(index) { $0.result?.mirrors = uploads }
                        }
                    }
                } catch _ where Interruption.isRequested {
                    // Whatever the signal cut short (a wait for a lock, say) failed because of it.
                    results.set(index, Outcome(user: user, error: (InterruptedError(signal: Interruption.signal))))
                } catch let error as any GranaryError & Sendable {
                    results.set(index, Outcome(user: user, error: (error)))
                } catch {
                    results.set(index, Outcome(user: user, error: (UnexpectedError(description: "\(user): \(error)"))))
                }
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        mirrorQueue.waitUntilAllOperationsAreFinished()
        return results.all
    }

    /// The mirrors of one run: the first failure of a mirror (other than a taken name) stands for
    /// the rest of the run.
    final class MirrorHealth: @unchecked Sendable {
        private let lock = NSLock()
        private var failed: [String: any GranaryError & Sendable] = [:]

        init(failed earlier: [FailedMirror] = []) {
            for mirror in earlier { failed[mirror.location] = MirrorFailedEarlier(mirror) }
        }

        func send(_ file: String, as entry: RepositoryEntry, to mirror: any Repository, from primary: any Repository)
            -> BackupOperation.MirrorUpload
        {
            if let cause = lock.withLock({ failed[mirror.location] }) {
                return BackupOperation.MirrorUpload(
                    location: mirror.location, archive: nil,
                    error: MirrorSkipped(mirror: mirror.location, cause: cause),
                    seconds: 0)
            }
            let upload = BackupOperation.send(file, as: entry, to: mirror, from: primary)
            // A taken name or a delta's broken chain is this archive's alone, not the mirror's.
            if let error = upload.error, !(error is MirrorError), !(error is ChainGap) {
                lock.withLock { failed[mirror.location] = failed[mirror.location] ?? error }
            }
            return upload
        }
    }

    /// Sends archives to the mirrors one at a time, on a queue of its own, beside whatever the
    /// caller does next: the parent of `backup --all`'s worker processes gives it each archive a
    /// worker handed over (``MirrorHandOver``), so that no mirror, slow or dead, delays the next
    /// user's local backup. As in ``run(_:users:jobs:failedMirrors:sendMirrors:)``: under the
    /// user's lock, and a mirror that failed once is not tried again in the run.
    public final class MirrorSender: @unchecked Sendable {
        private let operation: BackupOperation
        private let health: MirrorHealth
        private let queue = OperationQueue()
        private let lock = NSLock()
        private var uploads: [String: [BackupOperation.MirrorUpload]] = [:]

        public init(_ operation: BackupOperation, failed earlier: [FailedMirror] = []) {
            self.operation = operation
            health = MirrorHealth(failed: earlier)
            queue.maxConcurrentOperationCount = 1
        }

        /// Queues the archive `handOver` names, of `user`, for every mirror.
        public func send(_ handOver: MirrorHandOver, of user: UserID) {
            let operation = operation, health = health
            // A worker's word is not trusted with a path: the file to send (and remove) must be
            // the run's own (``MirrorHandOver/isAccepted(staging:published:)``).
            let staging = try? operation.repository.stagingFolder(for: user)
            guard handOver.isAccepted(staging: staging, published: nil) || !handOver.removeAfter else {
                lock.withLock {
                    uploads[user.rawValue] = operation.mirrors.map {
                        BackupOperation.MirrorUpload(
                            location: $0.location, archive: nil,
                            error: UnexpectedError(
                                description:
                                    "\(user): the worker handed over \(handOver.path.debugDescription), outside the run's scratch folder; not sent"
                            ), seconds: 0)
                    }
                }
                return
            }
            queue.addOperation { [self] in
                defer { if handOver.removeAfter { unlink(handOver.path) } }
                let result: [BackupOperation.MirrorUpload]
                do {
                    let lock = try UserLock.acquire(
                        root: operation.root, user: user, timeout: operation.options.lockTimeout)
                    defer { lock.release() }
                    guard
                        let entry = try operation.repository.archives(of: user).first(where: {
                            $0.name.fileName == handOver.archive
                        })
                    else {
                        throw RepositoryError.missing(
                            location: operation.repository.location,
                            detail: user.rawValue + "/" + handOver.archive + " is no longer there to send")
                    }
                    guard handOver.removeAfter || handOver.isAccepted(staging: nil, published: entry.localFile) else {
                        throw UnexpectedError(
                            description:
                                "\(user): the worker handed over \(handOver.path.debugDescription), which is not \(handOver.archive)'s file; not sent"
                        )
                    }
                    result = operation.mirrors.map {
                        health.send(handOver.path, as: entry, to: $0, from: operation.repository)
                    }
                } catch let error as any GranaryError & Sendable {
                    result = operation.mirrors.map {
                        BackupOperation.MirrorUpload(location: $0.location, archive: nil, error: error, seconds: 0)
                    }
                } catch {
                    let error = UnexpectedError(description: "\(user): \(error)")
                    result = operation.mirrors.map {
                        BackupOperation.MirrorUpload(location: $0.location, archive: nil, error: error, seconds: 0)
                    }
                }
                lock.withLock { uploads[user.rawValue] = result }
            }
        }

        /// Waits for every queued archive; what became of each user's, by user id.
        public func finish() -> [String: [BackupOperation.MirrorUpload]] {
            queue.waitUntilAllOperationsAreFinished()
            return lock.withLock { uploads }
        }
    }

    private final class Results: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [Outcome?]
        init(count: Int) { items = Array(repeating: nil, count: count) }
        func set(_ index: Int, _ outcome: Outcome) {
            lock.lock()
            items[index] = outcome
            lock.unlock()
        }
        func update(_ index: Int, _ change: (inout Outcome) -> Void) {
            lock.withLock { if items[index] != nil { change(&items[index]!) } }
        }
        var all: [Outcome] { items.compactMap { $0 } }
    }
}

/// A new archive not sent to a mirror that failed for an earlier user of the same run.
public struct MirrorSkipped: GranaryError, Sendable {
    public let mirror: String
    public let cause: any GranaryError & Sendable
    public var description: String { "not sent: the mirror failed earlier in this run (\(cause.description))" }
    public var isTemporary: Bool {
        if case .transport(_, _, true)? = cause as? RepositoryError { return true }
        return (cause as? MirrorFailedEarlier)?.isTemporary ?? false
    }
}

/// An error of a type that is not a `GranaryError` (a bug): exit 74.
public struct UnexpectedError: GranaryError, Sendable {
    public let description: String
    /// An error described by `description`.
    public init(description: String) { self.description = description }
}
