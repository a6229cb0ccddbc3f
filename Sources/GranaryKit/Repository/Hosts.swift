import Foundation
import Synchronization

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
/// A run acts on this host's archives only (``scope``): `archives(of:)` lists the archives
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
    private static let state = Mutex<(current: String?, scope: String?)>((nil, nil))

    /// The host this run's archives are written as (`--host`, `host =`, else the machine's name).
    public static var current: String {
        get { state.withLock { $0.current } ?? machine }
        set { state.withLock { $0.current = newValue } }
    }

    /// The host whose archives listings show (with the unmarked ones); nil: every host's (the
    /// library's default; the command line sets this host).
    public static var scope: String? {
        get { state.withLock { $0.scope } }
        set { state.withLock { $0.scope = newValue } }
    }

    /// The machine's host name (its first label when it is not a valid host name as a whole).
    public static var machine: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(cString: buffer)
        if isValid(name) { return name }
        let first = String(name.prefix { $0 != "." })
        return isValid(first) ? first : "localhost"
    }

    /// Host names: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    public static func isValid(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 64, let first = name.unicodeScalars.first,
            ("a"..."z").contains(first) || ("A"..."Z").contains(first) || ("0"..."9").contains(first)
        else { return false }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "."
                || $0 == "_" || $0 == "-"
        }
    }

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

/// A host name that cannot be used.
public struct InvalidHost: GranaryError, Sendable {
    public let name: String
    public init(name: String) { self.name = name }
    public var description: String {
        "invalid host name \(name.debugDescription): use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit"
    }
}

extension Repository {
    /// Publishes `file` as the archive `object` of `host` (no marker for nil: an unmarked archive
    /// copied as it is): the marker first, then the archive; false, and the marker taken back,
    /// when the name is taken.
    public func writeArchive(_ object: String, from file: String, host: String?) throws(RepositoryError) -> Bool {
        guard let host else { return try write(object, from: file) }
        let marker = Hosts.marker(of: object, host: host)
        try writeSmall([], to: marker)
        let written: Bool
        do { written = try write(object, from: file) } catch {
            try? deleteSmall(marker)
            throw error
        }
        if !written { try? deleteSmall(marker) }
        return written
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
            guard let (archive, host) = Hosts.parseMarker(object.name), host == Hosts.current,
                !names.contains(archive)
            else { return nil }
            return archive
        }
    }

    /// `delete` and `prune`: records each archive in its user's deletion record of this host
    /// (``Hosts/current``), then removes it (``remove(_:)``): `sync` removes from the mirrors what
    /// the record names, and nothing else.
    public func removeRecorded(_ entries: [RepositoryEntry]) throws(RepositoryError) {
        var byUser: [UserID: [String]] = [:]
        for entry in entries where entry.object != nil { byUser[entry.user, default: []].append(entry.name.fileName) }
        for (user, names) in byUser.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            try recordDeletion(of: names, user: user, host: Hosts.current)
        }
        try remove(entries)
    }
}
