import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Fault injection for the recovery tests, compiled only into debug builds (what `make test`
/// builds): a release build (`make install`, `make bench`) has no such switch at all, so nothing
/// can make a real restore stop half-way. The program using the core sets `plan` once, before
/// any work (the `granary` command reads it from its environment in a debug build).
///
/// Points are named, not counted: a test that kills granary "at every point" iterates over
/// ``Name/allCases`` (or one of the groups), so a step added to a commit cannot silently shift
/// what a test tests. docs/reliability.md lists each point and what reaching it proves.
public enum CrashPoint {
    /// The points where a restore, reset, recovery or retire can be stopped.
    public enum Name: String, CaseIterable, Sendable {
        // The restore (and reset) commit, in order. Up to `checked` nothing in the user's folder
        // has changed; `committed` is the journal's durable commit record; after it every store is
        // rolled forward.
        /// The archive is verified into staging; nothing live was touched.
        case staged
        /// Every owner acknowledged PAUSE; nothing was changed.
        case paused
        /// A live store's companion (`-wal`, `-shm`, `-journal`) is listed for the check that it
        /// is a plain file of the owner, not opened yet (per companion; not in ``restoreCommit``:
        /// reached only where a companion is there).
        case companionListed
        /// Every check that can refuse passed (commit locks held, every live store locked against
        /// other connections); nothing was changed.
        case checked
        /// The commit record is durable; nothing live was moved yet.
        case committed
        /// A store's old WAL was checkpointed into its database (per store).
        case checkpointed
        /// A store's old database (and external-data files) are linked into the work folder.
        case keptAside
        /// A store's new external-data files are linked into the live folder.
        case externalAdded
        /// A store's stale `-wal`, `-shm` and `-journal` are removed.
        case staleRemoved
        /// A store's new database is at the live name (per store).
        case switched
        /// The owners were told to resume.
        case resumed
        /// Before the safety archive is written and the work folder removed.
        case finishing

        // Retire, in order.
        /// Before the final archive is taken.
        case retireArchiving
        /// The folder's other regular files are listed for the final archive, none opened yet.
        case retireFilesListed
        /// The final archive is published, not verified yet.
        case retireArchived
        /// Before the retire journal is written.
        case retireJournalling
        /// The journal is written; the folder is not moved yet.
        case retireMoving
        /// The folder is moved into the state folder, not checked yet.
        case retireMoved
        /// Before each entry of the moved folder is removed (per entry).
        case retireDeleting

        // A delta backup (`backup --delta`), in order (issue 35).
        /// The snapshots' pages are hashed and the base read; nothing is written yet.
        case deltaPlanned
        /// The archive is written to its temporary file, not published.
        case deltaWritten
        /// The archive is published under its name, its verification record not written yet.
        case deltaPublished

        // Prune's merge of deltas (issue 35, ``DeltaMerge``), in order (per merge).
        /// The tip's state is rebuilt in a scratch folder; nothing is written.
        case mergeStaged
        /// Its pages are hashed and the members of the merged archive ready.
        case mergeHashed
        /// The merged archive is written to its temporary file, not published.
        case mergeWritten
        /// The merged archive is published, not proven yet; nothing is removed.
        case mergePublished
        /// The merged archive is proven and recorded; nothing is removed yet.
        case mergeProven
        /// Before each archive a merge replaces is removed (per archive, newest first).
        case mergeRemoving

        // A legacy archive given its host's name (``Repository/convertLegacyArchives(of:adopting:dryRun:)``),
        // in order (per archive).
        /// Its verification record is written for the new name; the archive is not renamed yet.
        case convertRecorded
        /// The archive has its new name; the old record and the marker are still there.
        case convertRenamed

        /// `follow`: a round of a user whose generation has begun, before it reads (a stall there
        /// is a follower that lags behind the changes reported to it).
        case followRead
        /// `follow` with a local repository, each grouped publish of a pass's segments: every file
        /// synced under its temporary name, none linked to its name yet.
        case followSynced
        /// Every segment of the group linked to its name, no folder synced yet.
        case followLinked

        /// The restore and reset commit's points, in order.
        public static let restoreCommit: [Name] = [
            .staged, .paused, .checked, .committed, .checkpointed, .keptAside, .externalAdded, .staleRemoved,
            .switched, .resumed, .finishing,
        ]
        /// Retire's points, in order.
        public static let retire: [Name] = [
            .retireArchiving, .retireFilesListed, .retireArchived, .retireJournalling, .retireMoving, .retireMoved,
            .retireDeleting,
        ]
        /// A delta backup's points, in order.
        public static let deltaBackup: [Name] = [.deltaPlanned, .deltaWritten, .deltaPublished]
        /// A legacy archive's conversion, in order.
        public static let conversion: [Name] = [.convertRecorded, .convertRenamed]
        /// Prune's merge points, in order.
        public static let merge: [Name] = [
            .mergeStaged, .mergeHashed, .mergeWritten, .mergePublished, .mergeProven, .mergeRemoving,
        ]
        /// Points before the commit record: a crash there leaves every store with the same files
        /// and bytes, and recovery rolls back. (At `committed` nothing has changed either, but the
        /// commit is recorded: recovery rolls forward.)
        public static let untouched: Set<Name> = [.staged, .paused, .checked]
    }

    #if TEST_HOOKS
        /// What to do at named points: `(name, n)` means the n-th time that point is reached.
        public struct Plan: Sendable {
            /// Kill the process (SIGKILL) there: a crash at any point must leave every store of
            /// the user fully old or fully new after a recovery.
            public var crashAt: (Name, Int)?
            /// Sleep this many milliseconds there instead (a lease runs out).
            public var stall: (Name, Int, milliseconds: UInt32)?
            /// Stop the process (SIGSTOP) there, so that a test can swap a path in a user's folder
            /// for a link at exactly that point, then continue it.
            public var pauseAt: (Name, Int)?
            /// Send the process SIGTERM there (it goes on: the signal is a request that the run
            /// polls), to prove where a signal stops a restore and where it waits for the commit.
            public var signalAt: (Name, Int)?
            /// Ask owners for leases this long.
            public var lease: Duration?
            /// Make writing a safety archive fail (a repository that turned read-only after the
            /// restore committed).
            public var failSafetyArchive = false
            /// The clock new archives are stamped by (``TestClock``), in microseconds since 1970:
            /// tests make archives of given times, and many in one second, without sleeping.
            public var now: Int64?
            /// `follow`: the most inotify watches the process may hold, as if the kernel's
            /// `fs.inotify.max_user_watches` were this low (an add past it fails with `ENOSPC`), so
            /// that a test runs out of watches without changing the machine's limit.
            public var inotifyWatches: Int?
            /// `follow`: how long a stop reads the users with changes not yet shipped (the oldest
            /// is read whatever it is), instead of half a second.
            public var followStopMilliseconds: Int64?

            public init() {}

            /// `NAME` or `NAME:N` (the N-th time, default the first).
            public static func point(_ text: String) -> (Name, Int)? {
                let parts = text.split(separator: ":", omittingEmptySubsequences: false)
                guard let first = parts.first, let name = Name(rawValue: String(first)), parts.count <= 2 else {
                    return nil
                }
                guard parts.count == 2 else { return (name, 1) }
                return Int(parts[1]).map { (name, $0) }
            }
        }

        /// The plan of this process.
        nonisolated(unsafe) public static var plan = Plan()
        /// How many times each point was reached; several backups of one process (tests, parallel
        /// workers' threads) reach points at once.
        /// (An NSLock, a pthread mutex, which the thread sanitizer follows; it does not follow
        /// Synchronization's Mutex, a futex on Linux.)
        nonisolated(unsafe) private static var reached: [Name: Int] = [:]
        private static let reachedLock = NSLock()

        static func reach(_ name: Name) {
            let count = reachedLock.withLock {
                let count = (reached[name] ?? 0) + 1
                reached[name] = count
                return count
            }
            if let target = plan.crashAt, target.0 == name, target.1 == count { kill(getpid(), SIGKILL) }
            if let stall = plan.stall, stall.0 == name, stall.1 == count { usleep(stall.milliseconds * 1000) }
            if let pause = plan.pauseAt, pause.0 == name, pause.1 == count { kill(getpid(), SIGSTOP) }
            if let target = plan.signalAt, target.0 == name, target.1 == count { kill(getpid(), SIGTERM) }
        }

        static var lease: Duration? { plan.lease }
        static var failSafetyArchive: Bool { plan.failSafetyArchive }
    #else
        @inline(__always) static func reach(_ name: Name) {}

        static var lease: Duration? { nil }
        static var failSafetyArchive: Bool { false }
    #endif
}

/// The time new archives are stamped with: the machine's clock, or in a debug build the one a
/// test set (`GRANARY_TEST_NOW`, ``CrashPoint/Plan/now``).
public enum TestClock {
    public static func now() -> Date {
        #if TEST_HOOKS
            if let micros = CrashPoint.plan.now { return Date(timeIntervalSince1970: Double(micros) / 1_000_000) }
        #endif
        return Date()
    }
}

/// A debug build's trace of the archives read (``CrashPoint/Plan``'s sibling): when a test names a
/// file, each read of an archive appends a line to it, `head NAME` for its manifest alone and
/// `read NAME` for its members, so that a test can count what a command read. A release build
/// has no trace.
public enum ReadTrace {
    #if TEST_HOOKS
        /// The file the lines go to; nil: no trace.
        nonisolated(unsafe) public static var file: String?
        private static let lock = NSLock()

        static func note(_ kind: String, _ archive: String) {
            guard let file else { return }
            let line = Array("\(kind) \(PathText.lastComponent(archive))\n".utf8)
            lock.withLock {
                let fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
                guard fd >= 0 else { return }
                _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        }

        /// `follow`'s line: `scan USER` when it lists and opens every store of a user, `read
        /// USER/STORE` when it reads one store, `publish COUNT waited MICROS at MICROS` when it
        /// makes a group of segments durable (how long the first waited; when, on the monotonic
        /// clock).
        static func follow(_ line: String) {
            guard let file else { return }
            let bytes = Array((line + "\n").utf8)
            lock.withLock {
                let fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
                guard fd >= 0 else { return }
                _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        }
    #else
        @inline(__always) static func note(_ kind: String, _ archive: String) {}
        @inline(__always) static func follow(_ line: @autoclosure () -> String) {}
    #endif
}
