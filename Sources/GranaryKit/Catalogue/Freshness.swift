import Foundation

/// `granary check`: whether each user has a verified archive younger than a limit.
///
/// Only archives whose record still matches them count (see `VerificationRecord`): one that
/// `granary verify` passed, or one whose backup checked every snapshot it packed (`check =
/// quick` or `full`, the default). An archive never checked, that failed, or changed since does
/// not vouch for the user, however new it is; a delta counts only when its whole chain is there,
/// each link the archive its successor was built on and none found bad (issue 46). When the
/// newest archives do not restore (found bad, changed, chain broken), the user fails until a
/// restorable archive newer than them exists: an older good one does not hide them. A restore, reset or retire that stopped half way
/// (a journal or work folder under the root's `.granary`, its lock free) fails the user until
/// `granary recover` finishes it.
public enum Freshness {
    /// One user's standing.
    public struct Report: Sendable {
        public let user: UserID
        /// Whether the user passes (in the repository and on every mirror).
        public let ok: Bool
        /// The newest verified archive, if any.
        public let newestVerified: RepositoryEntry?
        /// Its age in seconds.
        public let age: TimeInterval?
        /// The newest archive of any state, if any.
        public let newest: RepositoryEntry?
        /// Why the user fails (`nil` when ok).
        public let reason: String?
        /// Each mirror's standing for the user (empty without mirrors).
        public var mirrors: [Mirror] = []
        /// For a retired user (no folder under the root, a final archive their newest): that
        /// archive. A retired user passes: nothing is to be backed up any more.
        public var retired: RepositoryEntry? = nil
        /// Whether `granary verify` (not only the backup's own check) passed on `newestVerified`.
        public var verified = false
        /// A restore, reset or retire of the user that stopped half way (recover finishes it).
        public var interrupted = false
        /// Why the user passes with no archive: nothing of theirs is to be backed up (a folder
        /// with no store yet, or no folder at all), and the repository has no archive of theirs.
        public var nothingToBackUp: String? = nil
        /// The newest archive that does not restore, when it is newer than ``newestVerified``
        /// (verify found it bad, it changed since it was checked, or its chain is not whole):
        /// the user fails until a restorable archive newer than it exists (issue 46).
        public var problem: RepositoryEntry? = nil

        /// The standing of ``newestVerified`` in the shared words (``VerificationRecord/Standing``).
        public var standing: VerificationRecord.Standing {
            newestVerified == nil ? .unverified : verified ? .restorableVerified : .checkedByBackup
        }
    }

    /// Why a user with no archive has nothing to back up, or nil when they have something (or
    /// something granary cannot read, or passed over): no folder under the root, or a folder
    /// that holds no store yet.
    public static func nothingToBackUp(_ user: UserID, root: Root) -> String? {
        guard let rootFolder = try? root.open() else { return nil }
        guard rootFolder.entry(user.rawValue) != nil else { return "nothing to back up: no folder under the root" }
        // A folder that cannot be opened is not "nothing": only a missing one is.
        guard let folder = try? root.user(user) else { return nil }
        let scan = folder.scan()
        guard scan.stores.isEmpty && scan.unreadable.isEmpty && scan.skipped.isEmpty else { return nil }
        return "nothing to back up: no store yet"
    }

    /// The users with a restore, reset or retire that stopped half way: their work under the
    /// root's `.granary` is left and no run holds their lock (one that holds it is working now).
    public static func interrupted(root: Root) -> Set<UserID> {
        Set(
            Recovery.unfinishedUsers(root: root).filter { user in
                (try? UserLock.acquire(root: root, user: user, timeout: .zero)) != nil
            })
    }

    /// A user's standing on one mirror.
    public struct Mirror: Sendable {
        /// The mirror's location.
        public let location: String
        /// The user's newest regular archive there, if any.
        public let newest: RepositoryEntry?
        /// Why the mirror fails the user (`nil` when it is up to date).
        public let problem: String?
        /// Whether the mirror could not be reached (not asked again for the next users).
        var unreachable = false
    }

