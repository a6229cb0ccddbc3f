import Foundation

/// Where `granary follow`'s segments lie in a repository, read from their names alone
/// (docs/follow.md): `USER/follow/HOST/BASE/SEQUENCE-FIRST-LAST.seg`, `BASE` being the file name
/// of the archive the generation replays onto. Prune, check and sync read the layout here; the
/// segments' content is `Follow`'s (`SegmentReader`).
public enum FollowedGenerations {
    /// Segments after a hole that are not to be removed.
    public struct HoleLeft: Error {}

    /// One segment, as its name gives it.
    public struct SegmentName: Sendable, Equatable {
        public let name: String
        public let sequence: Int
        /// The first and last observations it holds (microseconds).
        public let first: Int64
        public let last: Int64
        /// Its size as listed (0 when it was not listed).
        public var size: Int64 = 0

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
        /// The segments a window may claim: those from sequence 1 on without a hole. A segment after
        /// a hole (uploaded beside an earlier one still missing, or left when that one never
        /// landed) is not claimed: its commits are replayed only once every earlier one is there.
        public var claimed: [SegmentName] {
            var prefix: [SegmentName] = []
            for segment in segments {
                guard segment.sequence == prefix.count + 1 else { break }
                prefix.append(segment)
            }
            return prefix
        }
        /// The sequence numbers missing between 1 and the highest (a hole a replay cannot cross).
        public var missing: [Int] {
            guard let top = segments.map(\.sequence).max() else { return [] }
            let present = Set(segments.map(\.sequence))
            return (1...top).filter { !present.contains($0) }
        }
    }

    /// Every generation of `user` in `repository` (local or remote: one listing of
    /// `USER/follow`), of every host (or of `host`), oldest base first. Names that are not a
    /// generation's folder or a segment's are passed over (a remote backend's hidden upload names
    /// among them).
    public static func list(in repository: any Repository, user: UserID, host: String? = nil) throws(RepositoryError)
        -> [Generation]
    {
        var folders: [String: [String: [SegmentName]]] = [:]
        for object in try repository.objects(under: user.rawValue + "/follow") {
            let parts = object.name.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, host == nil || parts[0] == host, !parts[0].isEmpty, !parts[0].hasPrefix("."),
                ArchiveName(fileName: parts[1]) != nil
            else { continue }
            var generation = folders[parts[0], default: [:]][parts[1], default: []]
            if var segment = SegmentName(parts[2]) {
                segment.size = object.size
                generation.append(segment)
            }
            folders[parts[0], default: [:]][parts[1]] = generation
        }
        var result: [Generation] = []
        for (hostName, generations) in folders {
            for (base, segments) in generations {
                result.append(
                    Generation(
                        user: user, host: hostName, base: base,
                        segments: segments.sorted { ($0.sequence, $0.name) < ($1.sequence, $1.name) }))
            }
        }
        return sorted(result)
    }

    static func sorted(_ generations: [Generation]) -> [Generation] {
        generations.sorted {
            (ArchiveName(fileName: $0.base)?.micros ?? 0, $0.host) < (
                ArchiveName(fileName: $1.base)?.micros ?? 0, $1.host
            )
        }
    }

    /// Removes `generation`'s segments from `repository`, newest first (a removal that stops
    /// leaves a shorter window, never a hole), then, in a local repository, its folder and the
    /// host's and user's `follow` folders left empty. A remote backend has no folders to remove.
    public static func remove(_ generation: Generation, from repository: any Repository) throws {
        for segment in generation.segments.reversed() {
            try Interruption.check()
            try repository.deleteSmall(generation.object + "/" + segment.name)
        }
        guard let local = repository.localPath else { return }
        let folder = local + "/" + generation.object
        FileSystem.removeTree(folder)
        RawPath.rmdir(local + "/" + generation.user.rawValue + "/follow/" + generation.host)
        RawPath.rmdir(local + "/" + generation.user.rawValue + "/follow")
        try? FileSystem.sync(local + "/" + generation.user.rawValue)
    }

    /// Hands `body` a local file holding the object `object` (of `size` bytes, as listed): the
    /// file itself in a local repository, else a download streamed into a private temporary
    /// file in the repository's work folder (never held in memory), removed after `body`.
    public static func withLocalCopy<T>(
        of object: String, size: Int64, in repository: any Repository, _ body: (String) throws -> T
    ) throws -> T {
        if let local = repository.localPath { return try body(local + "/" + object) }
        let folder = try repository.prepareWorkFolder()
        let (fd, file) = try FileSystem.createTemporaryFile(in: folder, for: PathText.lastComponent(object))
        defer {
            close(fd)
            unlink(file)
        }
        try repository.copy(object, size: size, into: fd, path: file)
        return try body(file)
    }

    /// Every generation of `user` in the local repository at `repository` (as above).
    public static func list(in repository: String, user: UserID, host: String? = nil) -> [Generation] {
        (try? list(in: LocalRepository(path: repository), user: user, host: host)) ?? []
    }
}
