import ArgumentParser
import Foundation
import GranaryKit

struct VerifyCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Re-read archives: every member against the manifest, then SQLite's integrity check.",
        discussion: """
            Each archive is streamed once: MANIFEST.json must come first, every member must be listed with the \
            size and SHA-256 it has, nothing may be missing, extra or unsafe (absolute names, .., links, devices). \
            The stores are extracted into a private temporary folder under the repository, checked, and removed. \
            A delta is verified with its whole chain: every link back to its full must be there and be the \
            archive it was built on, and the delta is rebuilt from them and checked, so that verified means \
            the archive restores. \
            The result is recorded beside the archive for list and check. Each bad archive gets one line \
            naming the member and what is wrong. A file outside the repository is refused (exit 64) unless \
            --force, and its result is never recorded: granary writes nothing beside it. \
            Exit codes: 0 all good, 64 a file outside the repository without --force, 65 any archive bad \
            (or a file that is not an archive), 66 an archive named that does not exist, 129 or 130 interrupted.
            """
    )
    static let cleansUpOnSignals = true

    /// The checks verify runs (backup's `none` is not one of them).
    enum Check: String, ExpressibleByArgument, CaseIterable {
        case full, quick
        var mode: CheckMode { self == .full ? .full : .quick }
    }

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("Archives: a path, USER/NAME, or NAME with --user.", valueName: "archive"),
        completion: .custom(Completions.archivesOrUsers))
    var archives: [String] = []

    @Option(
        help: ArgumentHelp("Verify this user's archives.", valueName: "user"), completion: .custom(Completions.users))
    var user: String?

    @Flag(help: "Verify the archives of every user in the repository.")
    var all = false

    @Flag(help: "Only each user's newest archive.")
    var latest = false

    @Option(help: "integrity_check (full) or quick_check (quick).")
    var check: Check = .full

    @Flag(help: "Also verify archive files outside the repository (their result is not recorded).")
    var force = false

    @Flag(help: "Kept for scripts: a delta archive is always rebuilt from its whole chain and checked.")
    var chain = false

    func checkArguments() throws {
        if archives.isEmpty && user == nil && !all {
            throw ValidationError("name archives, or pass --user USER or --all")
        }
        if all && (user != nil || !archives.isEmpty) {
            throw ValidationError("pass --all alone, not with archives or --user")
        }
    }

    func execute(_ console: Console) throws -> VerifyResult {
        let settings = try global.settings()
        let repository = try repository(settings)
        let owner = try UserID.named(user)
        var entries: [RepositoryEntry] = []
        if !archives.isEmpty {
            let locator = ArchiveLocator(repository: repository)
            entries = try archives.map { try locator.locate($0, user: owner) }
            let outside = entries.filter { $0.object == nil }.map(\.path)
            if !outside.isEmpty && !force {
                throw OutsideRepository(command: "verify", paths: outside, repository: repository?.location)
            }
        } else if let repository {
            let users = try owner.map { [$0] } ?? repository.users()
            if let owner, try !repository.folders().contains(owner.rawValue) {
                throw NoArchivesError(user: owner, repository: repository.location, root: try? settings.requireRoot())
            }
            for user in users {
                let all = try repository.archives(of: user)
                // --latest means the user's newest regular backup, never a safety or final archive.
                entries += latest ? Array(all.filter { $0.name.kind == .backup }.suffix(1)) : all.reversed()
            }
        }
        let outcomes = try ArchiveVerification.run(
            entries, repository: repository, check: check.mode, context: settings.context, chain: chain)
        // follow's segments: every generation of the users verified (of the archives named, when
        // archives are named).
        var followed: [SegmentVerification.Outcome] = []
        if let repository {
            let named = archives.isEmpty ? nil : Set(entries.filter { $0.object != nil }.map(\.name.fileName))
            var users = Array(Set(entries.filter { $0.object != nil }.map(\.user))).sorted { $0.rawValue < $1.rawValue }
            if archives.isEmpty { users = try owner.map { [$0] } ?? repository.users() }
            followed = try SegmentVerification.run(
                users: users, repository: repository, host: settings.context.hostScope, bases: named,
                newestOnly: latest, cap: settings.bytesPerUser.value)
        }
        return VerifyResult(
            outcomes, followed: followed, check: check.mode, repository: repository?.location ?? "no repository",
            cpu: settings.context.cpu)
    }

    /// The configured repository. Without one, archives named by their paths need none: the
    /// folder above their user's folder is the repository when it is one (it has the marker),
    /// else they are files outside any repository.
    private func repository(_ settings: Settings) throws -> (any Repository)? {
        guard settings.repo == nil, let first = archives.first, archives.allSatisfy({ FileSystem.isRegularFile($0) })
        else {
            return try settings.requireRepository(rememberListings: true)
        }
        return ArchiveLocator.enclosingRepository(ofFile: first, context: settings.context)
    }
}

/// `granary verify`: each archive, good or with what is wrong.
struct VerifyResult: CommandResult {
    /// What is wrong with an archive: an error, with the member at fault.
    struct Fault: Encodable {
        let code: Int32
        let message: String
        @Null var hint: String?
        @Null var member: String?
        @Null var memberBase64: String?
        /// What is wrong, without the archive's and the member's names.
        let reason: String
    }

