import CSnapshotTee
import Crypto
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The page hashes of a snapshot, taken as SQLite writes it through the `granary-tee` VFS
/// (issue 35): a `backup --delta` then needs no second read of the finished snapshot.
///
/// The VFS hands every write and truncate of the snapshot to this recorder (its hook,
/// `SNAPSHOT_TEE_FCNTL_HOOK`), in SQLite's order. Each whole page written is hashed and its hash
/// put at (page − 1) × 32 in a scratch file, so a page written again (a rollback-journal copy
/// restarts from page 1 when the store changes) keeps only its last hash. A page whose last
/// write was not whole pages, or that a truncate cut, is marked unknown, and so is any page never
/// written (the lock-byte page, a hole): ``finish(snapshot:pageSize:writingTo:)`` reads those few
/// from the finished file. The result is byte for byte what ``PageFiles/hash(file:pageSize:writingTo:)``
/// gives when it reads the file (PageRecorderTests compares them under a concurrent writer).
///
/// The snapshot's thread only copies the bytes written (gathered into runs of up to 256 KiB);
/// a thread of the recorder's own hashes them, in the order they were written, so the hashing
/// runs beside SQLite's copy on a second core. When that thread falls behind (half its queue
/// waits), the snapshot's thread hashes its runs itself before handing them on, rather than wait:
/// both cores then hash whenever the copy (or a check beside it) leaves one free. Memory stays
/// flat: one bit per page, at most 2 MiB of writes waiting for the hashing thread and 1 MiB of
/// hashes waiting to be written.
final class PageRecorder: @unchecked Sendable {
    /// The hook the VFS calls; valid as long as this recorder. It holds no reference to the
    /// recorder (nor does the tee, which is never told to drop it): whoever attaches it keeps the
    /// recorder alive until the connection it is attached to has closed (``Snapshotter`` does,
    /// through its `pages` argument and by waiting for the copy's thread).
    let hook: UnsafeMutablePointer<granary_tee_hook>
    /// The page size the writes are cut into (the source's; set before the copy starts).
    var pageSize: Int {
        get { core.pageSize }
        set { core.pageSize = newValue }
    }
    /// Whether the VFS took the hook (else ``finish(snapshot:pageSize:writingTo:)`` reads the file).
    var attached = false
    /// Pages hashed as they were written, and pages read back by `finish` (tests).
    var hashed: Int { core.hashed }
    private(set) var reread = 0
    /// Which thread hashes a batch of whole pages (``send()``). Set before the copy starts.
    enum WriterHashing {
        /// The snapshot's thread when the hashing thread is behind (what a backup does).
        case whenBehind
        /// Tests (each way gives the same hashes): always the snapshot's thread, never, or every
        /// other batch (hashes given and not given mixed in one queue).
        case always, never, everyOther
    }
    var writerHashes = WriterHashing.whenBehind
    /// Batches handed on so far, and pages the snapshot's thread hashed (tests, once the copy is
    /// over; ``usedGivenHashes`` counts those the hashing thread took).
    private var batches = 0
    private(set) var hashedByWriter = 0
    var usedGivenHashes: Int { core.usedGiven }

    /// The bytes SQLite has written to the copy so far (any thread: a progress bar's).
    var written: Int64 { writtenBytes.load(ordering: .relaxed) }
    private let writtenBytes = Atomic<Int64>(0)

    private let core: Core
    private let handoff = Handoff()
    private var batch: [UInt8] = []
    private var batchOffset: Int64 = 0
    private var worker: DispatchSemaphore?
    static let batchLimit = 256 << 10

    /// A recorder keeping its hashes in the new file `path` (removed with the work folder).
    init(path: String) throws {
        core = try Core(path: path)
        hook = .allocate(capacity: 1)
        hook.initialize(
            to: granary_tee_hook(
                context: nil,
                write: { context, bytes, count, offset in
                    guard let context, let bytes, count > 0 else { return }
                    // (Called for every page: no retain and release of the recorder, which
                    // outlives the hook.)
                    Unmanaged<PageRecorder>.fromOpaque(context)._withUnsafeGuaranteedRef {
                        $0.wrote(UnsafeRawBufferPointer(start: bytes, count: Int(count)), at: offset)
                    }
                },
                truncate: { context, size in
                    guard let context else { return }
                    Unmanaged<PageRecorder>.fromOpaque(context)._withUnsafeGuaranteedRef { $0.truncated(to: size) }
                }, stop: 0, reserved: 0))
        hook.pointee.context = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        // A backup that failed before `finish`: the hashing thread stops (it holds the core, and
        // may still stop the tee through the hook: it ends before the hook goes).
        handoff.close()
        worker?.wait()
        hook.deallocate()
    }

