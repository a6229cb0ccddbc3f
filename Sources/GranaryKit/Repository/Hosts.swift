import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which host an archive belongs to, and which hosts' archives a run acts on.
///
/// Several app servers may share one repository or one mirror, with the same user ids. Every
/// archive records its host twice: in its manifest (`host`), and in the name of an empty object
/// beside it, its **host marker** `USER/.NAME.host=HOST`. The marker is what listings read: a
/// folder's listing gives every archive's host without downloading anything, and the archive
/// itself stays a plain tar under the name PRODUCT.md gives it. The marker is written before the
/// archive (an archive never shows without it) and removed after it.
///
/// A run acts on this host's archives only (``RunContext/hostScope``, given to the repository
/// when it is opened): `archives(of:)` lists the archives
/// whose marker names the host, and the **unmarked** ones (written before hosts existed, when a
/// repository served one host): every host counts those as its own. `list --all-hosts` lists
/// every host's.
///
/// What `delete` and `prune` remove is recorded first, per host and user, in the **deletion
/// record** `.granary-deleted/HOST/USER` (one archive name a line, the newest
/// ``deletionRecordLimit``): `sync` removes from a mirror only archives this record names, so
/// that an archive the repository never had (a new repository after a disaster, another
/// host's) is never removed from a mirror.
public enum Hosts {
    /// The machine's host name (its first label when it is not a valid host name as a whole).
    public static var machine: String { HostName.machine }

    /// Host names: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    public static func isValid(_ name: String) -> Bool { HostName.isValid(name) }

    /// What a host marker's name holds between the archive's name and the host's.
    static let markerInfix = ".host="

    /// `.NAME.host=HOST`, the marker of the archive `NAME` in its folder.
    public static func markerName(archive: String, host: String) -> String {
        "." + archive + markerInfix + host
    }

    /// The object name of the marker of `object` (`USER/NAME`).
    public static func marker(of object: String, host: String) -> String {
        guard let slash = object.lastIndex(of: "/") else { return markerName(archive: object, host: host) }
        return String(object[...slash]) + markerName(archive: String(object[object.index(after: slash)...]), host: host)
    }

    /// (archive name, host) of a marker's name; nil for any other name.
    public static func parseMarker(_ name: String) -> (archive: String, host: String)? {
        guard name.hasPrefix("."), let infix = name.range(of: markerInfix, options: .backwards) else { return nil }
        let archive = String(name[name.index(after: name.startIndex)..<infix.lowerBound])
        let host = String(name[infix.upperBound...])
        guard isValid(host), ArchiveName(fileName: archive) != nil else { return nil }
        return (archive, host)
    }

    /// The folder of `host`'s deletion records (hidden: never taken for a user's folder).
    public static func deletionRecords(host: String) -> String { ".granary-deleted/" + host }

    /// The deletion record of `host` for `user`: beside the users' folders, not in them, so that a
    /// user whose every archive went leaves no folder behind, and sync still finds the record.
    public static func deletionRecord(user: UserID, host: String) -> String {
        deletionRecords(host: host) + "/" + user.rawValue
    }

    /// The names a deletion record keeps (the newest): about a year of hourly archives.
    public static let deletionRecordLimit = 10_000
}

/// `granary adopt`: legacy archives given today's names, under each user's lock.
public enum Adoption {
    /// What adopting did for one user.
    public struct Report: Sendable {
        public let user: UserID
        /// The names the archives now have (or would have, in a dry run).
        public var adopted: [String] = []
        /// Legacy archives left without a host: their manifest names none that is valid.
        public var left: [String] = []
        public var error: (any GranaryError & Sendable)?
    }

