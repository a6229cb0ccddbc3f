import Foundation

/// `verify`'s checks of `follow`'s segments (docs/follow.md), generation by generation:
///
/// - every segment reads to its end, its SHA-256 matches, its header names its user, host,
///   generation and place, and its trailer's counts and observations are those of its records and
///   of its name;
/// - the sequence runs from 1 without a hole (each missing number named);
/// - the base archive is in the repository;
/// - the replay would apply: every store a segment names is in the base's manifest with the same
///   page size, every store's frames end with a commit, no page and no commit lies past
///   `bytes_per_user`. This is the cheapest honest check — the base's manifest and the segments
///   are read, nothing is written; it does not rebuild the stores and run `integrity_check` on
///   them (`restore --at … --dry-run` does that).
public enum SegmentVerification {
    /// What is wrong with a generation: the segment at fault (nil for the generation as a whole).
    public struct Problem: GranaryError, Sendable, Equatable {
        public let user: String
        public let host: String
        public let generation: String
        public let segment: String?
        public let reason: String
        /// `USER/follow/HOST/BASE[/SEGMENT]`.
        public var object: String {
            "\(user)/follow/\(host)/\(generation)" + (segment.map { "/" + $0 } ?? "")
        }
        public var description: String { "\(object): \(reason)" }
    }

    /// One generation's result.
    public struct Outcome: Sendable {
        public let user: UserID
        public let host: String
        /// The base archive's file name.
        public let generation: String
        public var segments = 0
        public var commits = 0
        public var frames = 0
        /// The window the segments claim (microseconds), when they run from 1 without a hole.
        public var window: (from: Int64, to: Int64)?
        /// The moments a restore may claim: the window less its gaps (a follower started again,
        /// or one that lagged), as `list` shows them; empty unless every check passed.
        public var windows: [(from: Int64, to: Int64)] = []
        public var problems: [Problem] = []
        public var ok: Bool { problems.isEmpty }
    }

    /// Checks every generation of each of `users` (of `host`, every host's when nil) in the
    /// repository, local or remote (a remote segment is streamed down into the work folder, read,
    /// and removed, one at a time); `bases`, when given, keeps to the generations built on those
    /// archive file names.
    public static func run(
        users: [UserID], repository: any Repository, host: String?, bases: Set<String>? = nil, newestOnly: Bool = false,
        cap: Int64
    ) throws -> [Outcome] {
        var outcomes: [Outcome] = []
        for user in users {
            var generations = try FollowedGenerations.list(in: repository, user: user, host: host)
            if let bases { generations = generations.filter { bases.contains($0.base) } }
            if newestOnly { generations = Array(generations.suffix(1)) }
            guard !generations.isEmpty else { continue }
            let archives = try repository.archives(of: user, host: nil)
            for generation in generations {
                try Interruption.check()
                outcomes.append(
                    try check(generation, archives: archives, repository: repository, cap: cap))
            }
        }
        return outcomes
    }

