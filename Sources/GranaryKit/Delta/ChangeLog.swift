import CSnapshotTee
import Foundation
import GranaryDigest
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The second recorder: a discarded copy's changed pages (a WAL store's `backup --delta`, no
/// snapshot file), kept by the ``PageRecorder`` the copy is written through.
extension PageRecorder {
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
    /// Invariant D6 (docs/delta-invariants.md).
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
            // Invariant D7 (docs/delta-invariants.md)
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
    /// Invariant D8 (docs/delta-invariants.md).
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

        /// Reads the window of the base's hashes that holds page `page` (0-based, one the base has).
        private func load(_ page: Int) throws {
            guard page < windowStart || page >= windowStart + Self.windowPages || windowStart < 0 else { return }
            let start = page / Self.windowPages * Self.windowPages
            let count = min(Self.windowPages, baseCount - start)
            window = [UInt8](repeating: 0, count: count * 32)
            try window.withUnsafeMutableBytes {
                try PageFiles.readFully(
                    base, into: $0, at: Int64(PageFiles.pagesHeader) + Int64(start) * 32, path: basePath)
            }
            windowStart = start
        }

        /// Copies the base's hash of page `page` (0-based) into `digest` (32 bytes); false when the
        /// base has no such page.
        func baseDigest(of page: Int, into digest: UnsafeMutableRawBufferPointer) throws -> Bool {
            guard page >= 0, page < baseCount else { return false }
            try load(page)
            let at = (page - windowStart) * 32
            window.withUnsafeBytes { digest.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[at..<at + 32])) }
            return true
        }

        /// The base's hashes of the pages from `first` (0-based) on, at most `count` of them and
        /// no further than the window that holds `first`, handed to `body` (32 bytes each); how
        /// many were handed (0 when the base has no page `first`).
        func baseDigests(from first: Int, count: Int, _ body: (UnsafeRawBufferPointer) -> Void) throws -> Int {
            guard first >= 0, first < baseCount, count > 0 else { return 0 }
            try load(first)
            let taken = min(count, windowStart + Self.windowPages - first, baseCount - first)
            let at = (first - windowStart) * 32
            window.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[at..<at + taken * 32])) }
            return taken
        }

        /// Page `page` (0-based) was written with the base's bytes (phase 2): not changed.
        func unchanged(_ page: Int) { changed.remove(page) }

        /// The pages from `first` through `last` (0-based) were written with the base's bytes.
        func unchanged(from first: Int, through last: Int) { changed.remove(from: first, through: last) }

        /// Page `page` (0-based) was written with `bytes` (its SHA-256 `digest`, 32 bytes).
        func record(page: Int, digest: UnsafeRawBufferPointer, bytes: UnsafeRawBufferPointer) throws {
            if page < baseCount {
                try load(page)
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
}
