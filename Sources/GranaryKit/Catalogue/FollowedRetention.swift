import Foundation

/// `prune`'s rules for `follow`'s segments (docs/follow.md), a step of their own beside the
/// archives' rules: a generation whose window ended within `followed_keep_within` of now keeps
/// its base archive (and, through `DeltaChains`, the base's chain); a generation is removed when
/// its base is gone or going, or when its window ended before that span. No segment is ever left
/// without its base.
public enum FollowedRetention {
    /// Why an archive is kept: a followed window within the span replays onto it.
    public static let reason = "followed window"

    /// One generation prune removes, and why.
    public struct Removal: Sendable, Equatable {
        public let generation: FollowedGenerations.Generation
        public let why: String
    }

    /// Marks the base of every generation of `user` whose window ended within
    /// `policy.followedKeepWithin` of `now` as kept (in `kept`, by archive path).
    static func keepBases(
        user: UserID, archives: [RepositoryEntry], kept: inout [String: [String]], policy: RetentionPolicy, now: Date,
        repository: any Repository
    ) throws(RepositoryError) {
        guard let span = policy.followedKeepWithin else { return }
        let cutoff = ArchiveName.micros(span.start(before: now))
        for generation in try FollowedGenerations.list(in: repository, user: user, host: repository.context.hostScope) {
            guard let last = generation.lastObserved, last > cutoff,
                let base = archives.first(where: { $0.name.fileName == generation.base && $0.host == generation.host })
            else { continue }
            if !(kept[base.path] ?? []).contains(reason) { kept[base.path, default: []].append(reason) }
        }
    }

    /// The generations of `user` that go once `remaining` (the archive file names that stay) is
    /// all that is left: those whose base is not among them, and (with a span) those whose
    /// window ended before `now` minus the span.
    public static func plan(
        user: UserID, remaining: Set<String>, policy: RetentionPolicy, now: Date = Date(), repository: any Repository
    ) throws(RepositoryError) -> [Removal] {
        let cutoff = policy.followedKeepWithin.map { ArchiveName.micros($0.start(before: now)) }
        var result: [Removal] = []
        for generation in try FollowedGenerations.list(in: repository, user: user, host: repository.context.hostScope) {
            if !remaining.contains(generation.base) {
                result.append(Removal(generation: generation, why: "its base is gone"))
            } else if let cutoff, (generation.lastObserved ?? 0) <= cutoff {
                result.append(Removal(generation: generation, why: "its window ended before followed_keep_within"))
            }
        }
        return result
    }

    /// Removes each generation (its segments, newest first; in a local repository then its
    /// folder, and the host's and the user's `follow` folders when they are left empty).
    public static func remove(_ removals: [Removal], repository: any Repository) throws {
        for removal in removals {
            try FollowedGenerations.remove(removal.generation, from: repository)
        }
    }
}
