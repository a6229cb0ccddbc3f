import ArgumentParser
import Foundation
import GranaryKit

struct BackupCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Snapshot each user's stores into one new archive per user.",
        discussion: """
            Each store is copied with SQLite's backup API while its owner keeps writing, checked, and packed \
            with a SHA-256 manifest into <repo>/<user>/<UTC stamp>[-label].tar.zst, published only once \
            complete and synced. Silent on success without a terminal; -v prints each archive with where the \
            time went (snapshot, check and hash, pack, sync). \
            A user whose folder holds no store yet (nothing unreadable or passed over either) has nothing to back \
            up: no archive, no failure (exit 0). --all passes over lost+found and hidden entries of the root, and \
            the users --exclude and the configuration's exclude name. \
            Exit codes: 0 all backed up, 1 some users failed (--all or several users; when every one failed for one reason, that reason's code), 65 a store failed its \
            check, 66 unknown user, 74 I/O error (disk full), 75 lock held, 129 or 130 interrupted. \
            With mirrors ([[mirror]] in the configuration, or --mirror), each new archive is published in the \
            repository first, then sent to every mirror, never under a user's lock; a mirror that fails is reported \
            on its own line with its own code, 74 or 75 (the archive stays in the repository, granary sync sends it \
            later), is not tried again in the run (the users after it report it "failed earlier in this run"), and \
            the run exits 1. With several users and a local repository, the archives are sent one at a time beside \
            the next users' backups, so no mirror, slow or dead, delays a local backup (with a remote repository, \
            each user's archive is sent before the next user's backup starts); a dead mirror costs its time bound \
            once per run.
            """
    )
    static let cleansUpOnSignals = true

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Users to back up.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "Back up every user under the root.")
    var all = false

    @Option(help: "The archive's compression.")
    var compression: Compression?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Compression level: zstd 1-19, gzip and xz 0-9 (default: zstd 3, gzip and xz 6).", valueName: "n"))
    var level: Int?

    @Option(help: "The check run on each snapshot (default: quick).")
    var check: CheckMode?

    @Option(help: "A label added to the archive name (letters, digits, - and _).")
    var label: String?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Users backed up at the same time, 1-64 (default: 1).", valueName: "n"))
    var jobs: Int?

    @OptionGroup var lock: LockOptions

    @Flag(help: "After each successful backup, prune the user's archives with the configured [retention] policy.")
    var prune = false

    @Flag(
        help:
            "Write a delta (the pages changed since the newest backup) when a base fits, else a full with page hashes (delta = true in the configuration does the same)."
    )
    var delta = false

    @Flag(help: "With --delta or delta = true: write a full (with page hashes) whatever the delta policy says.")
    var full = false

    @Flag(help: "Write a full without page hashes, as without --delta, whatever delta = in the configuration says.")
    var noDelta = false

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Also send each new archive to this repository (repeatable; replaces the configured mirrors).",
            valueName: "location"))
    var mirror: [String] = []

    /// Set by the run itself, never by a person: this process is the worker that backs up this
    /// one user for a run over several (BackupWorkers, docs/security.md).
    @Option(name: .customLong(BackupWorkers.flag), help: .private)
    var workerUser: String?
    /// Set by the run itself: a mirror that failed for an earlier user of the run (BackupWorkers).
    @Option(name: .customLong(BackupWorkers.failedFlag), help: .private)
    var workerFailedMirror: [String] = []
    @Option(
        help: ArgumentHelp(
            "With --all, leave this user out (repeatable; adds to exclude in the configuration).", valueName: "user"),
        completion: .custom(Completions.users))
    var exclude: [String] = []

    func checkArguments() throws {
        if users.isEmpty && !all { throw ValidationError("name users to back up, or pass --all") }
        if !exclude.isEmpty && !all { throw ValidationError("--exclude goes with --all") }
        if !users.isEmpty && all { throw ValidationError("pass users or --all, not both") }
        if let label, !ArchiveName.isValidLabel(label) {
            throw ValidationError("invalid label \(label.debugDescription)")
        }
        if let label, ArchiveName.reservedLabels.contains(label) {
            throw ValidationError("the label \(label) is granary's own (safety and final archives); choose another")
        }
        if delta && noDelta { throw ValidationError("pass --delta or --no-delta, not both") }
        if full && noDelta {
            throw ValidationError("--full goes with deltas on; with --no-delta every archive is a full already")
        }
        try ArgumentValues.check(jobs, "--jobs", within: SettingLimits.jobs)
        // The compression's own range first (zstd 1 to 19, gzip and xz 0 to 9), when it is known.
        if let compression { try ArgumentValues.check(level: level, compression: compression) }
        if let level, !SettingLimits.levels.contains(level) {
            throw ValidationError("--level \(level) is out of range: zstd takes 1 to 19, gzip and xz 0 to 9")
        }
    }

    /// A remote repository's (and mirrors') listings asked once a moment
    /// (``Repository/rememberListings()``): only where no other process of this run writes there.
    private func remember(_ repository: any Repository, _ mirrors: [any Repository]) {
        repository.rememberListings()
        for mirror in mirrors { mirror.rememberListings() }
    }

    func execute(_ console: Console) throws -> BackupResult {
        let settings = try global.settings()
        let root = try settings.requireRoot()
        let repository = try settings.requireRepository()
        if prune && settings.retention.value.isEmpty {
            throw ValidationError("--prune needs a retention policy: set [retention] in the configuration file")
        }
        var options = BackupOperation.Options()
        options.compression = compression ?? settings.compression.value
        // A level given without --compression is checked against the configured compression.
        options.level = level ?? (compression == nil ? settings.level.value : nil)
        try ArgumentValues.check(level: options.level, compression: options.compression)
        options.check = check ?? settings.check.value
        options.bytesPerUser = settings.bytesPerUser.value
        options.label = label
        // The run's settings: the configured owner timeout holds for the recovery a backup runs first.
        options.context = lock.context(settings.context)
        // Issue 35: page hashes, and deltas when a base fits (--delta, or delta = true; the policy's
        // knobs from the configuration).
        if delta || (settings.delta.value && !noDelta) {
            var policy = settings.deltaPolicy
            policy.forceFull = full
            // `--check quick` or `--check full` runs that check on every delta (phase 2's own
            // check, `check: pages`, only with the check left to its default).
            if check != nil { policy.maxPagesChecks = 0 }
            options.delta = policy
            // Issue 51, phase 2: while `follow` runs, only the pages it saw change are hashed.
            options.followedPages = FollowedPages.source()
        } else if full {
            throw ValidationError(
                "--full goes with --delta or delta = true in the configuration (without either every archive is a full)"
            )
        }
        var ids: [UserID] = []
        var ignored: [Root.Ignored] = []
        let mirrors = try settings.mirrorRepositories(flags: mirror)
        if let workerUser {
            remember(repository, mirrors)
            // A worker: this one user, the result to the parent (throws ExitCode(0) once sent).
            let reporter = UserWorkers.Reporter()
            let operation = BackupOperation(
                root: root, repository: repository, mirrors: mirrors, options: options,
                progress: console.showsProgress ? reporter : nil)
            try BackupWorkers.serve(
                operation, user: workerUser, failedEarlier: workerFailedMirror, reporter: reporter)
        }
        if all { (ids, ignored) = try root.scan() } else { ids = try UserID.named(users) }
        let excluded = Set(try UserID.named(exclude))
        for id in excluded where !ids.contains(id) {
            throw UserError.notFound(id.rawValue, root: root.path)
        }
        ids.removeAll { excluded.contains($0) }
        // The configuration's `exclude`: a name with no folder is no error (the user may be gone).
        if all { ids.removeAll { settings.exclude.value.contains($0.rawValue) } }
        if all && ids.isEmpty && excluded.isEmpty && settings.exclude.value.isEmpty {
            throw BackupError.noUsers(root: root.path)
        }
        // One user in this process: its listings are asked once a moment. Several: each is backed
        // up by a worker process, whose archives this one (pruning after them) must see.
        if ids.count == 1 { remember(repository, mirrors) }
        let progress = console.showsProgress ? ProgressBar(console) : nil
        let operation = BackupOperation(
            root: root, repository: repository, mirrors: mirrors, options: options, progress: progress)
        let policy = prune ? settings.retention.value : nil
        if ids.count > 1 {
            // Several users: each in a worker process of its own, so that a crash-class fault one
            // user's content causes (SIGBUS on a truncated -shm, a trap) fails that user only.
            let users = BackupWorkers.run(
                operation, users: ids, jobs: jobs ?? settings.jobs.value, prune: policy, progress: progress)
            progress?.clear()
            try Interruption.check()
            return BackupResult(users: users, ignored: ignored, root: root.path)
        }
        let outcomes = try BackupRun.run(operation, users: ids, jobs: jobs ?? settings.jobs.value, prune: policy)
        progress?.clear()

        var users: [BackupResult.User] = []
        for outcome in outcomes {
            if let error = outcome.error as? InterruptedError { throw error }
            // One user named: its failure is the run's (the error document under --json).
            if ids.count == 1, let error = outcome.error ?? outcome.pruneError, !BackupResult.isNothing(error) {
                throw error
            }
            users.append(BackupResult.User(outcome))
        }
        return BackupResult(users: users, ignored: ignored, root: root.path)
    }
}