    /// Converts `users`' legacy archives in `repository` (every user of it when empty): this host's
    /// marked ones, and the unmarked ones under the host their manifest names.
    public static func run(
        repository: any Repository, users: [UserID], root: Root?, lockTimeout: Duration, dryRun: Bool
    ) throws -> [Report] {
        try repository.requireExisting()
        let ids = users.isEmpty ? try repository.users() : users
        return ids.map { user in
            var report = Report(user: user)
            do {
                let lock = try root.map { try UserLock.acquire(root: $0, user: user, timeout: lockTimeout) }
                defer { lock?.release() }
                report.adopted = try repository.convertLegacyArchives(of: user, adopting: true, dryRun: dryRun)
                if !dryRun {
                    report.left = try repository.unownedArchives(of: user).map(\.name.fileName)
                }
            } catch let error as any GranaryError & Sendable {
                report.error = error
            } catch {
                report.error = UnexpectedError(description: "\(user): \(error)")
            }
            return report
        }
    }
}

/// A host name that cannot be used.
public struct InvalidHost: GranaryError, Sendable {
    public let name: String
    public init(name: String) { self.name = name }
    public var description: String {
        "invalid host name \(name.debugDescription): use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit"
    }
}

extension Repository {
    /// Gives `user`'s legacy archives of this host (``RunContext/host``: a legacy name with this
    /// host's marker) the names of today's layout, and with `adopting`, also those of no host (no
    /// marker: written before hosts), each under the host its manifest names. Returns the names
    /// given.
    ///
    /// Each archive keeps its stamp, sequence and label and gains `.HOST` (``ArchiveName/withHost(_:)``),
    /// so that a delta's base, recorded by its legacy name, is still found. Per archive:
    /// the verification record is written for the new name first, then the archive is renamed
    /// (``rename(_:to:)``, never over another object), then the old record and the marker go.
    /// Stopped at any point, the archive is listed once (a legacy archive whose new name exists
    /// is hidden) and the next run finishes it: idempotent, each archive exactly once.
    public func convertLegacyArchives(of user: UserID, adopting: Bool = false, dryRun: Bool = false) throws
        -> [String]
    {
        let listed = try objects(in: user.rawValue)
        let names = Set(listed.filter { !$0.name.hasPrefix(".") }.map(\.name))
        var markers: [String: [String]] = [:]
        for object in listed {
            if let (archive, host) = Hosts.parseMarker(object.name) { markers[archive, default: []].append(host) }
        }
        var converted: [String] = []
        for object in listed {
            guard !object.name.hasPrefix("."), let legacy = ArchiveName(fileName: object.name), legacy.host == nil
            else { continue }
            try Interruption.check()
            let key = user.rawValue + "/" + object.name
            let marked = markers[object.name]
            // This host's marked archives; with `adopting`, unmarked ones too.
            guard marked?.contains(context.host) ?? adopting else { continue }
            // The manifest decides whose it is: a marker can lie (two hosts' markers beside one
            // archive, left by the marker scheme's races); an archive is named only as the host
            // its manifest records, and a marked one only when that is this host.
            var entry = RepositoryEntry(
                user: user, name: legacy, path: display(key), size: object.size, modified: object.modified, object: key)
            entry.localFile = localPath.map { $0 + "/" + key }
            guard let manifest = try? head(of: entry).manifest, Hosts.isValid(manifest.host) else { continue }
            if marked != nil && manifest.host != context.host { continue }
            let host = manifest.host
            let target = legacy.withHost(host)
            let targetKey = user.rawValue + "/" + target.fileName
            if dryRun {
                if !names.contains(target.fileName) { converted.append(target.fileName) }
                continue
            }
            if names.contains(target.fileName) {
                // Converted already, its old name left by a run that stopped: the same bytes go.
                // Other bytes under the new name: both stay, and so does the marker (the legacy
                // archive stays listed as this host's until someone looks).
                guard let copy = listed.first(where: { $0.name == target.fileName }), copy.size == object.size,
                    try settle(targetKey, sameAs: key)
                else { continue }
                try delete(key)
            } else {
                if let bytes = readSidecar(of: key) {
                    if var record = VerificationRecord.decode(bytes, matching: entry) {
                        record.archive = target.fileName
                        // (The rename gives the file a new change time: the record keeps none.)
                        record.archiveIdentity = nil
                        try? writeSidecar(record.encoded(), of: targetKey)
                    }
                }
                CrashPoint.reach(.convertRecorded)
                let renamed: Bool
                do { renamed = try rename(key, to: targetKey) } catch {
                    // Renamed by another run meanwhile: nothing left to do here.
                    if case .missing = error { continue }
                    if case .local(let failure) = error, failure.code == ENOENT { continue }
                    throw error
                }
                guard renamed else { continue }
                CrashPoint.reach(.convertRenamed)
                try? deleteSmall(user.rawValue + "/." + object.name + ".verify.json")
                converted.append(target.fileName)
            }
            for marker in markers[object.name] ?? [] where marker == host {
                try? deleteSmall(Hosts.marker(of: key, host: marker))
            }
        }
        // A marker of this host whose archive has its new name already (a conversion stopped
        // after the rename): the marker goes too.
        if !dryRun {
            for (archive, hosts) in markers where !names.contains(archive) && hosts.contains(context.host) {
                guard let legacy = ArchiveName(fileName: archive),
                    names.contains(legacy.withHost(context.host).fileName)
                else { continue }
                try? deleteSmall(Hosts.marker(of: user.rawValue + "/" + archive, host: context.host))
                try? deleteSmall(user.rawValue + "/." + archive + ".verify.json")
            }
        }
        return converted
    }

