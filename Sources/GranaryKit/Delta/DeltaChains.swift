import Foundation

/// Chains of delta archives in a repository (issue 35): what `prune` must keep.
public enum DeltaChains {
    /// The reason an archive is kept because a kept delta is built on it.
    public static func baseReason(of delta: String) -> String { "base of \(delta)" }

    /// Adds to `kept` every archive a kept delta of `archives` (one user's, oldest first) is
    /// built on, all the way to its full: a delta without its chain cannot be restored. A delta
    /// whose manifest cannot be read keeps every older archive back to the newest one whose
    /// name is not a delta's (its base is one of them, and nothing tells which).
    ///
    /// `reading` says where an archive's manifest is read from when it is not `repository`
    /// (a dry-run sync counts the deltas it would send, which are still in the primary).
    /// Invariant D10 (docs/delta-invariants.md).
    public static func keepBases(
        of archives: [RepositoryEntry], kept: inout [String: [String]], repository: any Repository,
        reading: (RepositoryEntry) -> (any Repository)? = { _ in nil }
    ) {
        var work = archives.filter { $0.name.saysDelta && !(kept[$0.path] ?? []).isEmpty }
        var done: Set<String> = []
        while let delta = work.popLast() {
            guard done.insert(delta.path).inserted else { continue }
            var bases: [RepositoryEntry] = []
            if let manifest = try? (reading(delta) ?? repository).head(of: delta).manifest {
                if let name = manifest.delta?.base?.name, let base = archives.first(where: { $0.name.isNamed(name) }) {
                    bases = [base]
                }
            } else if let index = archives.firstIndex(of: delta) {
                for older in archives[..<index].reversed() {
                    bases.append(older)
                    if !older.name.saysDelta { break }
                }
            }
            for base in bases {
                let reason = baseReason(of: delta.name.fileName)
                if !(kept[base.path] ?? []).contains(reason) { kept[base.path, default: []].append(reason) }
                if base.name.saysDelta { work.append(base) }
            }
        }
    }
}

/// Mirrors and `sync` carry chains whole (issue 35): a delta reaches a mirror only after every
/// link of its chain the mirror lacks, oldest first, and never when a link is missing from the
/// repository as well (it would arrive as a delta nothing can restore).
extension DeltaChains {
    /// The archives of `primary` that must reach a mirror before `manifest`'s archive (`name`, of
    /// `user`) can: its base, that base's base…, up to the first one the mirror has (`onMirror`,
    /// file names) or the chain's full; oldest first. Each link is found by name among
    /// `archives` (`primary`'s archives of the user, read once by the caller) and its manifest's
    /// SHA-256 checked against what the archive after it recorded; so is the first one the mirror
    /// has, when the repository has it too, and that one's copy on the mirror (`mirrorDigest`:
    /// the manifest SHA-256 of the mirror's archive of that name, nil when it cannot be read as
    /// an archive). Empty for a full.
    /// Throws ``ChainGap`` when a link is in neither place (or is not the archive named).
    public static func missingLinks(
        of name: String, manifest: Manifest, user: UserID, in primary: any Repository, archives: [RepositoryEntry],
        onMirror: Set<String>, mirror: String, mirrorDigest: (String) throws -> String?
    ) throws -> [RepositoryEntry] {
        var links: [RepositoryEntry] = []
        var current = (name: name, manifest: manifest)
        while let base = current.manifest.delta?.base {
            let found = archives.first { $0.name.isNamed(base.name) }
            if onMirror.contains(base.name) {
                // The mirror has it by name: when the repository has it too, it must be the archive
                // the delta was built on (the mirror's copy came from the repository's).
                if let found, try primary.head(of: found).sha256 != base.manifestSHA256 {
                    throw ChainGap(
                        user: user, archive: current.name, base: base.name, mirror: mirror, reason: .replaced)
                }
                // And the mirror's copy is that archive (not one of the same name from elsewhere,
                // such as another repository's, or a copy damaged there).
                guard try mirrorDigest(base.name) == base.manifestSHA256 else {
                    throw ChainGap(
                        user: user, archive: current.name, base: base.name, mirror: mirror, reason: .mirrorReplaced)
                }
                break
            }
            guard links.count < DeltaRestore.chainLimit else {
                throw ChainGap(user: user, archive: name, base: base.name, mirror: mirror, reason: .tooLong)
            }
            guard let entry = found else {
                throw ChainGap(user: user, archive: current.name, base: base.name, mirror: mirror, reason: .missing)
            }
            let head = try primary.head(of: entry)
            let (older, digest) = (head.manifest, head.sha256)
            guard digest == base.manifestSHA256 else {
                throw ChainGap(user: user, archive: current.name, base: base.name, mirror: mirror, reason: .replaced)
            }
            links.append(entry)
            current = (base.name, older)
        }
        return links.reversed()
    }

