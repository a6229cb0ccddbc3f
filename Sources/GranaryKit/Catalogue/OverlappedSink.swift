import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A ``MemberSink`` whose work runs on a thread of its own, beside the one that decompresses the
/// archive (issue 35: a chain's restore hashes and writes each page of its full and of its deltas
/// while the next megabyte is decompressed and, for a delta, hashed as a member, on the second
/// core). Each chunk is copied into one of `depth` buffers of `size` bytes and handed over;
/// `consume` waits while all are taken, so memory stays at `depth × size` whatever the member.
///
/// What the wrapped sink throws stops its bytes (the others are dropped, as ``ArchiveVerifier``
/// drops them) and is thrown by the next `consume` or by `finish`, which first waits for every
/// chunk handed over. A sink dropped without `finish` (the member or the archive failed first)
/// stops its thread and waits for it before it goes: nothing of it outlives the extraction.
final class OverlappedSink: MemberSink, @unchecked Sendable {
    private let inner: any MemberSink
    private let state: State
    private let size: Int

    /// What the two threads share, under `condition`'s lock.
    private final class State: @unchecked Sendable {
        let condition = NSCondition()
        var free: [UnsafeMutableRawBufferPointer] = []
        var queue: [(buffer: UnsafeMutableRawBufferPointer, count: Int)] = []
        /// The buffers' memory, mapped (and unmapped) on its own: taken from malloc, 1 MiB blocks
        /// freed raise glibc's mmap threshold, and the next ones stay in its heap (the restore of a
        /// chain of 23 deltas peaked 16 MiB higher).
        var region: UnsafeMutableRawBufferPointer?
        /// One buffer from malloc, when the mapping failed.
        var fallback: UnsafeMutableRawBufferPointer?
        /// No more chunks come (`finish`, or the sink dropped).
        var ended = false
        /// The sink was dropped: the worker drops what is queued.
        var cancelled = false
        var failure: (any Error)?
        var stopped = false
        /// The wrapped sink, for the worker (which lets it go when it stops).
        var sink: (any MemberSink)?
    }

    var provesContent: Bool { inner.provesContent }

    init(_ inner: any MemberSink, depth: Int = 4, size: Int = 1 << 20) {
        self.inner = inner
        self.size = size
        let state = State()
        let depth = max(1, depth)
        let base = mmap(nil, depth * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if let base, base != MAP_FAILED {
            let region = UnsafeMutableRawBufferPointer(start: base, count: depth * size)
            state.region = region
            for index in 0..<depth {
                state.free.append(UnsafeMutableRawBufferPointer(rebasing: region[index * size..<(index + 1) * size]))
            }
        } else {
            let region = UnsafeMutableRawBufferPointer.allocate(byteCount: depth * size, alignment: 64)
            state.free.append(region)
            state.region = nil
            state.fallback = region
        }
        self.state = state
        // The wrapped sink is used by the worker alone until `finish`, which waits for it.
        state.sink = inner
        let thread = Thread { [state] in Self.work(state) }
        thread.stackSize = 1 << 20
        thread.start()
    }

    deinit {
        let state = state
        state.condition.lock()
        state.ended = true
        state.cancelled = true
        state.condition.broadcast()
        while !state.stopped { state.condition.wait() }
        state.condition.unlock()
        if let region = state.region { munmap(region.baseAddress, region.count) }
        state.fallback?.deallocate()
    }

    /// The worker: takes the chunks in order and hands them to `inner` until the end.
    private static func work(_ state: State) {
        let condition = state.condition
        condition.lock()
        while true {
            while state.queue.isEmpty && !state.ended { condition.wait() }
            if state.queue.isEmpty || state.cancelled { break }
            let (buffer, count) = state.queue.removeFirst()
            let inner = state.failure == nil ? state.sink : nil
            condition.unlock()
            var thrown: (any Error)?
            if let inner {
                do { try inner.consume(UnsafeRawBufferPointer(rebasing: buffer[0..<count])) } catch { thrown = error }
            }
            condition.lock()
            if let thrown, state.failure == nil { state.failure = thrown }
            state.free.append(buffer)
            condition.broadcast()
        }
        state.sink = nil
        state.stopped = true
        condition.broadcast()
        condition.unlock()
    }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        var input = bytes
        let condition = state.condition
        while !input.isEmpty {
            condition.lock()
            while state.free.isEmpty && state.failure == nil { condition.wait() }
            if let failure = state.failure {
                condition.unlock()
                throw failure
            }
            let buffer = state.free.removeLast()
            condition.unlock()
            let count = min(size, input.count)
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: input[0..<count]))
            input = UnsafeRawBufferPointer(rebasing: input[count...])
            condition.lock()
            state.queue.append((buffer, count))
            condition.broadcast()
            condition.unlock()
        }
    }

    func finish() throws {
        let condition = state.condition
        condition.lock()
        state.ended = true
        condition.broadcast()
        while !state.stopped { condition.wait() }
        let failure = state.failure
        condition.unlock()
        if let failure { throw failure }
        try inner.finish()
    }
}
