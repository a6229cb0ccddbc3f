import Foundation

/// `check`'s view of `granary follow` (docs/follow.md): per user followed on this host, the lag
/// (from the state the follower writes after each round, ``FollowStatus``) and the gaps (from
/// the segments in the repository).
public enum FollowHealth {
    public struct Report: Sendable, Equatable {
        public let user: UserID
        /// Seconds behind (nil: follow never shipped this user through, or wrote no state).
        public var lag: TimeInterval?
        /// When the newest commit shipped was observed.
        public var lastShipped: Date?
        /// A hole in what a restore can reach now: a segment missing, the base gone, or no
        /// generation (following paused before a base could be taken).
        public var gap: String?
        /// What check fails the user for (nil: following is fine).
        public var problem: String?
        /// The follower's state names no generation of the user (none could start: a folder with
        /// no store yet among the reasons); ``problem`` then says why.
        public var noGeneration = false
    }

    /// The users of `users` that `host` follows (an entry in its state, or segments of its in the
    /// repository), each with its lag and gaps at `now`; a lag over `maxLag` is a problem.
    /// The repository may be local or remote (one listing of each user's segments).
    /// `nothingToBackUp`: the users with nothing to back up yet (a folder with no store, no
    /// archive): with no generation to follow either, that is no alarm, as it is none for backups.
    public static func evaluate(
        users: [UserID], repository: any Repository, host: String, maxLag: TimeInterval, now: Date = Date(),
        nothingToBackUp: Set<UserID> = []
    ) throws(RepositoryError) -> [UserID: Report] {
        let status = FollowStatus.read(from: repository, host: host)
        let micros = ArchiveName.micros(now)
        var reports: [UserID: Report] = [:]
        for user in users {
            let generations = try FollowedGenerations.list(in: repository, user: user, host: host)
            let entry = status?.users[user.rawValue]
            guard entry != nil || !generations.isEmpty else { continue }
            var report = Report(user: user)
            var problems: [String] = []
            if let entry {
                report.lastShipped = entry.lastShipped.map { Date(timeIntervalSince1970: Double($0) / 1e6) }
                if let lag = status?.lag(of: user.rawValue, now: micros) {
                    report.lag = Double(lag) / 1e6
                }
                if entry.generation == nil {
                    report.noGeneration = true
                    report.gap = "no followed window: " + (entry.paused ?? "no generation could start")
                }
                if let lag = report.lag, lag > maxLag {
                    var text = "follow lags \(describe(lag)) behind"
                    if let paused = entry.paused, entry.generation != nil { text += " (\(paused))" }
                    problems.append(text)
                } else if report.lag == nil && report.gap == nil {
                    problems.append("follow has shipped nothing of this user yet")
                }
            } else {
                problems.append("segments of \(host) but no state from its follow: follow is not running on \(host)")
            }
            if report.gap == nil, let newest = generations.last {
                let archives = (try? repository.archives(of: user, host: nil)) ?? []
                if !newest.missing.isEmpty {
                    report.gap =
                        "segments \(newest.missing.map(String.init).joined(separator: ", ")) of \(newest.base) are missing"
                } else if !archives.contains(where: { $0.name.fileName == newest.base }) {
                    report.gap = "the base \(newest.base) of the newest followed window is gone"
                }
            }
            if report.noGeneration, nothingToBackUp.contains(user) {
                report.gap = nil
                reports[user] = report
                continue
            }
            if let gap = report.gap { problems.append(gap) }
            report.problem = problems.isEmpty ? nil : problems.joined(separator: "; ")
            reports[user] = report
        }
        return reports
    }

    /// `90s`, `5min`, `2h`: a lag in words.
    static func describe(_ seconds: TimeInterval) -> String {
        let s = Int64(seconds)
        if s < 120 { return "\(s)s" }
        if s < 7200 { return "\(s / 60)min" }
        return "\(s / 3600)h"
    }
}