    // MARK: The snapshot's thread

    private func wrote(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        // (Discarding, once the hashing thread gave up: the tee fails the write anyway.)
        if core.stopped { return }
        writtenBytes.wrappingAdd(Int64(bytes.count), ordering: .relaxed)
        let size = Int64(max(pageSize, 1))
        if offset % size != 0 || bytes.count % Int(size) != 0 {
            // Not whole pages: handed on alone, so that it marks only its own pages unknown.
            send()
            handoff.push(.write(offset, Array(bytes), nil), core: core, worker: &worker)
            return
        }
        if !batch.isEmpty && (offset != batchOffset + Int64(batch.count) || batch.count >= Self.batchLimit) {
            send()
        }
        if batch.isEmpty {
            batchOffset = offset
            batch.reserveCapacity(Self.batchLimit)
        }
        batch.append(contentsOf: bytes)
    }

    private func truncated(to size: Int64) {
        // (Discarding, once the hashing thread gave up: nothing more counts.)
        if core.stopped { return }
        send()
        handoff.push(.truncate(size), core: core, worker: &worker)
    }

    private func send() {
        guard !batch.isEmpty else { return }
        // The hashing thread is behind (half its queue waits): this thread, which would soon
        // wait for it, hashes the batch itself, and the hashing thread only records the hashes.
        // Two cores then share the hashing whenever the other work (the copy, a check beside it)
        // leaves one free; the order of everything else stays the writes' order.
        let mine: Bool
        switch writerHashes {
        case .whenBehind: mine = handoff.behind
        case .always: mine = true
        case .never: mine = false
        case .everyOther: mine = batches % 2 == 0
        }
        batches += 1
        let digests = mine ? Self.digests(of: batch, pageSize: pageSize) : nil
        hashedByWriter += (digests?.count ?? 0) / 32
        handoff.push(.write(batchOffset, batch, digests), core: core, worker: &worker)
        batch = []
    }

    /// The SHA-256 of each page of `bytes` (whole pages of `pageSize`), 32 bytes each in page
    /// order (``PageHash``), or nil.
    static func digests(of bytes: [UInt8], pageSize: Int) -> [UInt8]? {
        guard pageSize > 0, bytes.count % pageSize == 0 else { return nil }
        return [UInt8](unsafeUninitializedCapacity: bytes.count / pageSize * 32) { digests, count in
            bytes.withUnsafeBytes {
                PageHash.digests(of: $0, pageSize: pageSize, into: UnsafeMutableRawBufferPointer(digests))
            }
            count = bytes.count / pageSize * 32
        }
    }

    /// Writes and truncates, in order, from the snapshot's thread to the hashing thread.
    private final class Handoff: @unchecked Sendable {
        enum Event {
            /// Bytes written at an offset, with their pages' hashes (32 bytes each, in order) when
            /// the snapshot's thread took them (``PageRecorder/send()``).
            case write(Int64, [UInt8], [UInt8]?)
            case truncate(Int64)
            var size: Int {
                if case .write(_, let bytes, _) = self { return bytes.count }
                return 0
            }
        }
        let condition = NSCondition()
        var queue: [Event] = []
        var queued = 0
        var closed = false
        static let limit = 2 << 20

        /// Queues `event` (waiting while 2 MiB are queued), starting the hashing thread first.
        func push(_ event: Event, core: Core, worker: inout DispatchSemaphore?) {
            if worker == nil {
                let finished = DispatchSemaphore(value: 0)
                worker = finished
                let thread = Thread { [self] in
                    run(core)
                    finished.signal()
                }
                thread.name = "granary-page-hashes"
                thread.start()
            }
            condition.lock()
            while queued > 0 && queued + event.size > Self.limit && !closed { condition.wait() }
            queue.append(event)
            queued += event.size
            condition.broadcast()
            condition.unlock()
        }

        /// Whether half the queue's bytes wait for the hashing thread.
        var behind: Bool {
            condition.lock()
            defer { condition.unlock() }
            return queued >= Self.limit / 2
        }

        func close() {
            condition.lock()
            closed = true
            condition.broadcast()
            condition.unlock()
        }

