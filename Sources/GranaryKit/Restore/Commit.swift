import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// The commit of one user's restore, reset or retire: the one transaction every path that replaces
/// or removes live stores goes through (`restore`, `reset`, recovery finishing an interrupted swap,
/// and `retire`, whose switch is the move of the user's folder out of the root), so that a rule
/// added here holds everywhere.
///
/// Phases, each a method, in order:
/// 1. ``pauseAll()`` — every owner acknowledges PAUSE. Nothing in the user's folder changes.
/// 2. ``checkAll()`` — under the commit locks, per store: the owner is still paused with lease to
///    spare, SQLite's exclusive lock on the live store can be taken (``StoreGuard``: no other
///    connection has it open, and from now on none can read or write it), and no process holds
///    the store, its `-wal`, `-shm` or `-journal` open. Nothing changes either: a refusal up to
///    here leaves every live file with the same inode and bytes.
/// 3. ``commitRecord()`` — the journal's durable commit record. From here on every store is rolled
///    forward (``Recovery``), never back.
/// 4. ``switchAll()`` — per store: checkpoint the old WAL into the old database through the
///    guard's connection, keep the old files aside (links), link new external-data files in,
///    remove the stale companions, rename the new database in and take SQLite's lock on it (held
///    until RESUME is sent, so that a paused owner cannot write it unseen); then a look at what got
///    in between the rename and the lock: a write stays in the new store and is reported, a
///    companion put back by hand beside an untouched store is moved away. A retire's switch is the
///    one rename of the user's folder (``Switch/folder(move:)``).
/// 5. ``resumeAll()`` — locks released, RESUME sent to every owner at once, their answers awaited
///    together.
///
/// ``refuse(_:)`` undoes phases 1 and 2 (owners resumed, locks released) when a check fails;
/// ``withdraw()`` lets go after checks that passed, for a caller that only asked (retire's
/// question before its final archive).
final class UserCommit {
    /// What the commit switches.
    enum Switch {
        /// Each renamed store's new database (restore, reset, recovery): staged in `work`, the
        /// steps recorded in `journal`.
        case stores(work: RestoreWork, journal: SwapJournal)
        /// The user's folder as a whole, moved out of the root by `move` (retire). The retire
        /// keeps its own journal (`RetireJournal`), written before the commit; the move is undone
        /// by renaming the folder back, so the commit record writes nothing here.
        case folder(move: () throws -> Void)
    }

    /// One store of the commit.
    struct Store {
        let entry: SwapJournal.Entry
        /// The owner serving the store (swap), if any.
        let owner: ReopenClient?
        /// The processes that had the store open when its method was chosen (a full look at
        /// /proc, before any pause): inside the pause only these are looked at again, since a
        /// full look costs up to a few hundred milliseconds on a busy machine. Any other
        /// connection is refused by SQLite's lock; a process that opens the file meanwhile is
        /// found by the full look after the owners resume.
        var candidates: [Int32] = []
        /// Every process is looked at, not only `candidates` (nobody is paused: the look costs
        /// nobody a wait).
        var fullLook = false

        /// A store of a folder a retire moves out of the root: checked as a renamed store with no
        /// owner (one an owner serves is refused before, `Retirement.inUse`), every process looked at.
        static func retiring(_ name: String) -> Store {
            Store(
                entry: SwapJournal.Entry(
                    name: name, method: .swap, stagedDevice: 0, stagedInode: 0, externalAdded: [], externalRemoved: [],
                    externalKept: []),
                owner: nil, fullLook: true)
        }
    }

    let user: Folder<UserOwned>
    let switching: Switch
    let stores: [Store]
    let ownerTimeout: Duration
    let lease: Duration

    private var locks: CommitLocks?
    private var guards: [String: StoreGuard] = [:]
    /// SQLite's lock on each swapped store's new database, held from its rename until RESUME is sent.
    private var newGuards: [String: StoreGuard] = [:]
    /// The live database of each store as it was checked (its old inode).
    private var checked: [String: StoreSwap.Fingerprint] = [:]
    /// How each owner's pause went, by store (set by ``resumeAll()``).
    private(set) var pauses: [String: ReopenClient.PauseReport] = [:]