    /// Of `archives` (one user's on a mirror, oldest first), those a sync would remove (`gone`)
    /// that a delta staying there is built on, all the way to its full: removing them would leave
    /// a delta nothing can restore. By base name (from each staying delta's manifest); a delta
    /// whose manifest cannot be read keeps every older archive back to the newest full by name.
    ///
    /// Only the deltas that can be built on a removed archive are read: those after the oldest one
    /// removed and before the first full (by name, a regular backup) after the newest one removed
    /// (a delta's base is the newest backup when it was made), so a sync after a prune reads a
    /// day's deltas, not the mirror's history.
    ///
    /// `arriving`: archives of the primary a dry run would send (a real run has sent them, and
    /// they are among `archives`): they stay too, their manifests read from `primary`.
    public static func basesStaying(
        _ archives: [RepositoryEntry], removing gone: [RepositoryEntry], in mirror: any Repository,
        arriving: [RepositoryEntry] = [], from primary: (any Repository)? = nil
    ) -> Set<String> {
        let present = Set(archives.map(\.name.fileName))
        let arriving = arriving.filter { !present.contains($0.name.fileName) }
        let fromPrimary = Set(arriving.map(\.path))
        let archives = (archives + arriving).sorted { $0.name < $1.name }
        guard let oldest = gone.map(\.name).min(), let newest = gone.map(\.name).max() else { return [] }
        let leaving = Set(gone.map(\.path))
        let end =
            archives.firstIndex { $0.name > newest && $0.name.kind == .backup && !$0.name.saysDelta }
            ?? archives.endIndex
        let span = archives[..<end].filter { $0.name >= oldest }
        var kept: [String: [String]] = [:]
        for entry in span where !leaving.contains(entry.path) { kept[entry.path] = ["stays"] }
        keepBases(of: span, kept: &kept, repository: mirror) { fromPrimary.contains($0.path) ? primary : nil }
        return Set(gone.filter { !(kept[$0.path] ?? []).isEmpty }.map(\.name.fileName))
    }
}

/// A delta not sent to a mirror (by a backup or by `sync`) because a link of its chain is in
/// neither the repository nor the mirror, or is not the archive the delta was built on: sent
/// alone it could not be restored there.
public struct ChainGap: GranaryError, Sendable {
    public enum Reason: Sendable {
        /// The base is in neither place.
        case missing
        /// The repository's archive of that name is not the one the delta was built on.
        case replaced
        /// The mirror's archive of that name is not the one the delta was built on.
        case mirrorReplaced
        /// The chain is longer than any backup makes.
        case tooLong
    }

    public let user: UserID
    /// The delta whose base is missing (the archive sent, or a link of its chain).
    public let archive: String
    public let base: String
    public let mirror: String
    public let reason: Reason

    public var description: String {
        switch reason {
        case .missing:
            return
                "\(user)/\(archive) not sent to \(mirror): it is a delta of \(base), which is in neither the repository nor the mirror"
        case .replaced:
            return
                "\(user)/\(archive) not sent to \(mirror): it is a delta of \(base), and the repository's \(base) is not the archive it was built on"
        case .mirrorReplaced:
            return
                "\(user)/\(archive) not sent to \(mirror): it is a delta of \(base), and the mirror's \(base) is not the archive it was built on"
        case .tooLong:
            return
                "\(user)/\(archive) not sent to \(mirror): its chain is longer than \(DeltaRestore.chainLimit) archives"
        }
    }
}

/// The mirror's copy of a user's newest backup does not restore from the mirror as far as its heads
/// and records tell (``ChainLinks``: its chain misses a link there, holds a replaced one or one
/// `verify` found bad, or it changed since it was written): sync sent what it could, but the mirror
/// holds no restorable copy of the user's newest state until a new full is written. The
/// user fails until then.
public struct NewestUnrestorable: GranaryError, Sendable {
    public let user: UserID
    /// The newest archive, by file name.
    public let archive: String
    /// What is wrong, a phrase following "does not restore: ".
    public let reason: String
    public let mirror: String

    public var description: String {
        "\(user)/\(archive), the newest archive, does not restore from \(mirror): \(reason)"
    }
}