        private func run(_ core: Core) {
            while true {
                condition.lock()
                while queue.isEmpty && !closed { condition.wait() }
                if queue.isEmpty {
                    condition.unlock()
                    return
                }
                let event = queue.removeFirst()
                condition.unlock()
                switch event {
                case .write(let offset, let bytes, let digests):
                    bytes.withUnsafeBytes { core.wrote($0, at: offset, digests: digests) }
                case .truncate(let size): core.truncated(to: size)
                }
                condition.lock()
                queued -= event.size
                condition.broadcast()
                condition.unlock()
            }
        }
    }

    /// What the hashing thread keeps: the hashes file, the known pages, the run of hashes not yet
    /// written.
    private final class Core: @unchecked Sendable {
        var pageSize = 0
        private(set) var hashed = 0
        /// Pages whose hash the snapshot's thread took (tests).
        private(set) var usedGiven = 0
        let path: String
        let fd: Int32
        private var known = PageBits()
        private var run: [UInt8] = []
        /// The hashes of the write being recorded (32 bytes per page), reused from write to write.
        private var scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 32, alignment: 16)
        private var runStart = 0
        private(set) var failure: (any Error)?
        /// Discarding (``PageRecorder/startDiscarding(base:log:maxChanged:)``): the changed pages.
        var log: ChangeLog?
        /// Set (from the hashing thread) once a discarding copy gave up: the snapshot thread then
        /// drops writes, and the tee fails them.
        private let stopFlag = Atomic<Bool>(false)
        var stopped: Bool { stopFlag.load(ordering: .acquiring) }
        var stop: () -> Void = {}

        init(path: String) throws {
            self.path = path
            fd = RawPath.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd < 0 { throw FileSystemError("create", path: path) }
            run.reserveCapacity(1 << 20)
        }

        deinit {
            close(fd)
            scratch.deallocate()
        }

        /// `digests`: the pages' hashes, when the snapshot's thread took them (32 bytes per page).
        func wrote(_ bytes: UnsafeRawBufferPointer, at offset: Int64, digests: [UInt8]? = nil) {
            let count = bytes.count
            guard failure == nil, pageSize > 0, count > 0, offset >= 0 else { return }
            let size = Int64(pageSize)
            if let log, log.reason != nil { return }
            guard offset % size == 0, count % pageSize == 0 else {
                if let log {
                    giveUp(log, "a write of \(count) bytes at offset \(offset) is not whole pages")
                    return
                }
                known.remove(from: Int(offset / size), through: Int((offset + Int64(count) - 1) / size))
                return
            }
            var page = Int(offset / size)
            var at = 0
            let pages = count / pageSize
            if scratch.count < pages * 32 {
                scratch.deallocate()
                scratch = .allocate(byteCount: pages * 32, alignment: 16)
            }
            if let digests, digests.count == pages * 32 {
                usedGiven += pages
                digests.withUnsafeBytes { scratch.copyMemory(from: $0) }
            } else {
                PageHash.digests(of: bytes, pageSize: pageSize, into: scratch)
            }
            while at < count {
                let bytes = UnsafeRawBufferPointer(rebasing: bytes[at..<at + pageSize])
                let digest = UnsafeRawBufferPointer(rebasing: scratch[at / pageSize * 32..<at / pageSize * 32 + 32])
                if !run.isEmpty && page != runStart + run.count / 32 { flush() }
                if run.isEmpty { runStart = page }
                run.append(contentsOf: digest)
                known.insert(page)
                hashed += 1
                if run.count >= 1 << 20 { flush() }
                if let log {
                    do {
                        try log.record(page: page, digest: digest, bytes: bytes)
                    } catch {
                        if failure == nil { failure = error }
                    }
                    if log.changedCount > log.maxChanged {
                        giveUp(log, "more than \(log.maxChanged) of its pages changed")
                        return
                    }
                }
                page += 1
                at += pageSize
            }
            if let log { log.size = max(log.size, offset + Int64(count)) }
        }

        private func giveUp(_ log: ChangeLog, _ reason: String) {
            if log.reason == nil { log.reason = reason }
            stopFlag.store(true, ordering: .releasing)
            stop()
        }