    init(
        user: Folder<UserOwned>, work: RestoreWork, journal: SwapJournal, stores: [Store], ownerTimeout: Duration,
        lease: Duration
    ) {
        self.user = user
        self.switching = .stores(work: work, journal: journal)
        self.stores = stores
        self.ownerTimeout = ownerTimeout
        self.lease = lease
    }

    /// A retire's commit: the stores of the user's folder checked (``Store/retiring(_:)``), then
    /// `move` as the switch.
    init(
        retiring user: Folder<UserOwned>, stores: [String], ownerTimeout: Duration, move: @escaping () throws -> Void
    ) {
        self.user = user
        self.switching = .folder(move: move)
        self.stores = stores.map(Store.retiring)
        self.ownerTimeout = ownerTimeout
        self.lease = .zero
    }

    /// The stores whose file is renamed (not copied online).
    private var renamed: [Store] { stores.filter { $0.entry.method != .online } }

    // MARK: Phase 1

    /// Asks every owner to pause; returns when all have acknowledged.
    func pauseAll() throws {
        for store in stores {
            try store.owner?.pause(lease: lease, timeout: ownerTimeout)
        }
        CrashPoint.reach(.paused)
    }

    // MARK: Phase 2

    /// Every check that can refuse the commit, before anything in the user's folder changes.
    func checkAll() throws {
        // A companion that is not a plain file of the folder's owner (a FIFO, a device, a link, a
        // hard link) is refused here, naming it, rather than met after the commit.
        for store in stores where store.entry.method != .new {
            let (folder, file) = try StoreSwap.live(store.entry.name, in: user)
            for suffix in StoreFile.companionSuffixes where folder.entry(file + suffix) != nil {
                CrashPoint.reach(.companionListed)
                do {
                    _ = try folder.openFile(file + suffix, singleLink: true)
                } catch {
                    // A `-journal` lives only while a transaction writes (a `-wal` and `-shm`
                    // until the last connection closes): one that another process (not the
                    // paused owner) removed since it was listed is no companion to check. A
                    // link there is ELOOP (refused), never ENOENT: the open follows none.
                    if case .system(let failure) = error, failure.code == ENOENT { continue }
                    throw error
                }
            }
        }
        let swapped = renamed.filter { $0.entry.method == .swap }
        locks = try CommitLocks.take(
            try swapped.map { try StoreSwap.live($0.entry.name, in: user).0 }, until: .now + ownerTimeout)
        for store in swapped {
            let name = store.entry.name
            let (folder, file) = try StoreSwap.live(name, in: user)
            if let owner = store.owner {
                // An owner that said RESUMED or EXPIRED (or anything) unasked, or hung up, is not paused.
                try owner.confirmPaused()
                if owner.leaseRemaining < StoreSwap.commitMargin {
                    // Named: the store whose owner was slowest to pause, when it is another one
                    // (stores are paused one after another, so its wait used up this lease).
                    let slowest = stores.compactMap { other in
                        other.owner?.acknowledgement.map {
                            (store: other.entry.name, milliseconds: Int64($0 / .milliseconds(1)))
                        }
                    }.max { $0.milliseconds < $1.milliseconds }
                    throw RestoreError.leaseTooShort(store: name, slowest: slowest?.store == name ? nil : slowest)
                }
            }
            // An aside link an earlier attempt left (recovery runs this again) would give the live
            // file a second link, which opening it beneath its folder refuses.
            if case .stores(let work, _) = switching { StoreSwap.dropAsideLink(store.entry, work: work) }
            checked[name] = StoreSwap.Fingerprint(folder.entry(file))
            // Trust, but check: an owner that acknowledged without closing everything, or a process
            // outside the protocol, would keep writing to the old file after the rename. Processes
            // are looked for before the lock (to name them) and after it (a rollback-mode
            // connection holds no lock between transactions; one opened meanwhile is seen).
            let candidates = store.candidates + (store.owner.map { [$0.ownerPID] } ?? [])
            do {
                guards[name] = try StoreGuard(folder, file)
            } catch {
                // Named in the refusal: the processes that hold it (a full look, the pause ends anyway).
                try Self.refuseHolders(file, in: folder, among: nil, paused: store.owner != nil)
                throw error
            }
            try Self.refuseHolders(
                file, in: folder, among: store.fullLook ? nil : candidates, paused: store.owner != nil)
        }
        CrashPoint.reach(.checked)
    }