    /// Evaluates `users` against `maxAge` seconds at `now`. With `mirrors`, a user also fails
    /// when the newest regular archive of the repository is missing from a mirror, or when the
    /// mirror's newest regular archive is older than `maxAge`. A retired user (no folder under
    /// `root`, a final archive their newest) passes, mirrors or not.
    public static func evaluate(
        users: [UserID], repository: any Repository, maxAge: TimeInterval, now: Date = Date(),
        mirrors: [any Repository] = [],
        root: Root? = nil, interrupted: Set<UserID> = []
    ) throws -> [Report] {
        // A mirror that could not be listed (it does not answer) is not asked again for each user.
        var unreachable: [String: String] = [:]
        return try users.map { user in
            var report = try standing(
                user, repository: repository, maxAge: maxAge, now: now, mirrors: mirrors, root: root,
                unreachable: &unreachable)
            guard interrupted.contains(user) else { return report }
            let reason = "a restore, reset or retire stopped half way (granary recover \(user.rawValue) finishes it)"
            var failed = Report(
                user: user, ok: false, newestVerified: report.newestVerified, age: report.age, newest: report.newest,
                reason: ([report.reason].compactMap { $0 } + [reason]).joined(separator: "; "), mirrors: report.mirrors,
                retired: report.retired)
            failed.verified = report.verified
            failed.problem = report.problem
            failed.interrupted = true
            report = failed
            return report
        }
    }

    private static func standing(
        _ user: UserID, repository: any Repository, maxAge: TimeInterval, now: Date, mirrors: [any Repository],
        root: Root?, unreachable: inout [String: String]
    ) throws -> Report {
        if let root, let final = Retirement.finalArchive(of: user, root: root, repository: repository) {
            var report = Report(user: user, ok: true, newestVerified: nil, age: nil, newest: final, reason: nil)
            report.retired = final
            return report
        }
        var report = try evaluate(user, repository: repository, maxAge: maxAge, now: now)
        if report.newest == nil, let root, let why = nothingToBackUp(user, root: root) {
            var nothing = Report(user: user, ok: true, newestVerified: nil, age: nil, newest: nil, reason: nil)
            nothing.nothingToBackUp = why
            return nothing
        }
        let verified = report.verified, problem = report.problem
        guard !mirrors.isEmpty else { return report }
        var standings: [Mirror] = []
        for mirror in mirrors {
            // A mirror that is no repository (a typo, a crypt remote read with a wrong password)
            // is said to be that, once, not "lacks the newest archive" for every user.
            if unreachable[mirror.location] == nil {
                do { try mirror.requireExisting() } catch { unreachable[mirror.location] = error.description }
            }
            if let problem = unreachable[mirror.location] {
                standings.append(Mirror(location: mirror.location, newest: nil, problem: problem))
                continue
            }
            let standing = self.mirror(mirror, user: user, primaryNewest: report.newest, maxAge: maxAge, now: now)
            if standing.unreachable { unreachable[mirror.location] = standing.problem }
            standings.append(standing)
        }
        let problems = standings.compactMap { standing in
            standing.problem.map { "mirror \(standing.location): \($0)" }
        }
        let reason = ([report.reason].compactMap { $0 } + problems).joined(separator: "; ")
        report = Report(
            user: user, ok: report.ok && problems.isEmpty, newestVerified: report.newestVerified, age: report.age,
            newest: report.newest, reason: reason.isEmpty ? nil : reason, mirrors: standings)
        report.verified = verified
        report.problem = problem
        return report
    }