    struct Archive: Encodable {
        let user: String
        let archive: String
        let path: String
        let ok: Bool
        /// `restorable-verified` or `bad` (issue 46): a delta passes only with its whole chain.
        let state: String
        /// For a delta: the archives of its chain rebuilt with it, base first back to the full.
        let chain: [String]
        let stores: Int
        let bytes: Int64
        /// For a delta verified by an earlier run whose chain is listed unchanged since: when
        /// (nothing was read again; `bytes` is 0).
        @Null var unchangedSince: String?
        @Null var error: Fault?
    }

    /// What is wrong with a followed generation: the segment at fault (null: the generation).
    struct SegmentFault: Encodable {
        let code: Int32
        let message: String
        @Null var hint: String?
        @Null var segment: String?
        let reason: String
    }

    /// One generation of `granary follow`'s segments.
    struct Followed: Encodable {
        let user: String
        let host: String
        /// The base archive's file name.
        let base: String
        let ok: Bool
        /// The segments that checked out, and the commits and frames they hold.
        let segments: Int
        let commits: Int
        let frames: Int
        /// The window the segments give, when every one checked out.
        @Null var from: Date?
        @Null var to: Date?
        /// The moments `restore --at` may claim: the window less its gaps (several when a
        /// follower was started again or lagged); empty unless every check passed.
        let windows: [Window]
        let errors: [SegmentFault]
    }

    struct Window: Encodable {
        let from: Date
        let to: Date
    }

    let check: String
    /// `yielded`, `raised` or `normal`: how the work was scheduled.
    let priority: String
    let archives: [Archive]
    let followed: [Followed]
    private let repository: String
    private let failures: [Failure]

    enum CodingKeys: String, CodingKey { case check, priority, archives, followed }

    init(
        _ outcomes: [ArchiveVerification.Outcome], followed generations: [SegmentVerification.Outcome] = [],
        check: CheckMode, repository: String, cpu: CPUYield
    ) {
        self.check = check.rawValue
        self.repository = repository
        priority = cpu.mode.rawValue
        archives = outcomes.map {
            Archive(
                user: $0.entry.user.rawValue, archive: $0.entry.name.fileName, path: $0.entry.path,
                ok: $0.failure == nil,
                state: ($0.failure == nil ? VerificationRecord.Standing.restorableVerified : .bad).rawValue,
                chain: $0.chain,
                stores: $0.stores, bytes: $0.bytes,
                unchangedSince: $0.unchangedSince.map(Format.time),
                error: $0.failure.map {
                    Fault(
                        code: $0.status.rawValue, message: $0.description, hint: $0.hint.map(Hint.text),
                        member: $0.member,
                        memberBase64: $0.member.flatMap(JSONName.base64), reason: $0.reason)
                })
        }
        followed = generations.map { outcome in
            Followed(
                user: outcome.user.rawValue, host: outcome.host, base: outcome.generation, ok: outcome.ok,
                segments: outcome.segments, commits: outcome.commits, frames: outcome.frames,
                from: outcome.window.map { Date(timeIntervalSince1970: Double($0.from) / 1e6) },
                to: outcome.window.map { Date(timeIntervalSince1970: Double($0.to) / 1e6) },
                windows: outcome.windows.map {
                    Window(
                        from: Date(timeIntervalSince1970: Double($0.from) / 1e6),
                        to: Date(timeIntervalSince1970: Double($0.to) / 1e6))
                },
                errors: outcome.problems.map {
                    SegmentFault(
                        code: $0.exitStatus.rawValue, message: $0.description, hint: $0.advice, segment: $0.segment,
                        reason: $0.reason)
                })
        }
        failures =
            outcomes.compactMap { $0.failure.map(Failure.init) }
            + generations.flatMap { $0.problems.map { Failure($0) } }
    }

    var problems: [Failure] { failures }
    var status: ExitStatus { failures.isEmpty ? .success : .dataError }
    var notes: [String] { archives.isEmpty && followed.isEmpty ? ["no archives to verify in \(repository)"] : [] }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard detail.summaries else { return }
        for archive in archives where archive.ok {
            let chain =
                archive.chain.isEmpty
                ? "" : ", restorable with its chain of \(archive.chain.count) (back to \(archive.chain.last!))"
            if let since = archive.unchangedSince {
                text.line(
                    "ok  \(archive.user)/\(archive.archive)  \(archive.stores) store\(archive.stores == 1 ? "" : "s"), verified \(since)\(chain), not read again: unchanged since"
                )
                continue
            }
            text.line(
                "ok  \(archive.user)/\(archive.archive)  \(archive.stores) store\(archive.stores == 1 ? "" : "s"), \(Format.bytes(archive.bytes)) checked (\(check))\(chain)"
            )
        }
        for generation in followed where generation.ok {
            // A window with gaps says each piece `restore --at` may claim.
            let window =
                generation.windows.count > 1
                ? "windows "
                    + generation.windows.map { "\(Format.time($0.from)) to \(Format.time($0.to))" }.joined(
                        separator: ", ")
                : "window \(generation.from.map(Format.time) ?? "?") to \(generation.to.map(Format.time) ?? "?")"
            text.line(
                "ok  \(generation.user)/follow/\(generation.host)/\(generation.base)  \(generation.segments) segment\(generation.segments == 1 ? "" : "s"), \(generation.commits) commits, \(window)"
            )
        }
    }
}