/// `granary backup`: one entry per user, with its archive or its error.
struct BackupResult: CommandResult {
    struct Store: Codable {
        let name: String
        @Null var nameBase64: String?
        /// `wal` or `rollback`.
        let journalMode: String
        let integrity: String
    }

    /// Codable: a worker process sends its user's entry to the parent (BackupWorkers).
    struct User: Codable {
        let id: String
        var ok: Bool
        @Null var archive: String?
        @Null var size: Int64?
        @Null var seconds: Double?
        @Null var stages: BackupOperation.Stages?
        /// `yielded`, `raised` or `normal` (how the CPU work was scheduled).
        @Null var priority: String?
        @Null var stores: [Store]?
        /// Entries of the user's folder the backup passed over, with why (said, not failed).
        @Null var skipped: [Skipped]?
        /// What the backup met that did not stop it (a sparse store or attachment).
        @Null var warnings: [String]?
        /// With `--prune`: the user's archives after the backup, each kept (and by which rules) or removed.
        @Null var prune: PruneResult.Plan?
        /// The new archive on each mirror (null without mirrors).
        @Null var mirrors: [Mirror]?
        @Null var error: Failure?
        /// With `--delta` (absent without): what was written, and why a full.
        var delta: Delta?
        /// The user's folder holds no store yet: nothing was backed up, and that is no failure.
        var nothingToBackUp = false