    private static func evaluate(_ user: UserID, repository: any Repository, maxAge: TimeInterval, now: Date) throws
        -> Report
    {
        // Regular backups only: a safety archive is what a restore replaced, not a backup.
        let archives = try repository.archives(of: user).filter { $0.name.kind == .backup }
        let records = repository.records(for: archives)
        guard let newest = archives.last else {
            return Report(user: user, ok: false, newestVerified: nil, age: nil, newest: nil, reason: "has no archives")
        }
        // Issue 46: the newest archive that restores, newest first. One verify found bad, or that
        // changed since it was checked, never counts; a delta counts only with its whole chain
        // (heads and records: ``ChainLinks``). A problem newer than the archive found keeps the
        // user red until a restorable archive newer than it exists.
        let sidecars = repository.readSidecars(in: user.rawValue)
        var problem: (entry: RepositoryEntry, reason: String)?
        var verified: RepositoryEntry?
        for entry in archives.reversed() {
            if let found = ChainLinks.problem(with: entry, sidecars: sidecars) {
                problem = problem ?? (entry, found)
                continue
            }
            guard let record = records[entry.path], record.isGood else { continue }
            if case .failure(let broken) = ChainLinks.walk(entry, repository: repository, archives: archives) {
                problem = problem ?? (entry, "does not restore: its chain \(broken.description)")
                continue
            }
            verified = entry
            break
        }
        let fix =
            "Try: granary backup \(user.rawValue) (a chain that is not whole or holds a bad archive gets a new full), then granary verify --user \(user.rawValue) --latest"
        if let problem {
            var report = Report(
                user: user, ok: false, newestVerified: verified,
                age: verified.map { now.timeIntervalSince($0.name.created) },
                newest: newest,
                reason:
                    "archive \(problem.entry.name) \(problem.reason); "
                    + (verified.map { "the newest restorable archive, \($0.name), is older" }
                        ?? "no archive of the user is known to restore") + ". " + fix)
            report.problem = problem.entry
            report.verified = verified.map { records[$0.path]?.isVerified == true } ?? false
            return report
        }
        guard let verified else {
            // A record that no longer matches its archive (copied without modification times,
            // touched) says so: the archive was checked, but not as it is now.
            let stale = sidecars[newest.name.fileName].flatMap(VerificationRecord.decodeAny).map { record in
                let what =
                    record.archiveSize == newest.size && record.archiveModified == newest.modified
                    ? "another file is in the archive's place since it was checked (same size and modification time, as cp -p leaves it)"
                    : "the archive's size or modification time changed since it was checked, as a copy without modification times does"
                return
                    "unverified: its record no longer applies (\(what)); granary verify --user \(user.rawValue) --latest checks it again"
            }
            let state =
                records[newest.path].map { $0.isGood ? "verified" : "bad" } ?? stale
                ?? "not verified (its backup ran with check = none)"
            return Report(
                user: user, ok: false, newestVerified: nil, age: nil, newest: newest,
                reason: "has no checked archive (newest, \(newest.name), is \(state))")
        }
        let byVerify = records[verified.path]?.isVerified == true
        let age = now.timeIntervalSince(verified.name.created)
        if age > maxAge {
            var report = Report(
                user: user, ok: false, newestVerified: verified, age: age, newest: newest,
                reason:
                    "newest checked archive \(verified.name) is \(describe(age)) old, over the \(describe(maxAge)) limit"
            )
            report.verified = byVerify
            return report
        }
        var report = Report(user: user, ok: true, newestVerified: verified, age: age, newest: newest, reason: nil)
        report.verified = byVerify
        return report
    }

    private static func mirror(
        _ mirror: any Repository, user: UserID, primaryNewest: RepositoryEntry?, maxAge: TimeInterval, now: Date
    ) -> Mirror {
        let archives: [RepositoryEntry]
        do { archives = try mirror.archives(of: user).filter { $0.name.kind == .backup } } catch {
            var standing = Mirror(
                location: mirror.location, newest: nil, problem: "cannot be listed: \(error.description)")
            if case .transport = error { standing.unreachable = true }
            return standing
        }
        let newest = archives.last
        if let primaryNewest, !archives.contains(where: { $0.name == primaryNewest.name }) {
            return Mirror(
                location: mirror.location, newest: newest,
                problem: "lacks the newest archive \(primaryNewest.name) (granary sync sends it)")
        }
        guard let newest else { return Mirror(location: mirror.location, newest: nil, problem: "has no archives") }
        let age = now.timeIntervalSince(newest.name.created)
        if age > maxAge {
            return Mirror(
                location: mirror.location, newest: newest,
                problem: "newest archive \(newest.name) is \(describe(age)) old, over the \(describe(maxAge)) limit")
        }
        return Mirror(location: mirror.location, newest: newest, problem: nil)
    }

    /// `90061` → `1d1h1min`, in the units durations are written in (`DurationText`).
    public static func describe(_ seconds: TimeInterval) -> String {
        var rest = Int64(max(0, seconds))
        var text = ""
        var parts = 0
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("min", 60)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
            parts += 1
        }
        if text.isEmpty || (rest > 0 && parts < 2) { text += "\(rest)s" }
        return text
    }
}