    /// Refuses when any process but this one has the store, its `-wal`, `-shm` or `-journal` open.
    private static func refuseHolders(_ file: String, in folder: Folder<UserOwned>, among: [Int32]?, paused: Bool)
        throws
    {
        let holders = OpenFiles.holders(of: file, in: folder, among: among)
        guard !holders.isEmpty else { return }
        throw RestoreError.storeBusy(
            store: folder.path(file),
            detail:
                "still open by process\(holders.count == 1 ? "" : "es") \(holders.map(String.init).joined(separator: ", "))\(paused ? " after the pause" : "")"
        )
    }

    /// Undoes phases 1 and 2 after a refusal: guards and locks released, owners resumed. Nothing
    /// in the user's folder was changed; the error says so only when the live databases are
    /// still the files that were checked.
    func refuse(_ error: any Error) -> any Error {
        withdraw()
        for store in renamed where store.entry.method == .swap {
            guard let before = checked[store.entry.name],
                let (folder, file) = try? StoreSwap.live(store.entry.name, in: user)
            else { continue }
            if StoreSwap.Fingerprint(folder.entry(file))?.inode != before.inode {
                return RestoreError.replacedByOthers(
                    store: folder.path(file), reason: Self.reason(error))
            }
        }
        return (error as? ReopenError).map { RestoreError.owner($0) } ?? error
    }

    /// Lets go after phases 1 and 2 without committing: guards released (an empty `-wal` that
    /// taking SQLite's lock created is removed again), locks released, owners resumed. Nothing in
    /// the user's folder was changed.
    func withdraw() {
        releaseGuards(removingCreatedWAL: true)
        locks?.release()
        locks = nil
        // Together, as after a commit: one silent owner keeps no other paused.
        ReopenClient.resume(stores.compactMap(\.owner), timeout: ownerTimeout)
    }

    static func reason(_ error: any Error) -> String {
        var text = (error as? GranaryError)?.description ?? "\(error)"
        if text.hasSuffix("; nothing was changed") { text.removeLast("; nothing was changed".count) }
        return text
    }

    // MARK: Phase 3

    /// The commit point of the whole user (durable).
    func commitRecord() throws {
        guard case .stores(_, let journal) = switching else { return }
        try journal.record(.commit, durable: true)
        CrashPoint.reach(.committed)
    }

    // MARK: Phase 4

    /// What the switch saw that the report should say.
    struct Observations {
        var warnings: [String] = []
        /// Files a paused owner wrote (its store's path, or the companion moved away).
        var writtenWhilePaused: [String] = []
    }

