import Foundation

/// `restore --at`: the followed window that holds the time, its base and the replay
/// (docs/follow.md, "`restore --at`"). What it says of the time is never more than it can show:
///
/// - a time inside a generation's window (as its segments' names give it; the replay checks
///   each segment's trailer against its name) replays its commits up to the time;
/// - a time past the end of the newest generation's window that `follow`'s state attests (it
///   names that generation, the sequence of its last segment and the last observation shipped,
///   and was caught up through a moment at or after the time) is within the window too: every
///   commit made before that moment is in the segments, so the whole generation is replayed;
/// - any other time past a window's end restores that end (the newest point covered) when it is
///   newer than the newest archive at or before the time, and says so, never claiming the time;
/// - else the newest archive at or before the time, said when the user is followed at all.
public enum FollowRestore {
    /// Points `request` at what restores `request.at` as described above, and says what it
    /// restores in `request.notes` (a warning, in the text and JSON output, `--dry-run` too).
    public static func prepare(_ request: inout RestoreRequest, repository: any Repository, cap: Int64) {
        guard let at = request.at, request.archive == nil, !request.undo else { return }
        let micros = ArchiveName.micros(at)
        // A time to the second covers that second, as for archives.
        let end = micros % 1_000_000 == 0 ? micros + 999_999 : micros
        let host = repository.context.host
        let user = request.user
        let stamp = ArchiveName.stamp(micros: end, precise: true)
        let generations: [FollowCatalogue.Generation]
        do {
            generations = try FollowCatalogue.generations(in: repository, user: user, host: host)
        } catch {
            // The segments cannot be listed: said, so that a restore to the archive before the
            // time is never taken for the time itself.
            request.notes.append(
                "the followed windows of \(user.rawValue) cannot be listed (\(error.description)): restoring the newest archive at or before \(stamp) without the commits after it"
            )
            return
        }
        let limits = request.context.limits
        func replay(_ generation: FollowCatalogue.Generation, through point: Int64, note: String) {
            request.archive = generation.name
            request.at = nil
            request.notes.append(note)
            request.afterStaging = { staged in
                _ = try FollowReplay.replay(
                    generation, user: user, at: point, staged: staged, cap: cap, limits: limits,
                    repository: repository)
            }
        }
        if let generation = FollowCatalogue.covering(end, in: generations) {
            replay(
                generation, through: end,
                note: "within the followed window of \(generation.name): its commits replayed up to \(stamp)")
            return
        }
        guard !generations.isEmpty else { return }
        let entry = FollowStatus.read(from: repository, host: host)?.users[user.rawValue]
        if let found = attested(end, generations: generations, entry: entry) {
            let (generation, through) = found
            replay(
                generation, through: end,
                note:
                    "within the followed window of \(generation.name) (attested by follow through \(ArchiveName.stamp(micros: through, precise: true))): its commits replayed up to \(stamp)"
            )
            return
        }
        if let found = newestPoint(atOrBefore: end, in: generations) {
            let (generation, point) = found
            let archive = ((try? repository.archives(of: user)) ?? [])
                .last { $0.name.kind == .backup && $0.name.micros <= end }
            if archive.map({ $0.name.micros < point }) ?? true {
                let e = ArchiveName.stamp(micros: point, precise: true)
                replay(
                    generation, through: point,
                    note:
                        "\(stamp) is past the followed window's end \(e) of \(user.rawValue): restoring to \(e), the newest point covered; commits after \(e), if any, were not shipped"
                )
                return
            }
        }
        request.notes.append(
            "\(stamp) is outside every followed window of \(user.rawValue): restoring the newest archive at or before it"
        )
    }

    /// The generation and the moment through which `follow`'s state `entry` attests that every
    /// commit of the user is in its segments, when that moment is at or after `at` and the
    /// window ends at or before it: the state names the newest generation listed, the sequence
    /// of its last segment (the segments run from 1 without a hole) and, when it records one,
    /// that segment's last observation, and the follower's unbroken stretch (``FollowStatus/User/steadySince``)
    /// began at or before the window's end. Anything else (no state, another generation, a
    /// sequence or observation the listing does not show, a moment before `at`, a stretch that
    /// began after the window's end: a restart, a failed round, a pause) attests nothing.
    public static func attested(
        _ at: Int64, generations: [FollowCatalogue.Generation], entry: FollowStatus.User?
    ) -> (FollowCatalogue.Generation, Int64)? {
        guard let entry, let through = entry.shippedThrough, through >= at,
            let generation = generations.last, entry.generation == generation.name,
            generations.filter({ $0.name == generation.name }).count == 1,
            let window = generation.window, window.to <= at,
            // The follower was following without a break from before the window's end to
            // `through`: no restart of follow, failed round or pause in between, when a store
            // could have come and gone unseen.
            let steady = entry.steadySince, steady <= window.to,
            let last = generation.segments.last, last.sequence == entry.sequence,
            entry.lastShipped.map({ $0 == last.last }) ?? true
        else { return nil }
        return (generation, through)
    }

    /// The newest moment at or before `at` that a generation's windows end at (the generation and
    /// the moment), nil when none does.
    public static func newestPoint(atOrBefore at: Int64, in generations: [FollowCatalogue.Generation])
        -> (FollowCatalogue.Generation, Int64)?
    {
        var best: (FollowCatalogue.Generation, Int64)?
        for generation in generations {
            for piece in generation.windows where piece.to <= at && piece.to >= (best?.1 ?? .min) {
                best = (generation, piece.to)
            }
        }
        return best
    }
}
