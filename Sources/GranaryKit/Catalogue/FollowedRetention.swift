import Foundation

/// `prune`'s rules for `follow`'s segments (docs/follow.md), a step of their own beside the
/// archives' rules: each host's newest generation of a user is the one a `follow` may be
/// writing to, and keeps its base archive whatever the rules say (and, through `DeltaChains`,
/// the base's chain); so does a generation whose window ended within `followed_keep_within` of
/// now. A generation is removed when its base is gone or going, or when its window ended
/// before that span, never while it is its host's newest. No segment is ever left without its
/// base, and a running follower never publishes onto a base that prune removed.
public enum FollowedRetention {
    /// Why an archive is kept: a followed window within the span replays onto it.
    public static let reason = "followed window"
    /// Why an archive is kept: it is the base of a generation a follower may still be writing.
    public static let liveReason = "followed generation"

    /// What prune needs of `follow` for one user, read once per prune (the rules that keep bases
    /// and the step that removes generations both use it; removing archives changes neither).
    public struct Followed: Sendable {
        /// The user's generations in the repository (this host's, or every host's).
        public let generations: [FollowedGenerations.Generation]
        /// The bases (archive file names) of the generations a follower may still write to: each
        /// host's newest, by its base's time; and the one each host's follower last said it
        /// follows (`.granary-follow/HOST.json`), which may have no segment listed yet.
        public let live: Set<String>

        /// One listing of `user`'s generations, and each host's follow state read once.
        public static func read(user: UserID, repository: any Repository) throws(RepositoryError) -> Followed {
            let generations = try FollowedGenerations.list(
                in: repository, user: user, host: repository.context.hostScope)
            var newest: [String: FollowedGenerations.Generation] = [:]
            for generation in generations {
                if let known = newest[generation.host],
                    (ArchiveName(fileName: known.base)?.micros ?? 0)
                        > (ArchiveName(fileName: generation.base)?.micros ?? 0)
                {
                    continue
                }
                newest[generation.host] = generation
            }
            var bases = Set(newest.values.map(\.base))
            for host in Set(newest.keys).union([repository.context.host]) {
                if let followed = FollowStatus.read(from: repository, host: host)?.users[user.rawValue]?.generation {
                    bases.insert(followed)
                }
            }
            return Followed(generations: generations, live: bases)
        }
    }

    /// One generation prune removes, and why.
    public struct Removal: Sendable, Equatable {
        public let generation: FollowedGenerations.Generation
        public let why: String
    }

    /// Marks the base of every generation of `user` whose window ended within
    /// `policy.followedKeepWithin` of `now` as kept (in `kept`, by archive path).
    static func keepBases(
        _ followed: Followed, archives: [RepositoryEntry], kept: inout [String: [String]], policy: RetentionPolicy,
        now: Date
    ) {
        for base in followed.live {
            for entry in archives where entry.name.fileName == base && !(kept[entry.path] ?? []).contains(liveReason) {
                kept[entry.path, default: []].append(liveReason)
            }
        }
        guard let span = policy.followedKeepWithin else { return }
        let cutoff = ArchiveName.micros(span.start(before: now))
        for generation in followed.generations {
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
        _ followed: Followed, remaining: Set<String>, policy: RetentionPolicy, now: Date = Date()
    ) -> [Removal] {
        let cutoff = policy.followedKeepWithin.map { ArchiveName.micros($0.start(before: now)) }
        var result: [Removal] = []
        for generation in followed.generations {
            if followed.live.contains(generation.base) && remaining.contains(generation.base) {
                continue
            } else if !remaining.contains(generation.base) {
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