    /// Puts every renamed store's new database in place.
    func switchAll() throws -> Observations {
        var seen = Observations()
        let (work, journal): (RestoreWork, SwapJournal)
        switch switching {
        case .folder(let move):
            try move()
            return seen
        case .stores(let stagedIn, let recordedIn): (work, journal) = (stagedIn, recordedIn)
        }
        let mode = try StoreSwap.folderMode(user)
        for store in renamed {
            let entry = store.entry
            try StoreSwap.prepare(entry, user: user, work: work, guard: guards[entry.name])
            try journal.record(.prepared(entry.name))
            // The new database as it is placed (a rename keeps inode, size and modification time).
            let placed = (try? RestoreWork.parent(of: work.stagedStore(entry.name))).flatMap {
                StoreSwap.Fingerprint($0.0.entry($0.1))
            }
            try StoreSwap.switchIn(entry, user: user, work: work, folderMode: mode)
            let (folder, file) = try StoreSwap.live(entry.name, in: user)
            // From the rename until RESUME is sent, SQLite's own lock keeps every other connection
            // from writing (or reading) the new store: a paused owner that opens it cannot write a
            // byte unseen. What got in before the lock is found below.
            var opened = false
            if store.owner != nil {
                // A process outside the protocol that writes a transaction at a time (granary is
                // rarely alone) holds SQLite's lock for milliseconds: the lock is tried for a
                // moment before the store counts as opened. Its writes land in the new store.
                let deadline = ContinuousClock.now + .milliseconds(500)
                while true {
                    do {
                        newGuards[entry.name] = try StoreGuard(folder, file)
                        break
                    } catch {
                        if ContinuousClock.now >= deadline {
                            opened = true
                            break
                        }
                        usleep(5_000)
                    }
                }
            }
            let now = StoreSwap.Fingerprint(folder.entry(file))
            let written =
                opened
                || (placed != nil
                    && (now?.inode != placed?.inode || now?.size != placed?.size
                        || now?.modified != placed?.modified))
            if written {
                // Someone opened or wrote the new store between its rename and the lock: those
                // writes belong to the new store and stay in it; nothing is moved.
                let why =
                    opened
                    ? "a process had it open right after the switch, before RESUME (SQLite's lock could not be taken)"
                    : "its database file changed after the switch, before RESUME"
                seen.warnings.append(
                    "\(folder.path(file)) was opened or written while its owner was paused: \(why); anything written is in the restored store, at its path (nothing was moved)"
                )
                if store.owner != nil { seen.writtenWhilePaused.append(folder.path(file)) }
            } else {
                // Nobody has the new store open and its database is as placed. A companion there
                // now is one put back by hand (a saved -wal would be applied to the new store), or
                // what a writer of the new store left when it exited without closing (a writer's
                // last close checkpoints and removes its -wal; a crash leaves it, with committed
                // transactions). Neither left in place nor deleted: moved to the kept folder, and
                // the warning says where.
                for (path, kept) in try StoreSwap.keepIntruders(
                    entry, user: user, work: work, sparing: newGuards[entry.name]?.createdWAL)
                {
                    seen.warnings.append(Self.movedAway(path, to: kept))
                    if store.owner != nil && !seen.writtenWhilePaused.contains(folder.path(file)) {
                        seen.writtenWhilePaused.append(folder.path(file))
                    }
                }
            }
            try journal.record(.switched(entry.name))
        }
        return seen
    }

    /// The warning for a companion moved away after the switch: where it is now, and what it may
    /// hold.
    private static func movedAway(_ path: String, to kept: String) -> String {
        if path.hasSuffix("-shm") {
            return
                "\(path) appeared while its owner was paused, beside the new store while nobody had it open and its database was unchanged: it was moved to \(kept), where it stays (nothing deletes it). It is SQLite's shared-memory index, which holds no transactions (SQLite rebuilds it); it was kept only so that nothing is deleted"
        }
        return
            "\(path) appeared while its owner was paused, beside the new store while nobody had it open and its database was unchanged: it was moved to \(kept), where it stays (nothing deletes it). Left in place, SQLite would have applied it to the new store; it may hold transactions a process wrote into the new store before it exited: to get them back, stop the app that owns the store, copy the store and this file beside it (named as the store with the same suffix) into a scratch folder and open the copy with sqlite3"
    }

    private func releaseGuards(removingCreatedWAL: Bool = false) {
        releaseNewGuards()
        for guardian in guards.values { guardian.release(removingCreatedWAL: removingCreatedWAL) }
        guards = [:]
    }

    /// Lets go of the new stores' locks, removing the empty `-wal` taking them created (nobody
    /// else could open the store meanwhile).
    private func releaseNewGuards() {
        for guardian in newGuards.values { guardian.release(removingCreatedWAL: true) }
        newGuards = [:]
    }

    // MARK: Phase 5