    /// The users of the repository with an archive of the host ``RunContext/hostScope`` names
    /// (every user for nil): on a repository several hosts share, `check` judges this host's.
    public func usersOfHost() throws(RepositoryError) -> [UserID] {
        guard context.hostScope != nil else { return try users() }
        var result: [UserID] = []
        for user in try users() where !(try archives(of: user)).isEmpty { result.append(user) }
        return result
    }

    /// The archive names `host`'s deletion record for `user` holds.
    public func deletedNames(of user: UserID, host: String) throws(RepositoryError) -> Set<String> {
        guard let bytes = try readSmall(Hosts.deletionRecord(user: user, host: host)) else { return [] }
        return Set(String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init))
    }

    /// The users `host` has a deletion record of.
    public func usersWithDeletions(host: String) -> [UserID] {
        ((try? objects(in: Hosts.deletionRecords(host: host))) ?? []).compactMap { try? UserID($0.name) }
    }

    /// Adds `names` to `host`'s deletion record for `user` (before they are deleted).
    func recordDeletion(of names: [String], user: UserID, host: String) throws(RepositoryError) {
        let record = Hosts.deletionRecord(user: user, host: host)
        var lines =
            (try readSmall(record)).map { String(decoding: $0, as: UTF8.self).split(separator: "\n").map(String.init) }
            ?? []
        let known = Set(lines)
        lines += names.filter { !known.contains($0) }
        if lines.count > Hosts.deletionRecordLimit { lines.removeFirst(lines.count - Hosts.deletionRecordLimit) }
        try writeSmall(Array((lines.joined(separator: "\n") + "\n").utf8), to: record)
    }

    /// Archive names of `user` with a marker of this host and no archive: what an upload killed
    /// between the two left (the caller holds the user's lock, so no live run of this host is
    /// writing one).
    public func orphanedArchives(of user: UserID) -> [String] {
        guard let listed = try? objects(in: user.rawValue) else { return [] }
        let names = Set(listed.map(\.name))
        return listed.compactMap { object in
            guard let (archive, host) = Hosts.parseMarker(object.name), host == context.host,
                !names.contains(archive)
            else { return nil }
            return archive
        }
    }

    /// `delete` and `prune`: records each archive in its user's deletion record of this host
    /// (``RunContext/host`` of the repository's context), then removes it (``remove(_:)``): `sync` removes from the mirrors what
    /// the record names, and nothing else.
    public func removeRecorded(_ entries: [RepositoryEntry]) throws(RepositoryError) {
        var byUser: [UserID: [String]] = [:]
        for entry in entries where entry.object != nil { byUser[entry.user, default: []].append(entry.name.fileName) }
        for (user, names) in byUser.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            try recordDeletion(of: names, user: user, host: context.host)
        }
        try remove(entries)
    }
}
