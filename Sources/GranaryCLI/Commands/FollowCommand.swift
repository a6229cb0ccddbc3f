import ArgumentParser
import Foundation
import GranaryKit

struct FollowCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "follow",
        abstract: "Ship every committed transaction of users' WAL stores to the repository, about every second.",
        discussion: """
            Follows the WAL stores of the named users (default: every user under the root, including users \
            that appear later). The kernel reports changes in users' folders (inotify); half an interval after \
            a store's -wal changed, follow reads the stores that changed (no other is opened) beneath the \
            user's folder, keeps whole committed transactions whose checksums chain, and publishes them as one \
            segment of the user's current generation in the repository \
            (USER/follow/HOST/BASE/SEQUENCE-FIRST-LAST.seg). Users take turns, at most 64 MiB of a user's pages \
            a turn (a larger transaction is read whole, alone) and at most half a second of SQLite's waits on \
            the user's locks and -shm; every user is read whole every 5 minutes as a safety net, and every interval when its \
            folders cannot be watched. A generation \
            starts with a backup of the user (its base); a new one starts whenever granary cannot prove it \
            read every commit (the -wal truncated or restarted past what was read, the store replaced, a store \
            added or gone), and the journal says why. restore --at TIME replays a generation onto its base when \
            TIME lies in its window; list --follow shows the windows. Rollback-journal stores are named and \
            passed over. The repository may be local or remote (s3:, rclone:): a segment is claimed only \
            once its upload completed and every earlier one of its generation is there (a user's next \
            segments are read and uploaded while one uploads, a window claiming only those that run from \
            the first without a hole). \
            Logs one line per event (a generation, a segment, a paused or polled user) on standard error. On \
            SIGTERM or SIGINT it reads once more the users with changes not yet shipped, oldest first, for \
            at most half a second, publishes them and exits; the users not reached by then are read by the \
            next run. To a remote repository the uploads under way get 0.6 s from the stop, the last state \
            for check written beside them; the segments not uploaded by then are named per user, and the \
            next run ships their commits from the -wal. \
            One follow per repository and host runs at a time (a lock in the root's .granary folder, taken \
            without waiting): another, --once included, exits 75 naming the one running. \
            Exit codes: 0 stopped by a signal or --once done, 64 usage, 69 no repository or root, 75 another \
            follow of this repository and host is running.
            """
    )

    static var cleansUpOnSignals: Bool { true }

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Option(
        help: ArgumentHelp(
            "How often each user's commits are shipped: 10ms to 1h (default: follow_interval, 1s).",
            valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.followInterval))
    var interval: Duration?

    @Flag(help: "Ship what is there (starting generations as needed), then exit.")
    var once = false

    @Option(
        help: ArgumentHelp(
            "Also write each user's lag in Prometheus' text format to this file after each round (for node_exporter), atomically.",
            valueName: "file"),
        completion: .file())
    var textfile: String?

    func checkArguments() throws {
        if let textfile {
            if textfile.isEmpty || textfile.hasSuffix("/") { throw ValidationError("--textfile needs a file name") }
            try GlobalOptions.checkPlace(textfile, "--textfile")
        }
    }

    func execute(_ console: Console) throws -> FollowResult {
        let settings = try global.settings()
        let root = try settings.requireRoot()
        let repository = try settings.requireRepository()
        // One follower per repository and host: a second would publish its own segments under
        // the same sequence numbers as the first's.
        let lock = try FollowLock.acquire(root: root, repository: repository)
        defer { lock.release() }
        var options = BackupOperation.Options()
        options.compression = settings.compression.value
        options.level = settings.level.value
        options.check = settings.check.value
        options.bytesPerUser = settings.bytesPerUser.value
        options.context = settings.context
        if settings.delta.value { options.delta = settings.deltaPolicy }
        let backup = BackupOperation(root: root, repository: repository, options: options)
        let run = FollowRun(
            root: root, repository: repository, backup: backup, cap: settings.bytesPerUser.value,
            users: try UserID.named(users), uploads: settings.followUploads.value)
        run.watchesPerUser = settings.followWatches.value
        let every = interval ?? settings.followInterval.value
        var result = FollowResult()
        let log: (FollowEvent) -> Void = { event in
            console.note("follow: " + event.description)
            result.events.append(
                FollowResult.Event(kind: event.kind.rawValue, user: event.user, message: event.message))
        }
        if let textfile { run.statusWritten = { status in try writeTextfile(textfile, status) } }
        if once {
            do { try run.round(log: log) } catch is InterruptedError {}
        } else {
            try run.run(interval: every, log: log)
        }
        return result
    }
}

extension FollowCommand {
    /// `--textfile`: the follower's metrics (FollowStatus), replacing the file atomically.
    func writeTextfile(_ path: String, _ status: FollowStatus) throws {
        do {
            try OutsideFile.write(
                Array(status.prometheusText(now: Date()).utf8), to: CheckResult.absolute(path), mode: 0o644)
        } catch {
            throw CommandError(
                description: "cannot write --textfile \(path): \(error)", status: .cannotCreate,
                hint:
                    "name a file in a folder granary can write, such as /var/lib/prometheus/node-exporter/granary-follow.prom"
            )
        }
    }
}

/// `granary follow`: the events of the run (each also logged as it happened).
struct FollowResult: CommandResult {
    struct Event: Encodable {
        let kind: String
        let user: String
        let message: String
    }
    var events: [Event] = []

    func render(_ text: inout TextOutput, _ detail: TextDetail) {}
}
