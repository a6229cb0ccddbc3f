import CSnapshotTee
import Foundation
import GranaryDigest
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
    /// What tests set and read (PageRecorderKnobs.swift); a backup leaves them as they are.
    var knobs = Knobs()

    /// Phase 2 (issue 51, ``FollowedStore``): the pages of a discarded copy to hash; every other
    /// page written takes its base's hash unhashed. Set before the copy starts; nil: every page.
    /// Invariant D13 (docs/delta-invariants.md)
    struct Candidates {
        /// Page indexes (from 0) follow's frames named.
        var pages: PageBits
        /// Every page from this index on is a candidate too (grown, or cut and grown back).
        var from: Int
        /// Whether the pages taken from the base are hashed anyway and checked against it.
        var crossCheck: Bool
        func contains(_ page: Int) -> Bool { page == 0 || page >= from || pages.contains(page) }
        /// Candidates, counted up to `count` pages.
        func count(upTo count: Int) -> Int {
            var inSet = 0
            pages.forEach { if $0 > 0 && $0 < min(from, count) { inSet += 1 } }
            return inSet + 1 + max(0, count - max(from, 1))
        }
    }
    var candidates: Candidates?
    /// Phase 2's outcome for this store: the candidates' count, or why every page was hashed;
    /// nil when it was not tried (no discarded copy, no follow source).
    var followed: Swift.Result<Int, FollowedFallback>?
    /// Phase 2's copy: the pages read alone (``LivePages``), or why the copy went through SQLite's
    /// backup API after all; nil when it was not tried.
    var pagesRead: Swift.Result<Int, FollowedFallback>?
    /// Phase 2's check: the pages read parsed alone (``PageCheck``), this delta the Nth in a row of
    /// its chain checked so; or why the configured check ran; nil when it was not tried.
    var pagesChecked: Swift.Result<Int, FollowedFallback>?
    /// Phase 2: the pages written since the last handoff that take their base's hash (offset,
    /// count, and their bytes for the cross-check).
    private var sameOffset: Int64 = 0
    private var sameCount = 0
    private var sameBytes: [UInt8] = []

    /// The bytes SQLite has written to the copy so far (any thread: a progress bar's).
    var written: Int64 { writtenBytes.load(ordering: .relaxed) }
    private let writtenBytes = Atomic<Int64>(0)

    let core: Core
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
        if let candidates {
            // Phase 2: runs of candidates are batched as always; the pages between take their
            // base's hash (their bytes go on only for the cross-check).
            let pageSize = Int(size)
            var at = 0
            while at < bytes.count {
                let first = Int((offset + Int64(at)) / size)
                let wanted = candidates.contains(first)
                var end = at + pageSize
                while end < bytes.count && candidates.contains(Int((offset + Int64(end)) / size)) == wanted {
                    end += pageSize
                }
                let part = UnsafeRawBufferPointer(rebasing: bytes[at..<end])
                if wanted {
                    batchWrite(part, at: offset + Int64(at))
                } else {
                    sameWrite(part, at: offset + Int64(at), crossCheck: candidates.crossCheck)
                }
                at = end
            }
            return
        }
        batchWrite(bytes, at: offset)
    }

    /// Phase 2: whole pages that keep their base's hash, gathered into one handoff.
    private func sameWrite(_ bytes: UnsafeRawBufferPointer, at offset: Int64, crossCheck: Bool) {
        sendBatch()
        let pages = bytes.count / max(pageSize, 1)
        if sameCount > 0
            && (offset != sameOffset + Int64(sameCount) * Int64(pageSize) || sameBytes.count >= Self.batchLimit
                || sameCount >= 1 << 20)
        {
            sendSame()
        }
        if sameCount == 0 { sameOffset = offset }
        sameCount += pages
        if crossCheck { sameBytes.append(contentsOf: bytes) }
    }

    private func sendSame() {
        guard sameCount > 0 else { return }
        let bytes = candidates?.crossCheck == true ? sameBytes : nil
        handoff.push(.same(sameOffset, sameCount, bytes), core: core, worker: &worker)
        sameCount = 0
        sameBytes = []
    }

    private func batchWrite(_ bytes: UnsafeRawBufferPointer, at offset: Int64) {
        sendSame()
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

    /// Hands on what waits: the batch, or phase 2's pages (only one of them waits at a time).
    private func send() {
        sendBatch()
        sendSame()
    }

    private func sendBatch() {
        guard !batch.isEmpty else { return }
        // The hashing thread is behind (half its queue waits): this thread, which would soon
        // wait for it, hashes the batch itself, and the hashing thread only records the hashes.
        // Two cores then share the hashing whenever the other work (the copy, a check beside it)
        // leaves one free; the order of everything else stays the writes' order.
        let mine: Bool
        switch knobs.writerHashes {
        case .whenBehind: mine = handoff.behind
        case .always: mine = true
        case .never: mine = false
        case .everyOther: mine = knobs.batches % 2 == 0
        }
        knobs.batches += 1
        let digests = mine ? Self.digests(of: batch, pageSize: pageSize) : nil
        knobs.hashedByWriter += (digests?.count ?? 0) / 32
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

    /// The `.pages` file of the finished snapshot at `snapshot` (whose header says `pageSize`),
    /// written to `output`: the recorded hashes, and the unknown pages read from the file. When
    /// the recorder saw no write (the VFS was not there) or cut pages of another size (the page
    /// size changed during the copy), every page is read: the same result, the old way.
    /// Invariant D6 (docs/delta-invariants.md).
    func finish(snapshot: String, pageSize: Int, writingTo output: String) throws -> PageFiles.Summary {
        try drain()
        guard attached, pageSize == self.pageSize, core.hashed > 0 else {
            return try PageFiles.hash(file: snapshot, pageSize: pageSize, writingTo: output)
        }
        let (source, count) = try PageFiles.openPages(snapshot, pageSize: pageSize)
        defer { close(source) }
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
        defer { page.deallocate() }
        return try writeList(count: count, to: output) { number, hash in
            try PageFiles.readFully(source, into: page, at: Int64(number) * Int64(pageSize), path: snapshot)
            SHA256.hash(data: UnsafeRawBufferPointer(page)).withUnsafeBytes { hash.copyMemory(from: $0) }
            knobs.reread += 1
        }
    }

    /// Ends the hashing thread (after the last writes) and reports its failure.
    func drain() throws {
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
    func writeList(
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