        func truncated(to size: Int64) {
            guard pageSize > 0, size >= 0 else { return }
            if let log {
                guard log.reason == nil else { return }
                guard size % Int64(pageSize) == 0 else {
                    giveUp(log, "a truncate to \(size) bytes cuts a page")
                    return
                }
                log.cut(from: Int(size / Int64(pageSize)))
                log.size = size
            }
            flush()
            // The page the cut falls in (if any) and every page after it.
            known.remove(from: Int(size / Int64(pageSize)))
        }

        func isKnown(_ page: Int) -> Bool { known.contains(page) }

        func flush() {
            guard !run.isEmpty else { return }
            do {
                try run.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: Int64(runStart) * 32, path: path) }
            } catch {
                if failure == nil { failure = error }
            }
            run.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Discarding (a WAL store's `backup --delta`, no snapshot file)

    /// Whether the copy is being discarded: the recorder keeps the changed pages itself.
    var discarding: Bool { core.log != nil }
    /// How many pages of the discarded copy differ from the base (after ``finishDiscarded(writingTo:)``).
    var changedPages: Int { core.log?.changedCount ?? 0 }
    /// Whether a discarding copy gave up (a write that was not whole pages, a truncate inside a
    /// page, too many changed pages; ``finishDiscarded(writingTo:)`` says which): any thread.
    var stopped: Bool { core.stopped }

    /// Turns the recorder into the keeper of a discarded copy (before the copy starts, with
    /// ``pageSize`` set): each page written is hashed as always and compared with the base's
    /// hash of the same page (`base`, the base's `.pages` file, read where needed); a page that
    /// differs, or that the base does not have, is appended to the change log `log` (page bytes;
    /// the newest write of a page is the one that counts, found through the log's index file).
    /// Past `maxChanged` changed pages (what is left of the user's share once the stores copied
    /// before this one took theirs) the recorder gives up and stops the copy (the tee fails its
    /// next write): the backup is a full, and a full needs a real snapshot anyway.
    func startDiscarding(base: String, log: String, maxChanged: Int) throws {
        let changes = try ChangeLog(base: base, log: log, pageSize: pageSize, maxChanged: maxChanged)
        core.log = changes
        core.stop = { [hook] in granary_tee_hook_stop(hook) }
    }

    /// The `.pages` file of the discarded copy, written to `output`: the recorded hashes, and the
    /// hash of a zero page for every page never written (the lock-byte page, a hole, a page a
    /// truncate cut and the file grew over again), which is exactly what reading the file would
    /// give. Throws ``NoCopyFallback`` when the recorder gave up.
    func finishDiscarded(writingTo output: String) throws -> PageFiles.Summary {
        try drain()
        guard let log = core.log else { throw NoCopyFallback(reason: "the copy was not discarded") }
        if let reason = log.reason { throw NoCopyFallback(reason: reason) }
        try log.flush()
        guard pageSize > 0, log.size % Int64(pageSize) == 0 else {
            throw NoCopyFallback(reason: "the copy ends inside a page")
        }
        let count = Int(log.size / Int64(pageSize))
        let zero = log.zeroHash
        return try writeList(count: count, to: output) { _, hash in
            zero.withUnsafeBytes { hash.copyMemory(from: $0) }
        }
    }

    /// Writes the `.delta` file of the discarded copy whose `.pages` file is `current` against
    /// the base's `base`: ``PageChanges/write(current:base:to:page:)`` with each changed page's
    /// bytes taken from the change log (its newest write), or zeros for a page never written.
    /// Each page's bytes are checked against its hash in `current`.
    func writeChanges(current: String, base: String, to output: String) throws -> Int {
        guard let log = core.log else { throw NoCopyFallback(reason: "the copy was not discarded") }
        return try PageChanges.write(current: current, base: base, to: output) { number, hash, page in
            if let at = try log.offset(of: number - 1) {
                try PageFiles.readFully(log.fd, into: page, at: at, path: log.path)
            } else {
                page.initializeMemory(as: UInt8.self, repeating: 0)
            }
            guard SHA256.hash(data: UnsafeRawBufferPointer(page)).elementsEqual(hash) else {
                throw NoCopyFallback(reason: "page \(number) of the change log does not have its recorded hash")
            }
        }
    }

    /// The changed pages of a discarded copy: a log file of page bytes, and an index file with,
    /// at 8 × page, the offset in the log of the page's newest logged write (plus one; 0 is none).
    /// Memory stays flat whatever the share of pages changed: one bit per page says which pages
    /// are changed now, and 1 MiB of page bytes waits to be written. The base's hashes are read
    /// 32,768 at a time around the page asked for (pages arrive in order, page 1 again at the end).
    final class ChangeLog: @unchecked Sendable {
        let path: String
        let fd: Int32
        let pageSize: Int
        let maxChanged: Int
        /// The pages changed now (the last write of each differs from the base).
        var changedCount: Int { changed.count }
        /// The size the file would have (writes and truncates).
        var size: Int64 = 0
        var reason: String?
        let zeroHash: [UInt8]
        private var changed = PageBits()
        private let index: Int32
        private let indexPath: String
        private let base: Int32
        private let basePath: String
        private let baseCount: Int
        private var window: [UInt8] = []
        private var windowStart = -1
        private var buffer: [UInt8] = []
        private var flushed: Int64 = 0
        static let windowPages = 32_768

        init(base: String, log: String, pageSize: Int, maxChanged: Int) throws {
            let reader = try PagesReader(path: base)
            let count = reader.pageCount, baseSize = reader.pageSize
            reader.close()
            guard baseSize == pageSize else {
                throw NoCopyFallback(reason: "the base has pages of \(baseSize) bytes, not \(pageSize)")
            }
            let baseFD = RawPath.open(base, O_RDONLY | O_CLOEXEC)
            if baseFD < 0 { throw FileSystemError("open", path: base) }
            let logFD = RawPath.open(log, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if logFD < 0 {
                close(baseFD)
                throw FileSystemError("create", path: log)
            }
            let indexPath = log + ".index"
            let indexFD = RawPath.open(indexPath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if indexFD < 0 {
                close(baseFD)
                close(logFD)
                throw FileSystemError("create", path: indexPath)
            }
            self.base = baseFD
            basePath = base
            baseCount = count
            path = log
            fd = logFD
            index = indexFD
            self.indexPath = indexPath
            self.pageSize = pageSize
            self.maxChanged = maxChanged
            zeroHash = Array(SHA256.hash(data: [UInt8](repeating: 0, count: pageSize)))
            buffer.reserveCapacity(1 << 20)
        }

        deinit {
            close(base)
            close(fd)
            close(index)
        }

        /// Page `page` (0-based) was written with `bytes` (its SHA-256 `digest`, 32 bytes).
        func record(page: Int, digest: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer) throws {
            if page < baseCount {
                if page < windowStart || page >= windowStart + Self.windowPages || windowStart < 0 {
                    let start = page / Self.windowPages * Self.windowPages
                    let count = min(Self.windowPages, baseCount - start)
                    window = [UInt8](repeating: 0, count: count * 32)
                    try window.withUnsafeMutableBytes {
                        try PageFiles.readFully(
                            base, into: $0, at: Int64(PageFiles.pagesHeader) + Int64(start) * 32, path: basePath)
                    }
                    windowStart = start
                }
                let at = (page - windowStart) * 32
                let same = window.withUnsafeBytes { memcmp(digest.baseAddress!, $0.baseAddress! + at, 32) == 0 }
                if same {
                    changed.remove(page)
                    return
                }
            }
            var entry = UInt64(flushed + Int64(buffer.count) + 1).bigEndian
            try withUnsafeBytes(of: &entry) {
                try PageFiles.writeFully(index, $0, at: Int64(page) * 8, path: indexPath)
            }
            changed.insert(page)
            buffer.append(contentsOf: bytes)
            if buffer.count >= 1 << 20 { try flush() }
        }

        /// Where the newest logged write of page `page` (0-based) is in the log, if it is changed.
        func offset(of page: Int) throws -> Int64? {
            guard changed.contains(page) else { return nil }
            var entry: UInt64 = 0
            try withUnsafeMutableBytes(of: &entry) {
                try PageFiles.readFully(index, into: $0, at: Int64(page) * 8, path: indexPath)
            }
            let at = UInt64(bigEndian: entry)
            guard at > 0 else { throw NoCopyFallback(reason: "page \(page + 1) is changed but has no logged write") }
            return Int64(at - 1)
        }

        /// A truncate to `first` pages: the pages from there on were cut (zeros if the file grows
        /// over them again).
        func cut(from first: Int) { changed.remove(from: first) }

        func flush() throws {
            guard !buffer.isEmpty else { return }
            try buffer.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: flushed, path: path) }
            flushed += Int64(buffer.count)
            buffer.removeAll(keepingCapacity: true)
        }
    }

    /// The `.pages` file of the finished snapshot at `snapshot` (whose header says `pageSize`),
    /// written to `output`: the recorded hashes, and the unknown pages read from the file. When
    /// the recorder saw no write (the VFS was not there) or cut pages of another size (the page
    /// size changed during the copy), every page is read: the same result, the old way.
    func finish(snapshot: String, pageSize: Int, writingTo output: String) throws -> PageFiles.Summary {
        try drain()
        guard attached, pageSize == self.pageSize, hashed > 0 else {
            return try PageFiles.hash(file: snapshot, pageSize: pageSize, writingTo: output)
        }
        let (source, count) = try PageFiles.openPages(snapshot, pageSize: pageSize)
        defer { close(source) }
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
        defer { page.deallocate() }
        return try writeList(count: count, to: output) { number, hash in
            try PageFiles.readFully(source, into: page, at: Int64(number) * Int64(pageSize), path: snapshot)
            SHA256.hash(data: UnsafeRawBufferPointer(page)).withUnsafeBytes { hash.copyMemory(from: $0) }
            reread += 1
        }
    }

    /// Ends the hashing thread (after the last writes) and reports its failure.
    private func drain() throws {
        send()
        handoff.close()
        worker?.wait()
        worker = nil
        core.flush()
        if let failure = core.failure { throw failure }
    }

    /// Writes the `.pages` file of `count` pages to `output`: the hashes recorded in the scratch
    /// file (every page has its 32 bytes there, a hole for those never written), and for each
    /// page the recorder does not know, the hash `unknown` puts in place (called with the page's
    /// index from 0 and its 32 bytes).
    private func writeList(
        count: Int, to output: String, unknown: (Int, UnsafeMutableRawBufferPointer) throws -> Void
    ) throws -> PageFiles.Summary {
        let fd = core.fd, path = core.path
        guard ftruncate(fd, off_t(count) * 32) == 0 else { throw FileSystemError("write", path: path) }
        var writer = try BlockWriter(path: output)
        defer { writer.close() }
        var state = SHA256()
        state.update(data: PageFiles.statePrefix)
        let header = BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(count))
        state.update(data: header)
        try writer.append(PageFiles.pagesMagic + header)
        let perChunk = 32_768
        let hashes = UnsafeMutableRawBufferPointer.allocate(byteCount: perChunk * 32, alignment: 16)
        defer { hashes.deallocate() }
        var first = 0
        while first < count {
            try Interruption.check()
            let pages = min(perChunk, count - first)
            let chunk = UnsafeMutableRawBufferPointer(rebasing: hashes[0..<pages * 32])
            try PageFiles.readFully(fd, into: chunk, at: Int64(first) * 32, path: path)
            for index in 0..<pages where !core.isKnown(first + index) {
                try unknown(first + index, UnsafeMutableRawBufferPointer(rebasing: chunk[index * 32..<index * 32 + 32]))
            }
            let bytes = UnsafeRawBufferPointer(chunk)
            state.update(bufferPointer: bytes)
            try writer.append(bytes)
            first += pages
        }
        try writer.finish()
        return PageFiles.Summary(pageSize: pageSize, pageCount: count, stateDigest: state.finalize().hex)
    }
}

