import Foundation

/// Chains of delta archives in a repository (issue 35): what `prune` must keep.
public enum DeltaChains {
    /// The reason an archive is kept because a kept delta is built on it.
    public static func baseReason(of delta: String) -> String { "base of \(delta)" }

    /// Adds to `kept` every archive a kept delta of `archives` (one user's, oldest first) is
    /// built on, all the way to its full: a delta without its chain cannot be restored. A delta
    /// whose manifest cannot be read keeps every older archive back to the newest one whose
    /// name is not a delta's (its base is one of them, and nothing tells which).
    public static func keepBases(
        of archives: [RepositoryEntry], kept: inout [String: [String]], repository: any Repository
    ) {
        var work = archives.filter { $0.name.saysDelta && !(kept[$0.path] ?? []).isEmpty }
        var done: Set<String> = []
        while let delta = work.popLast() {
            guard done.insert(delta.path).inserted else { continue }
            var bases: [RepositoryEntry] = []
            if let (manifest, _) = try? DeltaRestore.head(delta, repository: repository) {
                if let name = manifest.delta?.base?.name, let base = archives.first(where: { $0.name.fileName == name })
                {
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