    /// Releases the commit locks and tells every owner to resume, then looks for processes that
    /// opened the old files meanwhile before it lets go of SQLite's locks on them. Past the
    /// commit point whatever an owner does is reported, and the restore stands.
    func resumeAll() -> [String] {
        locks?.release()
        locks = nil
        guard case .stores(_, let journal) = switching else {
            // A retire: no owner, and whatever opened a store meanwhile is for its own look after
            // the move (`Retirement.changeSince`). Its folder is not at its name any more: the
            // empty `-wal` taking SQLite's lock created goes again.
            releaseGuards(removingCreatedWAL: true)
            return []
        }
        var warnings: [String] = []
        releaseNewGuards()
        // RESUME goes to every owner first, then their answers are awaited together: an owner
        // that answers late, or not at all, keeps no other store paused, and each pause is its own.
        let owned = stores.compactMap { store in store.owner.map { (name: store.entry.name, owner: $0) } }
        let ended = ReopenClient.endPauses(owned.map(\.owner), timeout: ownerTimeout)
        for ((name, _), result) in zip(owned, ended) {
            switch result {
            case .success(let ended):
                pauses[name] = ended
                switch ended.ending {
                case .resumed: break
                case .late:
                    warnings.append(
                        "restored; the owner of \(name) resumed late (\(Int(ended.reopening.timeInterval * 1000)) ms after RESUME)"
                    )
                case .expired:
                    warnings.append(
                        "restored; the owner of \(name) reopened by itself (it sent EXPIRED): its lease had run out before it answered RESUME"
                    )
                case .unanswered:
                    warnings.append(
                        "restored; the owner of \(name) did not answer RESUME within \(Int(ended.reopening.timeInterval)) s (past the end of its lease): granary closed the connection, which makes it reopen the store"
                    )
                case .gone:
                    warnings.append(
                        "restored; the owner of \(name) closed its connection without answering RESUME: it exited or crashed in the middle of the reopen. The store holds the restored content at its path (the replaced content is in the safety archive this restore names), and no process serves it now: start the app that owns it again, which opens the restored store"
                    )
                }
            case .failure(let error):
                // The error names the owner (by the store's path) itself.
                warnings.append("restored; \(error.description)")
            }
        }
        try? journal.record(.resumed)
        CrashPoint.reach(.resumed)
        warnings += lateOpeners()
        releaseGuards()
        return warnings
    }

    /// Processes that opened a replaced file by name between the checks and the rename, outside
    /// the protocol. SQLite's lock on the replaced inode, still held, keeps them from reading or
    /// writing it; once it is let go, such a process takes the replaced database for the store and
    /// opens `-wal` and `-shm` *by name*: the new store's. In WAL mode SQLite does not check that
    /// the database file moved before it writes (a rollback journal's writes are refused with
    /// `SQLITE_READONLY_DBMOVED`), so its transactions append frames built from the replaced
    /// database's pages and free-list to the new store's WAL, beside its owner's: two writers
    /// that do not agree on which pages are free, and a store that fails integrity_check ("2nd
    /// reference to page"; the soak saw it). So the lock is kept for as long as any of them
    /// holds the replaced inode: a process blocked on the lock gets `SQLITE_BUSY` when its busy
    /// timeout ends, and one that opens per transaction then opens the new store by name. The
    /// owners were resumed before: the wait costs them nothing. Up to ``lateOpenerLimit`` (at
    /// least the owner timeout); one that still holds it then (a connection kept open, retrying
    /// on the same inode) is named, for the admin to stop.
    private func lateOpeners() -> [String] {
        var warnings: [String] = []
        let limit = max(ownerTimeout, Self.lateOpenerLimit)
        for store in renamed {
            guard let old = checked[store.entry.name], let guardian = guards[store.entry.name] else { continue }
            let target: Set<OpenFiles.Identity> = [OpenFiles.Identity(device: old.device, inode: old.inode)]
            var holders = OpenFiles.holders(of: target, among: nil)
            let deadline = ContinuousClock.now + limit
            while !holders.isEmpty && ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.05)
                holders = OpenFiles.holders(of: target, among: nil)
            }
            if !holders.isEmpty {
                warnings.append(
                    "process \(holders.map(String.init).joined(separator: ", ")) opened \(guardian.store) while it was being replaced, outside the reopen protocol, and still held the replaced file after \(limit): stop it now (its next write would put the replaced database's pages into the new store's -wal)"
                )
            }
        }
        return warnings
    }

    /// How long a process that opened a replaced store during the switch may take to let go of
    /// it (a busy timeout of a few seconds, twice: SQLite's open and the first transaction).
    static let lateOpenerLimit: Duration = .seconds(15)

    /// Lets go of everything without resuming anyone (the owners resume on their own when the
    /// connections close).
    func abandon() {
        releaseGuards()
        locks?.release()
        locks = nil
    }
}
