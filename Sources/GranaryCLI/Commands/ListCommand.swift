import ArgumentParser
import Foundation
import GranaryKit

struct ListCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List archives, newest first: time, age, size, compression, stores, label, verified state.",
        discussion: """
            Only the manifest at the head of each archive is read. The verified state comes from the last \
            granary verify: verified, bad (with the reason), or unverified (never verified, or the file changed \
            since). An archive whose head cannot be read is listed as unreadable. A retired user (no folder under \
            the root, a final archive their newest) is marked retired. \
            An archive's host is in its name (USER/STAMP[-LABEL].HOST.tar.zst). Only this host's archives are \
            listed (--host, host = in the configuration, else the machine's host name); --all-hosts lists every \
            host's, and the archives written before hosts were part of names that belong to no host (shown \
            with a * after the host column; granary adopt gives them theirs). \
            A delta archive (backup --delta, or delta = true) is shown with its base and its place in the chain \
            (delta of NAME (chain N)), a full a delta can be built on as full with page hashes; --json gives each \
            archive's type (full or delta), base, chainLength and pageHashes. \
            The windows restore --at can reach (granary follow's generations: from, to, segments, base, the gap \
            before) follow the archives, read from the segments' names in the repository or mirror, local or \
            remote (--json: followed). \
            Exit codes: 0, 65 when any archive listed is unreadable or failed its last verify (all are still listed), \
            66 a user with no archives who is not a user under the root either.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "List the archives of every host, not only this host's.")
    var allHosts = false

    func execute(_ console: Console) throws -> ListResult {
        let settings = try global.settings()
        var context = settings.context
        if allHosts { context.hostScope = nil }
        let repository = try settings.requireRepository(context: context, rememberListings: true)
        let ids = try UserID.named(users)
        let folders = ids.isEmpty ? [] : Set(try repository.folders())
        for id in ids where !folders.contains(id.rawValue) {
            // A user of the root that was never backed up has no archives; anyone else is unknown.
            let error = NoArchivesError(user: id, repository: repository.location, root: try? settings.requireRoot())
            if !error.existsUnderRoot { throw error }
        }
        let items = try Catalogue(repository: repository).items(users: ids)
        // Retired users (no folder under the root, a final archive their newest) are marked as such.
        var retired: [String] = []
        if let root = try? settings.requireRoot() {
            for user in Set(items.map(\.user)) where Retirement.isRetired(user, root: root, repository: repository) {
                retired.append(user.rawValue)
            }
        }
        var result = ListResult(repository: repository.location, items: items, retiredUsers: retired.sorted())
        // The windows `restore --at` can reach, from the segments of `granary follow`.
        for user in Set(items.map(\.user)).sorted(by: { $0.rawValue < $1.rawValue }) {
            var previous: Int64?
            for generation in try FollowCatalogue.generations(in: repository, user: user, host: context.hostScope) {
                // A generation resumed after its follower was down is several windows.
                for window in generation.windows {
                    result.followed.append(
                        ListResult.Window(
                            user: user.rawValue, host: generation.host, base: generation.name,
                            from: Date(timeIntervalSince1970: Double(window.from) / 1e6),
                            to: Date(timeIntervalSince1970: Double(window.to) / 1e6),
                            segments: generation.segments.count,
                            gapBefore: previous.map { Double(max(0, window.from - $0)) / 1e6 }))
                    previous = window.to
                }
            }
        }
        return result
    }
}

/// `granary list`: every archive, newest first, with its verified state.
struct ListResult: CommandResult {
    /// A listing: shown with --quiet too.
    var isAnswer: Bool { true }
    struct Archive: Encodable {
        let user: String
        let name: String
        let path: String
        /// The host that wrote it: its host marker's, else (an archive from before hosts) its manifest's.
        @Null var host: String?
        /// Whether the archive has a host marker (false: written before hosts existed; every host counts it as its own).
        let hostMarked: Bool
        let created: Date
        let size: Int64
        let compression: String
        @Null var label: String?
        /// `backup`, `safety` (what a restore or reset replaced) or `final` (what a retired user left).
        let kind: ArchiveKind
        /// For a safety archive: the archive whose restore replaced this content.
        @Null var restoredFrom: String?
        let stores: [JSONName.Named]
        let verified: State
        /// `restorable-verified` (verify proved it restores; a delta with its whole chain),
        /// `checked-by-backup`, `unverified`, `bad` or `unreadable` (issue 46).
        let state: String
        /// When `granary verify` reached the verdict `verified` says (`verified` or `bad`); null
        /// otherwise, so that it never stands beside `unverified`.
        @Null var verifiedAt: Date?
        /// When the backup that wrote the archive checked it (`state` checked-by-backup); null
        /// otherwise.
        @Null var checkedAt: Date?
        /// Why it is unreadable or bad.
        @Null var problem: String?
        /// `full` or `delta` (issue 35; null when the manifest cannot be read): a delta holds the
        /// pages changed since its base, and is restored with its chain.
        @Null var type: String?
        /// A delta: the archive it is built on (its file name in the user's folder).
        @Null var base: String?
        /// Deltas from the chain's full to this archive (0: a full with page hashes, 1: the first
        /// delta); null for an archive without delta information.
        @Null var chainLength: Int?
        /// Whether the archive carries page hashes, so that a delta can be built on it.
        let pageHashes: Bool
        /// The check its backup ran on the stores, from the manifest: `quick`, `full`, `none`, or
        /// `pages` (a phase-2 delta that checked the pages it read alone, less than `quick`;
        /// several joined by `,` when stores differ); null when the manifest cannot be read.
        @Null var check: String?
    }

    /// What `list` says of an archive: the catalogue's verification state, or that it cannot be read.
    enum State: String, Encodable {
        case verified, bad, unverified, unreadable

        init(_ verified: Catalogue.Verified) {
            switch verified {
            case .verified: self = .verified
            case .bad: self = .bad
            case .unverified: self = .unverified
            }
        }
    }

    let repository: String
    let archives: [Archive]
    /// Users the root no longer has a folder for and whose newest archive is a final one (granary
    /// retire); empty without a root.
    let retiredUsers: [String]
    /// `granary follow`'s windows: each generation's, oldest first per user; the gap
    /// before one is the time since the user's previous window ended (null for the first).
    struct Window: Encodable {
        let user: String
        let host: String
        let base: String
        let from: Date
        let to: Date
        let segments: Int
        @Null var gapBefore: Double?
    }
    var followed: [Window] = []

    enum CodingKeys: String, CodingKey { case repository, archives, retiredUsers, followed }

    init(repository: String, items: [Catalogue.Item], retiredUsers: [String] = []) {
        self.repository = repository
        self.retiredUsers = retiredUsers
        archives = items.map { item in
            Archive(
                user: item.user.rawValue, name: item.name.fileName, path: item.path, host: item.shownHost,
                hostMarked: item.host != nil, created: item.created,
                size: item.size,
                compression: item.name.compression.rawValue, label: item.name.label, kind: item.kind,
                restoredFrom: item.manifest?.restoredFrom, stores: item.stores.map(JSONName.Named.init),
                verified: item.problem != nil ? .unreadable : State(item.verified),
                state: item.problem != nil ? State.unreadable.rawValue : item.standing.rawValue,
                verifiedAt: item.problem == nil && item.verified != .unverified && item.record?.by == nil
                    ? item.record?.verified : nil,
                checkedAt: item.problem == nil && item.standing == .checkedByBackup ? item.record?.verified : nil,
                problem: item.problem ?? (item.verified == .bad ? item.record?.reason : nil),
                type: item.manifest.map { $0.isDelta ? "delta" : "full" }, base: item.manifest?.delta?.base?.name,
                chainLength: item.manifest?.delta?.chainLength, pageHashes: item.manifest?.delta != nil,
                check: item.manifest.map { manifest in
                    var seen: [String] = []
                    for store in manifest.stores where !seen.contains(store.check) { seen.append(store.check) }
                    return seen.joined(separator: ",")
                })
        }
    }

    private var bad: [Archive] { archives.filter { $0.verified == .unreadable || $0.verified == .bad } }

    var status: ExitStatus { bad.isEmpty ? .success : .dataError }

    var problems: [Failure] {
        let bad = self.bad
        guard !bad.isEmpty else { return [] }
        return [
            Failure(
                code: .dataError,
                message: "\(bad.count) archive\(bad.count == 1 ? " is" : "s are") unreadable or failed verification: "
                    + bad.map { "\($0.user)/\($0.name)" }.joined(separator: ", "),
                hint: Hint.commands([["granary", "verify"] + bad.map { "\($0.user)/\($0.name)" }]))
        ]
    }

    var notes: [String] { archives.isEmpty ? ["no archives in \(repository)"] : [] }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        let now = Date()
        var user: String?
        for archive in archives {
            if archive.user != user {
                user = archive.user
                text.line(
                    retiredUsers.contains(archive.user) ? "\(bold: archive.user)  (retired)" : "\(bold: archive.user)")
            }
            var line: TextLine =
                "  \(archive.name, width: 38) \(Format.time(archive.created)) \(Format.age(now.timeIntervalSince(archive.created)) + " ago", width: 12) \(Format.bytes(archive.size), width: 10) \(archive.compression, width: 5) \((archive.host ?? "-") + (archive.hostMarked ? "" : "*"), width: 16)"
            if archive.verified == .unreadable {
                line += " unreadable: \(archive.problem ?? "")"
            } else {
                line += " \(archive.verified.rawValue, width: 11) \(archive.stores.map(\.name).joined(separator: ", "))"
                if let label = archive.label { line += "  [\(label)]" }
                // Issue 35: a delta names its base; a full that deltas can be built on says so.
                if let base = archive.base {
                    line += "  delta of \(base) (chain \(archive.chainLength ?? 0))"
                    // Phase 2's own check is less than quick_check: said where an operator looks.
                    if archive.check?.contains(CheckMode.pagesCheck) == true { line += "  check: pages" }
                } else if archive.pageHashes {
                    line += "  full with page hashes"
                }
                // Safety and final archives are not backups: say so where an operator looks.
                if archive.kind != .backup {
                    line +=
                        "  (\(archive.kind.rawValue) archive\(archive.restoredFrom.map { ", replaced by the restore of \($0)" } ?? ""))"
                }
                if archive.verified == .bad, let problem = archive.problem { line += "  (\(problem))" }
            }
            text.line(line)
        }
        var followedUser: String?
        for window in followed {
            if window.user != followedUser {
                followedUser = window.user
                text.line("\(bold: window.user)  followed (restore --at reaches any moment of a window)")
            }
            var line: TextLine =
                "  \(Format.time(window.from)) to \(Format.time(window.to))  \(window.segments) segments  base \(window.base)"
            if let gap = window.gapBefore, gap > 0 { line += "  (gap of \(Format.age(gap)) before)" }
            text.line(line)
        }
    }
}
