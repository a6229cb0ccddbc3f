import CSnapshotTee
import Crypto
import Foundation

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
/// runs beside SQLite's copy on a second core. Memory stays flat: one bit per page, at most
/// 2 MiB of writes waiting for the hashing thread and 1 MiB of hashes waiting to be written.
final class PageRecorder: @unchecked Sendable {
    /// The hook the VFS calls; valid as long as this recorder.
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
                    Unmanaged<PageRecorder>.fromOpaque(context).takeUnretainedValue()
                        .wrote(UnsafeRawBufferPointer(start: bytes, count: Int(count)), at: offset)
                },
                truncate: { context, size in
                    guard let context else { return }
                    Unmanaged<PageRecorder>.fromOpaque(context).takeUnretainedValue().truncated(to: size)
                }))
        hook.pointee.context = Unmanaged.passUnretained(self).toOpaque()
    }

    deinit {
        // A backup that failed before `finish`: the hashing thread stops (it holds the core).
        handoff.close()
        hook.deallocate()
    }

    // MARK: The snapshot's thread

    private func wrote(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        let size = Int64(max(pageSize, 1))
        if offset % size != 0 || bytes.count % Int(size) != 0 {
            // Not whole pages: handed on alone, so that it marks only its own pages unknown.
            send()
            handoff.push(.write(offset, Array(bytes)), core: core, worker: &worker)
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
        send()
        handoff.push(.truncate(size), core: core, worker: &worker)
    }

    private func send() {
        guard !batch.isEmpty else { return }
        handoff.push(.write(batchOffset, batch), core: core, worker: &worker)
        batch = []
    }

    /// Writes and truncates, in order, from the snapshot's thread to the hashing thread.
    private final class Handoff: @unchecked Sendable {
        enum Event {
            case write(Int64, [UInt8])
            case truncate(Int64)
            var size: Int {
                if case .write(_, let bytes) = self { return bytes.count }
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
                case .write(let offset, let bytes): bytes.withUnsafeBytes { core.wrote($0, at: offset) }
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
        let path: String
        let fd: Int32
        private var known: [UInt64] = []
        private var run: [UInt8] = []
        private var runStart = 0
        private(set) var failure: (any Error)?

        init(path: String) throws {
            self.path = path
            fd = RawPath.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd < 0 { throw FileSystemError("create", path: path) }
            run.reserveCapacity(1 << 20)
        }

        deinit { close(fd) }

        func wrote(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
            let count = bytes.count
            guard failure == nil, pageSize > 0, count > 0, offset >= 0 else { return }
            let size = Int64(pageSize)
            guard offset % size == 0, count % pageSize == 0 else {
                forget(from: Int(offset / size), through: Int((offset + Int64(count) - 1) / size))
                return
            }
            var page = Int(offset / size)
            var at = 0
            while at < count {
                let digest = SHA256.hash(data: UnsafeRawBufferPointer(rebasing: bytes[at..<at + pageSize]))
                if !run.isEmpty && page != runStart + run.count / 32 { flush() }
                if run.isEmpty { runStart = page }
                run.append(contentsOf: digest)
                mark(page)
                hashed += 1
                if run.count >= 1 << 20 { flush() }
                page += 1
                at += pageSize
            }
        }

        func truncated(to size: Int64) {
            guard pageSize > 0, size >= 0 else { return }
            flush()
            // The page the cut falls in (if any) and every page after it.
            forget(from: Int(size / Int64(pageSize)), through: known.count * 64 - 1)
        }

        private func mark(_ page: Int) {
            let word = page >> 6
            if word >= known.count { known.append(contentsOf: repeatElement(0, count: word - known.count + 1)) }
            known[word] |= 1 << UInt64(page & 63)
        }

        func isKnown(_ page: Int) -> Bool {
            let word = page >> 6
            return word < known.count && known[word] & (1 << UInt64(page & 63)) != 0
        }

        private func forget(from first: Int, through last: Int) {
            let end = min(last, known.count * 64 - 1)
            guard first <= end else { return }
            for page in max(first, 0)...end {
                known[page >> 6] &= ~(1 << UInt64(page & 63))
            }
        }

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

    /// The `.pages` file of the finished snapshot at `snapshot` (whose header says `pageSize`),
    /// written to `output`: the recorded hashes, and the unknown pages read from the file. When
    /// the recorder saw no write (the VFS was not there) or cut pages of another size (the page
    /// size changed during the copy), every page is read: the same result, the old way.
    func finish(snapshot: String, pageSize: Int, writingTo output: String) throws -> PageFiles.Summary {
        send()
        handoff.close()
        worker?.wait()
        worker = nil
        core.flush()
        if let failure = core.failure { throw failure }
        guard attached, pageSize == self.pageSize, hashed > 0 else {
            return try PageFiles.hash(file: snapshot, pageSize: pageSize, writingTo: output)
        }
        let (source, count) = try PageFiles.openPages(snapshot, pageSize: pageSize)
        defer { close(source) }
        // Every page has its 32 bytes in the scratch file (a hole for those never written).
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
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
        defer { page.deallocate() }
        var first = 0
        while first < count {
            try Interruption.check()
            let pages = min(perChunk, count - first)
            let chunk = UnsafeMutableRawBufferPointer(rebasing: hashes[0..<pages * 32])
            try PageFiles.readFully(fd, into: chunk, at: Int64(first) * 32, path: path)
            for index in 0..<pages where !core.isKnown(first + index) {
                try PageFiles.readFully(source, into: page, at: Int64(first + index) * Int64(pageSize), path: snapshot)
                let digest = SHA256.hash(data: UnsafeRawBufferPointer(page))
                digest.withUnsafeBytes {
                    chunk.baseAddress!.advanced(by: index * 32).copyMemory(from: $0.baseAddress!, byteCount: 32)
                }
                reread += 1
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