    static func check(
        _ generation: FollowedGenerations.Generation, archives: [RepositoryEntry],
        repository: any Repository, cap: Int64
    ) throws(RepositoryError) -> Outcome {
        var outcome = Outcome(user: generation.user, host: generation.host, generation: generation.base)
        func problem(_ segment: String?, _ reason: String) {
            outcome.problems.append(
                Problem(
                    user: generation.user.rawValue, host: generation.host, generation: generation.base,
                    segment: segment, reason: reason))
        }
        // The base, and the page size of each store it holds.
        var pageSizes: [String: Int]?
        if let base = archives.first(where: { $0.name.fileName == generation.base }) {
            do {
                let manifest = try repository.head(of: base).manifest
                pageSizes = Dictionary(manifest.stores.map { ($0.name, $0.pageSize) }, uniquingKeysWith: { a, _ in a })
            } catch {
                problem(nil, "its base archive \(generation.base) cannot be read: \(describe(error))")
            }
        } else {
            problem(nil, "its base archive \(generation.base) is not in the repository")
        }
        // The sequence.
        let missing = generation.missing
        if !missing.isEmpty { problem(nil, "segments missing from the sequence: \(ranges(missing))") }
        var seen: Set<Int> = []
        for segment in generation.segments where !seen.insert(segment.sequence).inserted {
            problem(segment.name, "a second segment numbered \(segment.sequence)")
        }
        if generation.segments.isEmpty { problem(nil, "it holds no segment") }
        // Each segment.
        for segment in generation.segments {
            var header: Segment.Header?
            var pageSize = 0
            var store = ""
            var pending = false
            var commits = 0
            var frames = 0
            var first = Int64.max
            var last = Int64.min
            do {
                let trailer = try FollowedGenerations.withLocalCopy(
                    of: generation.object + "/" + segment.name, size: segment.size, in: repository
                ) { path in
                    try SegmentReader.read(path) { record in
                        switch record {
                        case .header(let h): header = h
                        case .store(let run):
                            if pending { throw Reason("\(store)'s frames end without a commit") }
                            store = run.store
                            pageSize = run.pageSize
                            first = min(first, run.observed)
                            last = max(last, run.observed)
                            if let pageSizes {
                                guard let base = pageSizes[run.store] else {
                                    throw Reason("the base holds no store \(run.store)")
                                }
                                guard base == run.pageSize else {
                                    throw Reason(
                                        "\(run.store): page size \(run.pageSize), the base's is \(base)")
                                }
                            }
                        case .frame(let pageNumber, _):
                            guard pageNumber > 0 else { throw Reason("\(store): a frame of page 0") }
                            if cap > 0 && Int64(pageNumber) * Int64(pageSize) > cap {
                                throw Reason("\(store): page \(pageNumber) lies past bytes_per_user")
                            }
                            pending = true
                            frames += 1
                        case .commit(let commit):
                            guard pending else { throw Reason("\(store): a commit without frames") }
                            if cap > 0 && Int64(commit.pages) * Int64(pageSize) > cap {
                                throw Reason("\(store): a commit of \(commit.pages) pages lies past bytes_per_user")
                            }
                            pending = false
                            commits += 1
                        }
                    }
                }
                if pending { throw Reason("\(store)'s frames end without a commit") }
                guard let header else { throw Reason("no header") }
                if header.user != generation.user.rawValue || header.host != generation.host
                    || header.generation != generation.base || header.sequence != segment.sequence
                {
                    throw Reason(
                        "its header names \(header.user)/follow/\(header.host)/\(header.generation) segment \(header.sequence)"
                    )
                }
                if trailer.commits != commits || trailer.frames != frames {
                    throw Reason(
                        "its trailer counts \(trailer.commits) commits and \(trailer.frames) frames, it holds \(commits) and \(frames)"
                    )
                }
                if trailer.first != segment.first || trailer.last != segment.last {
                    throw Reason("its trailer's observations are not those its name gives")
                }
                if first <= last && (first < trailer.first || last > trailer.last) {
                    throw Reason("a store's observation lies outside its trailer's")
                }
                outcome.segments += 1
                outcome.commits += commits
                outcome.frames += frames
            } catch let reason as Reason {
                problem(segment.name, reason.text)
            } catch let failure as RepositoryError {
                // The repository could not be read (a download cut short): not a damaged segment.
                throw failure
            } catch let failure as Segment.Failure {
                switch failure {
                case .corrupt(_, let reason), .io(_, let reason): problem(segment.name, reason)
                }
            } catch {
                problem(segment.name, describe(error))
            }
        }
        if outcome.ok, let firstSegment = generation.segments.first, let lastSegment = generation.segments.last {
            outcome.window = (firstSegment.last, lastSegment.last)
            outcome.windows =
                FollowCatalogue.Generation(
                    name: generation.base, host: generation.host,
                    segments: generation.segments.map {
                        FollowCatalogue.SegmentFile(
                            object: generation.object + "/" + $0.name, path: $0.name, name: $0.name,
                            sequence: $0.sequence, first: $0.first, last: $0.last, size: $0.size)
                    }
                ).windows
        }
        return outcome
    }

    struct Reason: Error { let text: String; init(_ text: String) { self.text = text } }

    static func describe(_ error: any Error) -> String { (error as? GranaryError)?.description ?? "\(error)" }

    /// `3, 5-7`: the numbers as ranges.
    static func ranges(_ numbers: [Int]) -> String {
        var parts: [String] = []
        var index = 0
        while index < numbers.count {
            var end = index
            while end + 1 < numbers.count && numbers[end + 1] == numbers[end] + 1 { end += 1 }
            parts.append(end == index ? "\(numbers[index])" : "\(numbers[index])-\(numbers[end])")
            index = end + 1
        }
        return parts.joined(separator: ", ")
    }
}