        /// A user that failed before it had an outcome (its worker ended without one).
        init(id: String, failure: Failure) {
            self.id = id
            ok = false
            archive = nil
            size = nil
            seconds = nil
            stages = nil
            priority = nil
            stores = nil
            skipped = nil
            warnings = nil
            prune = nil
            mirrors = nil
            error = failure
        }

        /// What a worker sent (`prune` is the parent's business: a worker sends null).
        init(from decoder: any Decoder) throws {
            let values = try decoder.container(keyedBy: CodingKeys.self)
            id = try values.decode(String.self, forKey: .id)
            ok = try values.decode(Bool.self, forKey: .ok)
            archive = try values.decodeIfPresent(String.self, forKey: .archive)
            size = try values.decodeIfPresent(Int64.self, forKey: .size)
            seconds = try values.decodeIfPresent(Double.self, forKey: .seconds)
            stages = try values.decodeIfPresent(BackupOperation.Stages.self, forKey: .stages)
            priority = try values.decodeIfPresent(String.self, forKey: .priority)
            stores = try values.decodeIfPresent([Store].self, forKey: .stores)
            skipped = try values.decodeIfPresent([Skipped].self, forKey: .skipped)
            warnings = try values.decodeIfPresent([String].self, forKey: .warnings)
            prune = nil
            mirrors = try values.decodeIfPresent([Mirror].self, forKey: .mirrors)
            error = try values.decodeIfPresent(Failure.self, forKey: .error)
            delta = try values.decodeIfPresent(Delta.self, forKey: .delta)
            nothingToBackUp = try values.decodeIfPresent(Bool.self, forKey: .nothingToBackUp) ?? false
        }

