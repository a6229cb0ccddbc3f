import ArgumentParser
import Foundation
import GranaryKit

struct SyncCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Bring the mirror repositories up to date with the repository.",
        discussion: """
            For each mirror ([[mirror]] in the configuration, or --mirror) and each user (those named, else every \
            user of the repository): this host's archives the mirror lacks are uploaded under the same names (each name holds its host), \
            verification records are copied, and archives the repository no longer has are removed from the mirror \
            only when this host's deletion record names them (delete or prune on this host removed them). So sync \
            never removes from a mirror what the repository never had: a new or emptied repository (the host lost, \
            users restored from the mirror) leaves the mirror's history alone, and hosts sharing a mirror never \
            remove or resend each other's archives. Each user is synced under its lock. Uploads that a killed run of \
            this host left behind are removed. -v and --dry-run list each archive sent and removed. \
            Delta archives (issue 35) travel with their chains: a delta is sent only after every link of its chain \
            the mirror lacks (oldest first); a delta whose chain has a link in neither place is not sent (exit 1, \
            its user failing with 65: granary verify --chain names the broken link); and an archive this host \
            deleted stays on the mirror while a delta there is built on it (listed as kept). \
            A user whose newest archive does not restore from the mirror as far as its chain's heads and records there \
            tell (a link missing or replaced, or found bad by verify) fails with 65 once the rest is sent, until a new \
            full is written (the next backup writes one). \
            granary follow's segments (USER/follow/HOST/BASE/…) of this host travel too, once their base archive \
            is on the mirror: each segment the mirror lacks is copied, oldest first (a segment never changes once \
            written), so that restore --at works from the mirror; a generation leaves a local mirror with its base. \
            Exit codes: 0 every mirror is up to date, 1 some user or mirror failed (each is named), 64 no mirror, \
            66 no repository, 75 lock held.
            """
    )
    static let cleansUpOnSignals = true

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp("Sync this mirror (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    @Flag(help: "Show what would be sent and removed; change nothing.")
    var dryRun = false

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> SyncResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository(rememberListings: true)
        let mirrors = try settings.mirrorRepositories(flags: mirror, rememberListings: true)
        if mirrors.isEmpty {
            throw ValidationError(
                "no mirror: set [[mirror]] repo = \"…\" in the configuration, or pass --mirror LOCATION")
        }
        let ids = try UserID.named(users)
        let results = try MirrorSync.run(
            primary: repository, mirrors: mirrors, users: ids, root: try? settings.requireRoot(),
            lockTimeout: lock.timeout(settings),
            dryRun: dryRun)
        return SyncResult(dryRun: dryRun, results: results)
    }
}

/// `granary sync`: per mirror and user, the archives sent, the records copied and the archives removed.
struct SyncResult: CommandResult {
    struct User: Encodable {
        let id: String
        let ok: Bool
        let uploaded: [String]
        let records: [String]
        let removed: [String]
        /// Archives this host deleted that stay on the mirror: a delta there is built on them.
        let kept: [String]
        /// Deltas not sent: a link of their chain is in neither the repository nor the mirror.
        let notSent: [String]
        /// granary follow's segments sent: `HOST/BASE/SEGMENT`.
        let segments: [String]
        @Null var error: Failure?
    }

    struct Mirror: Encodable {
        let repository: String
        let ok: Bool
        let users: [User]
        /// Uploads a killed run left behind, removed.
        let removedTemporaries: [String]
        @Null var error: Failure?
    }

    let dryRun: Bool
    let mirrors: [Mirror]

    init(dryRun: Bool, results: [MirrorSync.MirrorResult]) {
        self.dryRun = dryRun
        mirrors = results.map { result in
            Mirror(
                repository: result.location, ok: !result.failed,
                users: result.users.map {
                    User(
                        id: $0.user.rawValue, ok: $0.error == nil, uploaded: $0.uploaded, records: $0.records,
                        removed: $0.removed, kept: $0.keptBases, notSent: $0.notSent, segments: $0.segments,
                        error: $0.error.map(Failure.init))
                },
                removedTemporaries: result.cleaned, error: result.error.map(Failure.init))
        }
    }

    /// Every mirror refused as a whole because none is a repository (an unmounted disk, a typo):
    /// 66, as for the repository itself; otherwise 1 when anything failed.
    var status: ExitStatus {
        let whole = mirrors.compactMap(\.error)
        if !mirrors.isEmpty, whole.count == mirrors.count, let first = whole.first,
            first.status == .notFound, whole.allSatisfy({ $0.code == first.code }),
            mirrors.allSatisfy({ $0.users.isEmpty })
        {
            return first.status
        }
        return problems.isEmpty ? .success : .partialFailure
    }

    var problems: [Failure] {
        mirrors.flatMap { mirror in (mirror.error.map { [$0] } ?? []) + mirror.users.compactMap(\.error) }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        for mirror in mirrors {
            for user in mirror.users where user.ok || !user.uploaded.isEmpty || !user.kept.isEmpty {
                let changed =
                    !user.uploaded.isEmpty || !user.records.isEmpty || !user.removed.isEmpty || !user.kept.isEmpty
                    || !user.segments.isEmpty
                guard (changed && detail.summaries) || detail.verbose || dryRun else { continue }
                let segments =
                    user.segments.isEmpty
                    ? "" : ", \(user.segments.count) segment\(user.segments.count == 1 ? "" : "s") of follow"
                text.line(
                    "\(bold: user.id) → \(mirror.repository): \(dryRun ? "would send" : "sent") \(user.uploaded.count)\(segments), records \(user.records.count), \(dryRun ? "would remove" : "removed") \(user.removed.count)"
                )
                if detail.verbose || dryRun {
                    for name in user.uploaded { text.line("  send    \(name)") }
                    for name in user.segments { text.line("  send    follow/\(name)") }
                    for name in user.removed { text.line("  remove  \(name)") }
                }
                for name in user.kept {
                    text.line("  kept    \(name) (deleted here, but a delta on the mirror is built on it)")
                }
            }
            for path in mirror.removedTemporaries where detail.summaries {
                text.line("removed \(path), left by a run that died")
            }
        }
    }
}
