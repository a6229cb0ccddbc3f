import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `restore --at`: a generation's commits replayed onto its base as staged, up to the last one
/// granary observed at or before the time asked for.
public enum FollowReplay {
    public enum Failure: GranaryError, Equatable {
        case broken(user: String, reason: String)
        public var description: String {
            switch self {
            case .broken(let user, let reason): return "cannot replay the followed commits of \(user): \(reason)"
            }
        }
    }

    public struct Report: Sendable, Equatable {
        public var segments = 0
        public var commits = 0
        public var frames = 0
        /// The last observation applied (microseconds), per store.
        public var reached: [String: Int64] = [:]
    }

    /// Checks every segment of `generation` that can hold a commit observed at or before `at`
    /// (those whose first observation is not after it, and the first that ends after it: digest,
    /// sequence, header, the trailer's first and last observation against the name), then writes,
    /// store by store, each frame's page image at its place and truncates at each commit, for
    /// every run observed at or before `at`. `staged` maps member names to staged files. No page
    /// past `cap` bytes is written (0: no cap). Each replayed store must pass `integrity_check`.
    /// From a remote repository, those segments are first streamed down, one after another, into
    /// a private folder of the work folder (never held in memory), and removed after.
    public static func replay(
        _ generation: FollowCatalogue.Generation, user: UserID, at: Int64, staged: [(name: String, path: String)],
        cap: Int64, limits: ContentLimits, repository: (any Repository)? = nil
    ) throws -> Report {
        let fail = { (reason: String) in Failure.broken(user: user.rawValue, reason: reason) }
        guard generation.window != nil else { throw fail("its segments do not run from 1 without a hole") }
        // Every segment that may hold a commit observed at or before `at`, and the first whose
        // name says it ends after `at` (its trailer shows whether the window its name claims is
        // real: a renamed segment is refused, not trusted).
        let reach = generation.segments.firstIndex { $0.last >= at } ?? generation.segments.count - 1
        let needed = generation.segments.enumerated().filter { $0.offset <= reach || $0.element.first <= at }.map(
            \.element)
        var paths: [String] = needed.map(\.path)
        var downloads: String?
        defer { if let downloads { FileSystem.removeTree(downloads) } }
        if let repository, repository.localPath == nil {
            let work = try repository.prepareWorkFolder()
            let folder = try FileSystem.createTemporaryDirectory(in: work, for: "replay")
            downloads = folder
            paths = []
            for segment in needed {
                try Interruption.check()
                let path = folder + "/" + segment.name
                let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
                guard fd >= 0 else { throw FileSystemError("open", path: path) }
                defer { close(fd) }
                try repository.copy(segment.object, size: segment.size, into: fd, path: path)
                paths.append(path)
            }
        }
        for (segment, path) in zip(needed, paths) {
            let (header, trailer) = try SegmentReader.check(path)
            guard header.user == user.rawValue, header.generation == generation.name,
                header.sequence == segment.sequence
            else { throw fail("\(segment.name) names another user, generation or place") }
            guard trailer.first == segment.first, trailer.last == segment.last else {
                throw fail(
                    "\(segment.name): its trailer's observations (\(ArchiveName.stamp(micros: trailer.first, precise: true)) to \(ArchiveName.stamp(micros: trailer.last, precise: true))) are not those its name gives (granary verify names every such segment)"
                )
            }
        }
        let files = Dictionary(staged.map { ($0.name, $0.path) }, uniquingKeysWith: { a, _ in a })
        var report = Report()
        var open: [String: Int32] = [:]
        defer { for fd in open.values { close(fd) } }
        var touched: Set<String> = []
        for (segment, path) in zip(needed, paths) {
            var current: (fd: Int32, pageSize: Int, store: String)?
            var pending = false
            var applying = false
            try SegmentReader.read(path) { record in
                switch record {
                case .header: break
                case .store(let run):
                    if pending { throw fail("\(segment.name): a store's frames end without a commit") }
                    applying = run.observed <= at
                    guard applying else {
                        current = nil
                        return
                    }
                    guard let path = files[run.store] else { throw fail("the base holds no store \(run.store)") }
                    let fd: Int32
                    if let known = open[run.store] {
                        fd = known
                    } else {
                        fd = Glibc.open(path, O_RDWR | O_CLOEXEC)
                        guard fd >= 0 else { throw fail("\(path): \(String(cString: strerror(errno)))") }
                        open[run.store] = fd
                        let head = try Descriptor(dup(fd), display: path).read(count: 100, at: 0)
                        guard let header = StoreHeader(head), header.pageSize == run.pageSize else {
                            throw fail("\(run.store): the base's page size is not the segment's \(run.pageSize)")
                        }
                    }
                    current = (fd, run.pageSize, run.store)
                    touched.insert(run.store)
                    report.reached[run.store] = max(report.reached[run.store] ?? 0, run.observed)
                case .frame(let pageNumber, let page):
                    guard let current else { return }
                    let offset = Int64(pageNumber - 1) * Int64(current.pageSize)
                    guard pageNumber > 0, cap == 0 || offset + Int64(current.pageSize) <= cap else {
                        throw fail("\(current.store): page \(pageNumber) lies past bytes_per_user")
                    }
                    var done = 0
                    while done < page.count {
                        let n = pwrite(
                            current.fd, page.baseAddress! + done, page.count - done, off_t(offset) + off_t(done))
                        if n < 0 {
                            if errno == EINTR { continue }
                            throw fail("\(current.store): write: \(String(cString: strerror(errno)))")
                        }
                        done += n
                    }
                    pending = true
                    report.frames += 1
                case .commit(let commit):
                    pending = false
                    guard let current else { return }
                    let size = Int64(commit.pages) * Int64(current.pageSize)
                    guard cap == 0 || size <= cap else { throw fail("\(current.store): a commit past bytes_per_user") }
                    if ftruncate(current.fd, off_t(size)) != 0 {
                        throw fail("\(current.store): truncate: \(String(cString: strerror(errno)))")
                    }
                    report.commits += 1
                }
            }
            if pending { throw fail("\(segment.name): frames end without a commit") }
            _ = applying
            report.segments += 1
        }
        for fd in open.values { fsync(fd) }
        for name in touched.sorted() {
            guard let path = files[name] else { continue }
            let problems: [String]
            do {
                let db = try Database.openFinished(path: path, limits: limits)
                problems = db.integrityCheck(full: true)
            } catch {
                throw fail("\(name) as replayed cannot be opened: \((error as? SQLiteError)?.message ?? "\(error)")")
            }
            guard problems == [Database.sound] else {
                throw fail("\(name) as replayed fails integrity_check: \(problems.prefix(3).joined(separator: "; "))")
            }
        }
        return report
    }
}
