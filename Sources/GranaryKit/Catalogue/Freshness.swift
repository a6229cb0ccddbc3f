import Foundation

/// `granary check`: whether each user has a verified archive younger than a limit.
///
/// Only archives whose verification record still matches them count (see
/// `VerificationRecord`): an archive that was never verified, failed, or changed since does
/// not vouch for the user, however new it is.
public enum Freshness {
    /// One user's standing.
    public struct Report: Sendable {
        public let user: UserID
        /// Whether the user passes.
        public let ok: Bool
        /// The newest verified archive, if any.
        public let newestVerified: Repository.Entry?
        /// Its age in seconds.
        public let age: TimeInterval?
        /// The newest archive of any state, if any.
        public let newest: Repository.Entry?
        /// Why the user fails (`nil` when ok).
        public let reason: String?
    }

    /// Evaluates `users` against `maxAge` seconds at `now`.
    public static func evaluate(
        users: [UserID], repository: Repository, maxAge: TimeInterval, now: Date = Date()
    ) -> [Report] {
        users.map { user in
            // Regular backups only: a safety archive is what a restore replaced, not a backup.
            let archives = repository.archives(of: user).filter { $0.name.kind == .backup }
            let newest = archives.last
            let verified = archives.last { VerificationRecord.read(for: $0.path)?.isGood == true }
            guard let newest else {
                return Report(user: user, ok: false, newestVerified: nil, age: nil, newest: nil, reason: "has no archives")
            }
            guard let verified else {
                let state = VerificationRecord.read(for: newest.path).map { $0.isGood ? "verified" : "bad" } ?? "not verified"
                return Report(
                    user: user, ok: false, newestVerified: nil, age: nil, newest: newest,
                    reason: "has no verified archive (newest, \(newest.name), is \(state))")
            }
            let age = now.timeIntervalSince(verified.name.created)
            if age > maxAge {
                return Report(
                    user: user, ok: false, newestVerified: verified, age: age, newest: newest,
                    reason: "newest verified archive \(verified.name) is \(describe(age)) old, over the \(describe(maxAge)) limit")
            }
            return Report(user: user, ok: true, newestVerified: verified, age: age, newest: newest, reason: nil)
        }
    }

    /// `90061` → `1d1h1m`.
    public static func describe(_ seconds: TimeInterval) -> String {
        var rest = Int64(max(0, seconds))
        var text = ""
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60)] where rest >= size {
            text += "\(rest / size)\(unit)"
            rest %= size
        }
        if text.isEmpty || (rest > 0 && text.count < 3) { text += "\(rest)s" }
        return text
    }
}