/// A set of page indexes (from 0), one bit per page up to the largest inserted, with its count:
/// the recorder's known pages and the change log's changed pages.
struct PageBits {
    private var words: [UInt64] = []
    private(set) var count = 0

    func contains(_ page: Int) -> Bool {
        let word = page >> 6
        return page >= 0 && word < words.count && words[word] & (1 << UInt64(page & 63)) != 0
    }

    mutating func insert(_ page: Int) {
        let word = page >> 6
        if word >= words.count { words.append(contentsOf: repeatElement(0, count: word - words.count + 1)) }
        let bit: UInt64 = 1 << UInt64(page & 63)
        if words[word] & bit == 0 {
            words[word] |= bit
            count += 1
        }
    }

    mutating func remove(_ page: Int) {
        guard contains(page) else { return }
        words[page >> 6] &= ~(1 << UInt64(page & 63))
        count -= 1
    }

    /// Removes the pages from `first` through `last` (every page from `first` when nil).
    mutating func remove(from first: Int, through last: Int? = nil) {
        var page = max(first, 0)
        let end = min(last ?? Int.max, words.count * 64 - 1)
        while page <= end {
            if page & 63 == 0 && words[page >> 6] == 0 && page + 63 <= end {
                page += 64
                continue
            }
            remove(page)
            page += 1
        }
    }
}
