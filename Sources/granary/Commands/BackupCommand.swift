import ArgumentParser
import Foundation
import GranaryKit

extension Compression: ExpressibleByArgument {}
extension CheckMode: ExpressibleByArgument {}

struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Snapshot each user's stores into one new archive per user.",
        discussion: """
            Exit codes: 0 all backed up, 1 some users failed (--all or several users), 65 a store failed its \
            check, 66 unknown user, 74 I/O error (disk full), 75 lock held, 130 interrupted. With -v each \
            archive is printed with where the time went (snapshot, check and hash, pack, sync); --json has \
            the same as "stages". In a .tar.zst whose first store is a WAL store of 64 MiB or more, that store is compressed while \
            SQLite's backup API is still copying it. The file then starts with a small zstd frame (the \
            manifest, the first store's header and page 1) and a zstd skippable frame, which zstd, tar --zstd \
            and libarchive pass over: the tar inside is the same. Compressing, checking and hashing the \
            snapshots yields the CPU to every other program (SCHED_IDLE; the snapshot itself does not), and goes \
            back to normal priority when other load leaves it no CPU for a second; --json says which \
            ("priority": yielded, raised or normal). GRANARY_YIELD=0 turns this off. \
            With mirrors ([[mirror]] in the configuration, or --mirror), each new archive is published in the \
            repository first, then sent to every mirror; a mirror that fails is reported on its own line (the \
            archive stays in the repository, granary sync sends it later) and the run exits 1.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Users to back up.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "Back up every user under the root.")
    var all = false

    @Option(help: "zstd, gzip, xz or none.")
    var compression: Compression?

    @Option(help: "Compression level (zstd 1-19, default 3).")
    var level: Int?

    @Option(help: "Check each snapshot: quick (default), full or none.")
    var check: CheckMode?

    @Option(help: "A label added to the archive name (letters, digits, - and _).")
    var label: String?

    @Option(help: "Users backed up at the same time.")
    var jobs: Int?

    @Option(name: .customLong("lock-timeout"), help: "Seconds to wait for another run on the same user.")
    var lockTimeout: Double?

    @Flag(help: "After each successful backup, prune the user's archives with the configured [retention] policy.")
    var prune = false

    @Option(name: .customLong("mirror"), help: ArgumentHelp("Also send each new archive to this repository (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    func validate() throws {
        if users.isEmpty && !all { throw ValidationError("name users to back up, or pass --all") }
        if !users.isEmpty && all { throw ValidationError("pass users or --all, not both") }
        if let label, !ArchiveName.isValidLabel(label) { throw ValidationError("invalid label \(label.debugDescription)") }
        if let label, ArchiveName.reservedLabels.contains(label) {
            throw ValidationError("the label \(label) is granary's own (safety and final archives); choose another")
        }
        if let jobs, jobs < 1 { throw ValidationError("--jobs must be at least 1") }
        if let lockTimeout, lockTimeout < 0 { throw ValidationError("--lock-timeout must not be negative") }
    }

    func run() throws {
        Interruption.installHandlers()
        let console = global.console()
        let settings = try global.settings()
        let root = try settings.requireRoot()
        let repository = try settings.requireRepository(forWriting: true)
        if prune && settings.retention.value.isEmpty {
            throw ValidationError("--prune needs a retention policy: set [retention] in the configuration file")
        }
        var options = BackupOperation.Options()
        options.compression = compression ?? settings.compression.value
        options.level = level ?? settings.level.value
        options.check = check ?? settings.check.value
        options.label = label
        options.lockTimeout = lockTimeout.map { .milliseconds(Int64($0 * 1000)) } ?? settings.lockTimeout.value
        let ids = all ? try root.scan().users : try users.map { (id) throws(UserError) in try UserID(id) }
        if all && ids.isEmpty { throw BackupError.noUsers(root: root.path) }
        let progress = console.isTerminal && !global.quiet && !global.json ? ProgressBar() : nil
        let mirrors = try settings.mirrorRepositories(flags: mirror)
        let operation = BackupOperation(root: root, repository: repository, mirrors: mirrors, options: options, progress: progress)
        let outcomes = BackupRun.run(operation, users: ids, jobs: jobs ?? settings.jobs.value)
        progress?.clear()

        var failures: [GranaryError] = []
        for outcome in outcomes {
            if let result = outcome.result {
                // Every entry the scan passed over is said (a store must not be left out in silence).
                if !global.quiet && !global.json {
                    for skipped in result.skipped { console.error(BackupWarning(user: result.user, skipped: skipped)) }
                }
                if prune {
                    // The policy runs under the user's lock, after the new archive is published.
                    do {
                        _ = try ArchiveRemoval.prune(
                            user: result.user, repository: repository, policy: settings.retention.value, root: root,
                            lockTimeout: options.lockTimeout)
                    } catch let error as GranaryError {
                        failures.append(error)
                        console.error(error)
                    }
                }
                if (console.isTerminal || global.verbose) && !global.json {
                    console.info("\(result.user): \(result.archive) (\(Format.bytes(result.size)), \(result.stores.count) store\(result.stores.count == 1 ? "" : "s"), \(String(format: "%.1f", result.seconds)) s)")
                    if global.verbose {
                        let s = result.stages
                        console.info(
                            "  snapshot \(Format.duration(s.snapshot)), check and hash \(Format.duration(s.checkAndHash)), "
                                + "pack \(Format.duration(s.pack)), sync \(Format.duration(s.sync)); CPU \(result.priority.rawValue)")
                    }
                }
                for upload in result.mirrors {
                    if let error = upload.error {
                        failures.append(error)
                        if !global.json { console.error(MirrorUploadFailed(user: result.user.rawValue, mirror: upload.location, error: error)) }
                    } else if global.verbose && !global.json {
                        console.info("  sent to \(upload.archive ?? upload.location) (\(Format.duration(upload.seconds)))")
                    }
                }
            } else if let error = outcome.error {
                failures.append(error)
                if error is InterruptedError { console.fail(error) }
                if ids.count > 1 { console.error(error) }
            }
        }
        if global.json { console.json(BackupDocument(outcomes)) }
        if failures.isEmpty { return }
        if ids.count == 1, let error = failures.first, outcomes.first?.result == nil { console.fail(error) }
        throw ExitCode(ExitStatus.partialFailure.rawValue)
    }
}

/// A warning for an entry of a user's folder that a backup passed over (printed, not failed).
struct BackupWarning: GranaryError {
    let user: UserID
    let skipped: UserFolder.Skipped
    var description: String { "warning: \(user): passed over \(skipped.name): \(skipped.reason)" }
    var status: ExitStatus { .success }
}

/// `granary backup --json`: format version 1.
struct BackupDocument: Encodable {
    struct Store: Encodable {
        let name: String
        let journalMode: String
        let integrity: String
    }

    struct User: Encodable {
        let id: String
        let ok: Bool
        let archive: String?
        let size: Int64?
        let seconds: Double?
        let stages: BackupOperation.Stages?
        /// "yielded", "raised" or "normal" (see CPUYield).
        let priority: String?
        let stores: [Store]?
        /// Entries of the user's folder the backup passed over, with why.
        let skipped: [Skipped]?
        let error: String?
        let exitCode: Int32?
        /// The new archive on each mirror (absent without mirrors).
        let mirrors: [Mirror]?
    }

    struct Mirror: Encodable {
        let repository: String
        let ok: Bool
        let archive: String?
        let seconds: Double
        let error: String?
        let exitCode: Int32?
    }

    struct Skipped: Encodable {
        let name: String
        let reason: String
    }

    let format = 1
    let users: [User]

    init(_ outcomes: [BackupRun.Outcome]) {
        users = outcomes.map { outcome in
            if let r = outcome.result {
                return User(
                    id: outcome.user.rawValue, ok: true, archive: r.archive, size: r.size, seconds: r.seconds,
                    stages: r.stages, priority: r.priority.rawValue, stores: r.stores.map { Store(name: $0.name, journalMode: $0.journalMode, integrity: $0.integrity) },
                    skipped: r.skipped.map { Skipped(name: $0.name, reason: $0.reason) }, error: nil, exitCode: nil,
                    mirrors: r.mirrors.isEmpty
                        ? nil
                        : r.mirrors.map {
                            Mirror(
                                repository: $0.location, ok: $0.error == nil, archive: $0.archive, seconds: $0.seconds,
                                error: $0.error?.description, exitCode: $0.error?.status.rawValue)
                        })
            } else {
                let error = outcome.error ?? UnexpectedError(description: "no result")
                return User(
                    id: outcome.user.rawValue, ok: false, archive: nil, size: nil, seconds: nil, stages: nil, priority: nil, stores: nil,
                    skipped: nil, error: error.description, exitCode: error.status.rawValue, mirrors: nil)
            }
        }
    }
}

/// A one-line progress bar on standard error: bytes, rate, ETA.
final class ProgressBar: BackupProgress, @unchecked Sendable {
    private let lock = NSLock()
    private let started = Date()
    private var lastDraw = Date.distantPast

    func update(user: String, phase: String, done: Int64, total: Int64) {
        lock.lock()
        defer { lock.unlock() }
        let now = Date()
        guard now.timeIntervalSince(lastDraw) > 0.2 || done == total else { return }
        lastDraw = now
        let elapsed = max(now.timeIntervalSince(started), 0.001)
        let rate = Double(done) / elapsed
        let eta = rate > 0 ? Double(total - done) / rate : 0
        let percent = total > 0 ? Int(Double(done) * 100 / Double(total)) : 100
        let width = 20
        let filled = min(width, percent * width / 100)
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let line = "\r\(user) \(phase) [\(bar)] \(Format.bytes(done))/\(Format.bytes(total)) \(Format.bytes(Int64(rate)))/s ETA \(Int(eta))s\u{1B}[K"
        FileHandle.standardError.write(Data(line.utf8))
    }

    func clear() {
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

/// A new archive a mirror did not take: the archive is in the repository; the run exits 1.
struct MirrorUploadFailed: GranaryError {
    let user: String
    let mirror: String
    let error: any GranaryError

    var description: String { "\(user): the new archive did not reach the mirror \(mirror): \(error.description)" }
    var status: ExitStatus { .partialFailure }
    var hint: String? { error.hint.map { $0 + "; then granary sync \(user)" } ?? "granary sync \(user) sends it" }
}