        init(_ outcome: BackupRun.Outcome) {
            id = outcome.user.rawValue
            let result = outcome.result
            archive = result?.archive
            size = result?.size
            seconds = result?.seconds
            stages = result?.stages
            priority = result?.priority.rawValue
            stores = result?.stores.map {
                Store(
                    name: $0.name, nameBase64: JSONName.base64($0.name), journalMode: JournalMode.name($0.journalMode),
                    integrity: $0.integrity)
            }
            skipped = result?.skipped.map { Skipped(name: $0.name, reason: $0.reason) }
            warnings = result?.warnings
            prune = outcome.pruned.map { PruneResult.Plan($0) }
            mirrors = result.flatMap { $0.mirrors.isEmpty ? nil : $0.mirrors.map(Mirror.init) }
            if let failure = outcome.error, BackupResult.isNothing(failure) {
                // A user whose app has not written yet: no archive, and no failure.
                nothingToBackUp = true
                ok = true
                self.error = nil
                delta = nil
                return
            }
            let failure: (any GranaryError)? =
                outcome.error ?? outcome.pruneError
                ?? (result == nil ? UnexpectedError(description: "\(outcome.user): no result") : nil)
            ok = failure == nil
            error = failure.map(Failure.init)
            delta = result?.delta.map(Delta.init)
        }
    }

    /// `backup --delta`'s outcome for one user.
    struct Delta: Codable {
        /// `delta` or `full`.
        let kind: String
        @Null var base: String?
        /// Why a full was written.
        @Null var reason: String?
        let changedPages: Int
        let pages: Int
        /// Issue 51, phase 2: the stores whose pages came from `follow`'s record (only the pages
        /// it saw change were hashed), those pages' count, and why a store's were all hashed.
        var followedStores: Int?
        var candidatePages: Int?
        var followedFallback: String?
        /// The stores whose candidate pages were read alone, and why a store's copy went through
        /// SQLite's backup API after all.
        var pagesReadStores: Int?
        var backupAPIReason: String?
        /// The stores checked by the pages read alone (`check: pages`), and why a store with
        /// follow's candidates had the configured check after all.
        var pagesCheckedStores: Int?
        var fullCheckReason: String?

        init(_ outcome: DeltaOutcome) {
            kind = outcome.isDelta ? "delta" : "full"
            base = outcome.base
            reason = outcome.reason
            changedPages = outcome.changedPages
            pages = outcome.pages
            followedStores = outcome.followedStores
            candidatePages = outcome.candidatePages
            followedFallback = outcome.followedFallback
            pagesReadStores = outcome.pagesReadStores
            backupAPIReason = outcome.backupAPIReason
            pagesCheckedStores = outcome.pagesCheckedStores
            fullCheckReason = outcome.fullCheckReason
        }
    }

    typealias Skipped = JSONName.NamedReason

    /// A new archive sent to a mirror, or why it was not.
    struct Mirror: Codable, Sendable {
        let repository: String
        let ok: Bool
        @Null var archive: String?
        let seconds: Double
        @Null var error: Failure?
        /// Issue 35: the links of a delta's chain the mirror lacked, sent before it (oldest first).
        let sentFirst: [String]

        init(_ upload: BackupOperation.MirrorUpload) {
            repository = upload.location
            ok = upload.error == nil
            archive = upload.archive
            seconds = upload.seconds
            sentFirst = upload.sentFirst
            error = upload.error.map { MirrorUploadFailed(mirror: upload.location, error: $0) }.map(Failure.init)
        }
    }

    let users: [User]
    /// With `--all`: the entries of the root that are not users, with why (said, not failed).
    let ignored: [Skipped]
    private let root: String
    /// Entries of `ignored` any root may hold (lost+found, hidden ones): listed, not warned about.
    private let routine: Set<String>

    enum CodingKeys: String, CodingKey { case users, ignored }

    init(users: [User], ignored: [Root.Ignored], root: String) {
        self.users = users
        self.ignored = ignored.map { Skipped(name: $0.name, reason: $0.reason) }
        self.root = root
        routine = Set(ignored.filter(\.routine).map(\.name))
    }

    /// Whether `error` says a user has nothing to back up yet (no failure).
    static func isNothing(_ error: any Error) -> Bool {
        if case .nothingToBackUp = error as? BackupError { return true }
        return false
    }

    /// 1 when some users failed; when every user failed, and for one reason, that reason's
    /// code (all locks held: 75, the disk full: 74), as a backup of one user exits.
    var status: ExitStatus {
        let failed = users.compactMap(\.error)
        if !users.isEmpty, failed.count == users.count, let code = failed.first?.code,
            failed.allSatisfy({ $0.code == code }), let status = ExitStatus(rawValue: code)
        {
            return status
        }
        return problems.isEmpty ? .success : .partialFailure
    }

