import Foundation

/// What one attempt's snapshots hand the delta's plan (``DeltaAttempt/run(in:snapshot:)``):
/// the stores as the manifest describes them, the files to pack, each store's recorder (nil
/// without one), the live stores' file identities and what the base told before the copy.
protocol DeltaSnapshots {
    var stores: [Manifest.Store] { get }
    var files: [ArchiveBuilder.Member] { get }
    var pageHashes: [PageRecorder?] { get }
    var liveFiles: [String] { get }
    var started: DeltaBackup.Start? { get }
}

/// A backup's way to a delta archive, or to a full (issue 35, `backup --delta`): the decision
/// the backup leaves to the delta layer, in one place.
///
/// 1. With a policy and copies that may be discarded, a first attempt reads the base before any
///    store is copied (``DeltaBackup/start(policy:user:repository:storeNames:work:label:created:cache:liveFiles:)``)
///    and copies each WAL store a delta may follow without its file (``NoCopy``,
///    ``DiscardedCopy``); then ``DeltaBackup/plan(policy:user:repository:stores:files:work:label:created:recorded:cache:liveFiles:started:secondCopy:)``
///    decides: a delta on the base, or a full and why.
/// 2. When a full is needed after all, the first attempt throws ``NoCopyFallback``: its folder is
///    removed and the stores are copied again, for real, with snapshot files, and planned again
///    (the reason then says that the stores were copied twice).
/// 3. Without a policy (a plain full, a final or safety archive) the stores are copied once and
///    nothing is planned.
///
/// The copying itself is the caller's (`BackupOperation` snapshots the user's stores): it is
/// handed a ``Copies`` and returns what it took.
struct DeltaAttempt {
    /// The delta policy, or nil: a plain full (no page hashes).
    var policy: DeltaPolicy?
    /// Whether a WAL store's copy may be discarded (false: every store is snapshotted into a
    /// file, as before `--delta` learned to discard).
    var mayDiscard: Bool
    var user: UserID
    var repository: any Repository
    /// The backup's label (`--label`); a delta's is this one ending in `-delta`.
    var label: String?
    /// The page-hash cache's folder (``PageHashCache``).
    var cache: String

    /// How the caller copies the stores in one attempt.
    struct Copies {
        /// The folder the snapshots (and the base's lists) go in.
        var scratch: String
        /// The first attempt of a delta: the base is read before the copy, and a WAL store's
        /// copy is discarded when a delta may follow.
        var discarding: Bool
        /// Why the stores are copied again (the first attempt's ``NoCopyFallback``), or nil.
        var again: String?
    }

    /// What the attempt that counted took and decided.
    struct Outcome<Taken> {
        /// The caller's snapshots.
        var taken: Taken
        /// The delta's plan (a delta, or a full with page hashes and why), nil without a policy.
        var plan: DeltaBackup.Plan?
        /// The new archive's stamp (``Repository/nextStamp(for:)``), taken after the copy.
        var created: Date
        /// Why the stores were copied a second time, or nil.
        var copiedAgain: String?
    }

    /// Copies the stores (`snapshot`, once or twice, in `work` or a folder in it) and plans the
    /// archive.
    /// Invariant D12 (docs/delta-invariants.md).
    func run<Taken: DeltaSnapshots>(in work: String, snapshot: (Copies) throws -> Taken) throws -> Outcome<Taken> {
        guard policy != nil && mayDiscard else {
            return try attempt(Copies(scratch: work, discarding: false, again: nil), snapshot)
        }
        let first = work + "/delta"
        try FileSystem.makeDirectory(first)
        do {
            return try attempt(Copies(scratch: first, discarding: true, again: nil), snapshot)
        } catch let fallback as NoCopyFallback {
            // Invariant D4 (docs/delta-invariants.md)
            FileSystem.removeTree(first)
            return try attempt(Copies(scratch: work, discarding: false, again: fallback.reason), snapshot)
        }
    }

    private func attempt<Taken: DeltaSnapshots>(
        _ copies: Copies, _ snapshot: (Copies) throws -> Taken
    ) throws -> Outcome<Taken> {
        let taken = try snapshot(copies)
        let created = try repository.nextStamp(for: user)
        let plan = try policy.map { policy in
            try DeltaBackup.plan(
                policy: policy, user: user, repository: repository, stores: taken.stores,
                files: taken.files.map { DeltaBackup.File(source: $0.source, file: $0.file) },
                work: copies.scratch,
                label: label, created: created, recorded: taken.pageHashes,
                cache: cache, liveFiles: taken.liveFiles, started: taken.started,
                secondCopy: copies.again)
        }
        return Outcome(taken: taken, plan: plan, created: created, copiedAgain: copies.again)
    }

    /// `backup --delta` of a WAL store (issue 35): the copy is made without its file
    /// (``DiscardedCopy``). The `granary-tee` VFS hands every page to the recorder and writes only
    /// page 1 (SNAPSHOT_TEE_FCNTL_DISCARD); the recorder keeps the pages that differ from the
    /// base. The check (`inTransaction`) runs on the live store in a read transaction on the state
    /// the copy reads: beside the copy on a second connection, or after it in the copy's own (the
    /// backup API reuses a read transaction that is open on its source). A store in another
    /// journal mode is copied as before (a real file).
    struct NoCopy {
        /// The base's page size and journal mode of this store: another one needs a full
        /// (``NoCopyFallback``, before anything is copied).
        var pageSize: Int
        var journalMode: String
        /// The base's `.pages` file of this store, and where the change log goes.
        var basePages: String
        var log: String
        /// More changed pages than this gives up (the user's budget left: the backup is a full,
        /// and a full needs a real copy).
        var maxChanged: Int
        /// The user's time across stores, charged with the check (as a snapshot's check is).
        var account: ContentAccount
        /// Runs on a connection to the live store inside a read transaction on the copied state,
        /// on another thread than the copy's when it runs beside it.
        var inTransaction: (Database) throws -> Void
        /// Phase 2 (issue 51): follow's record of this store, or nil (every page is hashed).
        var followed: FollowedStore? = nil
        /// Phase 2's check: when the pages read are checked alone instead of the configured
        /// check, the run of such deltas this one makes (``DeltaBackup/Base/pagesCheck(of:)``), or
        /// why the configured check runs; nil: the configured check, nothing to say.
        var pagesCheck: Swift.Result<Int, FollowedFallback>? = nil
        /// With ``pagesCheck``: runs instead of ``inTransaction``, in the copy's read transaction,
        /// given what ``PageCheck`` found of the pages phase 2 read (the store described with it).
        var checkedByPages: ((Database, PagesChecked) throws -> Void)? = nil
    }

    /// What the proportional check of a phase-2 delta found (``PageCheck``): the first problem of
    /// the pages it read, or nil.
    struct PagesChecked {
        var problem: String?
    }
}
