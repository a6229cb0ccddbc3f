import Foundation

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
    public static func run(_ operation: BackupOperation, users: [UserID], jobs: Int) -> [Outcome] {
        let results = Results(count: users.count)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = max(1, jobs)
        for (index, user) in users.enumerated() {
            queue.addOperation {
                if Interruption.isRequested {
                    results.set(index, Outcome(user: user, error: (InterruptedError(signal: Interruption.signal))))
                    return
                }
                do {
                    results.set(index, Outcome(user: user, result: try operation.run(user)))
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
        return results.all
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
        var all: [Outcome] { items.compactMap { $0 } }
    }
}

/// An error of a type that is not a `GranaryError` (a bug): exit 74.
public struct UnexpectedError: GranaryError, Sendable {
    public let description: String
    /// An error described by `description`.
    public init(description: String) { self.description = description }
}
