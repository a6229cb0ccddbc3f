import CSnapshotTee
import Foundation
import GranaryDigest
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The recorder's hashing thread: the writes handed over from the snapshot's thread, and the
/// hashes file it keeps.
extension PageRecorder {
    /// Writes and truncates, in order, from the snapshot's thread to the hashing thread.
    final class Handoff: @unchecked Sendable {
        enum Event {
            /// Bytes written at an offset, with their pages' hashes (32 bytes each, in order) when
            /// the snapshot's thread took them (``PageRecorder/send()``).
            case write(Int64, [UInt8], [UInt8]?)
            case truncate(Int64)
            /// Phase 2 (``PageRecorder/Candidates``): whole pages written at an offset, as many as
            /// the count, whose hashes are the base's; their bytes only for the cross-check.
            case same(Int64, Int, [UInt8]?)
            var size: Int {
                if case .write(_, let bytes, _) = self { return bytes.count }
                if case .same(_, _, let bytes?) = self { return bytes.count }
                return 0
            }
        }
        let condition = NSCondition()
        var queue: [Event] = []
        var queued = 0
        var closed = false
        // Invariant D8 (docs/delta-invariants.md)
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
                case .same(let offset, let count, let bytes):
                    if let bytes {
                        bytes.withUnsafeBytes { core.same(at: offset, count: count, bytes: $0) }
                    } else {
                        core.same(at: offset, count: count, bytes: nil)
                    }
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
    final class Core: @unchecked Sendable {
        var pageSize = 0
        private(set) var hashed = 0
        /// Pages whose hash phase 2 took from the base (``same(at:count:bytes:)``).
        private(set) var assumed = 0
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
                keep(digest, of: page)
                hashed += 1
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

        /// Puts `digests` (32 bytes each) in place as the hashes of the pages from `first` on (a
        /// run written to the hashes file); the caller marks them known.
        private func keep(_ digests: UnsafeRawBufferPointer, from first: Int) {
            if !run.isEmpty && first != runStart + run.count / 32 { flush() }
            if run.isEmpty { runStart = first }
            run.append(contentsOf: digests)
            if run.count >= 1 << 20 { flush() }
        }

        /// Puts `digest` in place as page `page`'s hash (a run written to the hashes file).
        private func keep(_ digest: UnsafeRawBufferPointer, of page: Int) {
            if !run.isEmpty && page != runStart + run.count / 32 { flush() }
            if run.isEmpty { runStart = page }
            run.append(contentsOf: digest)
            known.insert(page)
            if run.count >= 1 << 20 { flush() }
        }

        /// Phase 2: `count` whole pages written at `offset` that follow's record says did not
        /// change since the base: each gets the base's hash, unhashed, and is not a changed page.
        /// With `bytes` (the cross-check), each page is hashed too and must have the base's hash;
        /// one that does not fails the backup (``FollowedCrossCheckFailure``).
        /// Invariant D13 (docs/delta-invariants.md)
        func same(at offset: Int64, count: Int, bytes: UnsafeRawBufferPointer?) {
            guard failure == nil, pageSize > 0, count > 0, offset >= 0, offset % Int64(pageSize) == 0 else { return }
            guard let log else {
                failure = NoCopyFallback(reason: "phase 2 without a discarded copy")
                return
            }
            if log.reason != nil { return }
            var page = Int(offset / Int64(pageSize))
            if bytes == nil {
                // No cross-check: the base's hashes of the run are put in place a window at a
                // time, not page by page (most of a 1 GiB store's 262,144 pages take this way).
                var left = count
                while left > 0 {
                    let taken: Int
                    do {
                        taken = try log.baseDigests(from: page, count: left) { keep($0, from: page) }
                    } catch {
                        failure = error
                        return
                    }
                    guard taken > 0 else {
                        failure = NoCopyFallback(reason: "phase 2 took page \(page + 1), which its base does not hold")
                        return
                    }
                    known.insert(from: page, through: page + taken - 1)
                    log.unchanged(from: page, through: page + taken - 1)
                    assumed += taken
                    page += taken
                    left -= taken
                }
                log.size = max(log.size, offset + Int64(count) * Int64(pageSize))
                return
            }
            let digest = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 16)
            defer { digest.deallocate() }
            for index in 0..<count {
                do {
                    guard try log.baseDigest(of: page, into: digest) else {
                        failure = NoCopyFallback(reason: "phase 2 took page \(page + 1), which its base does not hold")
                        return
                    }
                } catch {
                    failure = error
                    return
                }
                if let bytes {
                    let image = UnsafeRawBufferPointer(rebasing: bytes[index * pageSize..<(index + 1) * pageSize])
                    guard SHA256.hash(data: image).elementsEqual(UnsafeRawBufferPointer(digest)) else {
                        failure = FollowedCrossCheckFailure(page: page + 1)
                        return
                    }
                }
                keep(UnsafeRawBufferPointer(digest), of: page)
                log.unchanged(page)
                assumed += 1
                page += 1
            }
            log.size = max(log.size, offset + Int64(count) * Int64(pageSize))
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
}
