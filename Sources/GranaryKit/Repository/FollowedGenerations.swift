import Foundation

/// Where `granary follow`'s segments lie in a repository, read from their names alone
/// (docs/follow.md): `USER/follow/HOST/BASE/SEQUENCE-FIRST-LAST.seg`, `BASE` being the file name
/// of the archive the generation replays onto. Prune, check and sync read the layout here; the
/// segments' content is `Follow`'s (`SegmentReader`).
public enum FollowedGenerations {
    /// One segment, as its name gives it.
    public struct SegmentName: Sendable, Equatable {
        public let name: String
        public let sequence: Int
        /// The first and last observations it holds (microseconds).
        public let first: Int64
        public let last: Int64

        /// `SEQUENCE-FIRST-LAST.seg`: ten digits from 1, then two precise UTC stamps.
        public init?(_ name: String) {
            guard name.hasSuffix(".seg") else { return nil }
            let parts = name.dropLast(4).split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, parts[0].count == 10, parts[0].allSatisfy(\.isASCII),
                let sequence = Int(parts[0]), sequence > 0,
                let first = ArchiveName.parseMicros(String(parts[1])),
                let last = ArchiveName.parseMicros(String(parts[2])), first <= last
            else { return nil }
            self.name = name
            self.sequence = sequence
            self.first = first
            self.last = last
        }
    }

    /// One generation: its base's name, its host, its segments in sequence order.
    public struct Generation: Sendable, Equatable {
        public let user: UserID
        public let host: String
        /// The base archive's file name (the generation's folder).
        public let base: String
        public let segments: [SegmentName]

        /// The folder's object name in the repository: `USER/follow/HOST/BASE`.
        public var object: String { user.rawValue + "/follow/" + host + "/" + base }
        /// The newest observation any segment holds (nil: no segment).
        public var lastObserved: Int64? { segments.map(\.last).max() }
        /// The sequence numbers missing between 1 and the highest (a hole a replay cannot cross).
        public var missing: [Int] {
            guard let top = segments.map(\.sequence).max() else { return [] }
            let present = Set(segments.map(\.sequence))
            return (1...top).filter { !present.contains($0) }
        }
    }

    /// Every generation of `user` in the local repository at `repository`, of every host (or of
    /// `host`), oldest base first. Folders whose names are not an archive's are passed over.
    public static func list(in repository: String, user: UserID, host: String? = nil) -> [Generation] {
        let base = repository + "/" + user.rawValue + "/follow"
        var result: [Generation] = []
        for hostName in FileSystem.contents(of: base).sorted() where host == nil || hostName == host {
            guard FileSystem.isDirectory(base + "/" + hostName) else { continue }
            for name in FileSystem.contents(of: base + "/" + hostName).sorted() {
                guard ArchiveName(fileName: name) != nil, FileSystem.isDirectory(base + "/" + hostName + "/" + name)
                else { continue }
                let segments = FileSystem.contents(of: base + "/" + hostName + "/" + name).compactMap(SegmentName.init)
                    .sorted { ($0.sequence, $0.name) < ($1.sequence, $1.name) }
                result.append(Generation(user: user, host: hostName, base: name, segments: segments))
            }
        }
        return result.sorted {
            (ArchiveName(fileName: $0.base)?.micros ?? 0, $0.host) < (
                ArchiveName(fileName: $1.base)?.micros ?? 0, $1.host
            )
        }
    }
}