    /// Each user's failure, and each new archive a mirror did not take (the archive is in the
    /// repository; granary sync sends it later).
    var problems: [Failure] {
        users.flatMap { user in
            (user.error.map { [$0] } ?? [])
                + (user.mirrors ?? []).compactMap(\.error).map {
                    Failure(
                        code: .partialFailure, message: "\(user.id): \($0.message)",
                        hint: $0.hint.map { Hint.text($0) + "; then granary sync \(ShellWord.quote(user.id))" }
                            ?? "granary sync \(ShellWord.quote(user.id)) sends it")
                }
        }
    }

    /// Every entry a scan passed over is said: a store must not be left out in silence. So is a
    /// sparse file.
    var notes: [String] {
        ignored.filter { !routine.contains($0.name) }.map { "warning: passed over \(root)/\($0.name): \($0.reason)" }
            + users.flatMap { user in
                (user.skipped ?? []).map { "warning: \(user.id): passed over \($0.name): \($0.reason)" }
                    + (user.warnings ?? []).map { "warning: \(user.id): \($0)" }
            }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard detail.summaries else { return }
        for user in users {
            if user.nothingToBackUp { text.line("\(bold: user.id): nothing to back up (no store yet)") }
            guard let archive = user.archive, let size = user.size, let stores = user.stores else { continue }
            text.line(
                "\(bold: user.id): \(PathText.lastComponent(archive)) (\(Format.bytes(size)), \(stores.count) store\(stores.count == 1 ? "" : "s"), \(String(format: "%.1f", user.seconds ?? 0)) s)"
            )
            if let delta = user.delta {
                text.line(
                    delta.kind == "delta"
                        ? "  delta of \(delta.base ?? "?"): \(delta.changedPages) of \(delta.pages) pages"
                        : "  full: \(delta.reason ?? "")")
                if detail.verbose, delta.kind == "delta" {
                    if let stores = delta.followedStores, stores > 0 {
                        text.line(
                            "  pages hashed: \(delta.candidatePages ?? 0), those follow saw change in \(stores) store\(stores == 1 ? "" : "s")"
                        )
                    }
                    if let why = delta.followedFallback { text.line("  every page hashed: \(why)") }
                    if let stores = delta.pagesReadStores, stores > 0 {
                        text.line("  only those pages read in \(stores) store\(stores == 1 ? "" : "s")")
                    }
                    if let why = delta.backupAPIReason { text.line("  every page copied: \(why)") }
                    if let stores = delta.pagesCheckedStores, stores > 0 {
                        text.line(
                            "  check: pages (only those pages checked) in \(stores) store\(stores == 1 ? "" : "s")")
                    }
                    if let why = delta.fullCheckReason { text.line("  check as configured: \(why)") }
                }
            }
            if detail.verbose, let s = user.stages {
                text.line(
                    "  snapshot \(Format.duration(s.snapshot)), check and hash \(Format.duration(s.checkAndHash)), pack \(Format.duration(s.pack)), sync \(Format.duration(s.sync)); CPU \(user.priority ?? "normal")"
                )
            }
            for mirror in user.mirrors ?? [] where !mirror.sentFirst.isEmpty {
                text.line(
                    "  sent to \(mirror.repository) first, the chain it lacked: \(mirror.sentFirst.joined(separator: ", "))"
                )
            }
            for mirror in user.mirrors ?? [] where mirror.ok && detail.verbose {
                text.line("  sent to \(mirror.archive ?? mirror.repository) (\(Format.duration(mirror.seconds)))")
            }
            if let plan = user.prune {
                let removed = plan.archives.filter { !$0.keep }
                text.line("  pruned: kept \(plan.archives.count - removed.count), removed \(removed.count)")
                if detail.verbose { plan.render(&text, dryRun: false) }
            }
        }
    }
}

/// A new archive a mirror did not take.
struct MirrorUploadFailed: GranaryError, CommandLineError {
    let mirror: String
    let error: any GranaryError
    var description: String { "the new archive did not reach the mirror \(mirror): \(error.description)" }
    /// The mirror's own failure (74, 75, …): the run as a whole exits 1.
    var status: ExitStatus { error.exitStatus }
    var hint: String? { error.advice }
}
