import Foundation

/// The links of a delta's chain, proved whole from their heads alone (issue 46): before a delta is
/// written on an archive, and before `check` counts one.
///
/// Each link, from the archive back to its chain's full, must be
/// - present in the repository under the name the delta after it records,
/// - the archive that delta was built on: its manifest's SHA-256 is the one recorded,
/// - not recorded as bad by `granary verify`,
/// - unchanged since it was written: a verification record beside it (the backup's own, or a
///   verify's) that no longer matches its size and modification stamp means its bytes were
///   touched (cut short, a byte flipped, replaced) since.
///
/// Only manifests and the small records beside the archives are read: the cost is one manifest
/// per link, whatever the stores weigh. What the heads cannot see (a member damaged in an archive
/// whose backup ran with `check = none`, so that no record holds its size) is found by `verify`,
/// which rebuilds the chain.
struct ChainLinks {
    /// One link: the archive, its manifest and that manifest's SHA-256.
    struct Link {
        var entry: RepositoryEntry
        var manifest: Manifest
        var digest: String
    }

    /// Why a chain is not whole: the archive at fault and what is wrong with it, to follow
    /// "the newest backup, NAME, ".
    struct Break: Error, CustomStringConvertible {
        /// The archive at fault (the link missing, replaced, bad or changed), by file name.
        let archive: String
        let description: String
    }

    /// The links, newest first (the first is the archive itself, the last the chain's full).
    let links: [Link]

    /// The identity of the whole chain: each link's name, manifest SHA-256, size and modification
    /// stamp as listed, newest first (``line(_:digest:)``). Two chains with one identity hold the
    /// same manifests (which name every member's SHA-256) in files of the same sizes, untouched.
    var identity: [String] { links.map { Self.line($0.entry, digest: $0.digest) } }

    /// One link's line of an identity.
    static func line(_ entry: RepositoryEntry, digest: String) -> String {
        "\(entry.name.fileName) \(digest) \(entry.size) \(entry.modified)"
    }

    /// Walks `entry`'s chain in `repository` (`archives`: the user's archives, as listed).
    /// `records`: whether what the records say counts (`verify`, which reads everything again
    /// and writes the records, looks at the archives alone).
    static func walk(
        _ entry: RepositoryEntry, repository: any Repository, archives: [RepositoryEntry]? = nil, records: Bool = true
    ) -> Result<ChainLinks, Break> {
        do {
            let archives = try archives ?? repository.archives(of: entry.user)
            let sidecars = entry.object == nil || !records ? [:] : repository.readSidecars(in: entry.user.rawValue)
            var links: [Link] = []
            var current = entry
            var expected: (digest: String, after: String)?
            while true {
                if let problem = Self.problem(with: current, sidecars: sidecars) {
                    return .failure(
                        Break(archive: current.name.fileName, description: describe(current, expected?.after, problem)))
                }
                let (manifest, digest): (Manifest, String)
                do {
                    let head = try repository.head(of: current)
                    (manifest, digest) = (head.manifest, head.sha256)
                } catch let failure as VerificationFailure {
                    return .failure(
                        Break(
                            archive: current.name.fileName,
                            description: describe(current, expected?.after, "cannot be read (\(failure.reason))")))
                }
                if let expected, expected.digest != digest {
                    return .failure(
                        Break(
                            archive: current.name.fileName,
                            description:
                                "is built on \(current.name.fileName), which is not the archive \(expected.after) was built on (its manifest differs: replaced by another archive of that name)"
                        ))
                }
                links.append(Link(entry: current, manifest: manifest, digest: digest))
                guard let base = manifest.delta?.base else { break }
                guard links.count < DeltaRestore.chainLimit else {
                    return .failure(
                        Break(
                            archive: current.name.fileName,
                            description: "has a chain longer than \(DeltaRestore.chainLimit) archives"))
                }
                guard let found = archives.first(where: { $0.name.isNamed(base.name) }) else {
                    return .failure(
                        Break(
                            archive: base.name,
                            description:
                                "is built on \(base.name), which is not in the repository (the base of \(current.name.fileName))"
                        ))
                }
                expected = (base.manifestSHA256, current.name.fileName)
                current = found
            }
            return .success(ChainLinks(links: links))
        } catch {
            let text = (error as? any GranaryError)?.description ?? "\(error)"
            return .failure(Break(archive: entry.name.fileName, description: "cannot be read (\(text))"))
        }
    }

    /// What the records beside `entry` say against it: recorded bad by verify, or changed since
    /// its record was written. Nil when nothing is known against it.
    static func problem(with entry: RepositoryEntry, sidecars: [String: [UInt8]]) -> String? {
        guard entry.object != nil, let bytes = sidecars[entry.name.fileName] else { return nil }
        guard let record = VerificationRecord.decode(bytes, matching: entry) else {
            // A record that no longer matches: the archive's size or stamp changed since it was
            // checked (a record of an unreadable form is no evidence either way).
            guard let stale = VerificationRecord.decodeAny(bytes), stale.archive.map(entry.name.isNamed) ?? true
            else { return nil }
            if stale.archiveSize == entry.size && stale.archiveModified == entry.modified {
                return
                    "changed since it was \(stale.by == nil ? "verified" : "written"): another file in its place, same size and modification time (as cp -p leaves it); granary verify checks it again"
            }
            return
                stale.archiveSize == entry.size
                ? "changed since it was \(stale.by == nil ? "verified" : "written"): another modification time, same size (as a copy without modification times leaves it); granary verify checks it again"
                : "changed since it was \(stale.by == nil ? "verified" : "written") (\(stale.archiveSize) bytes then, \(entry.size) now)"
        }
        if record.result == .bad {
            return "was found bad by granary verify (\(record.reason ?? "no reason recorded"))"
        }
        return nil
    }

    private static func describe(_ entry: RepositoryEntry, _ after: String?, _ problem: String) -> String {
        guard let after else { return problem }
        return "is built on \(entry.name.fileName), which \(problem) (the base of \(after))"
    }
}
