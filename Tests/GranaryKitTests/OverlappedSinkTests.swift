import Foundation
import GranaryDigest
import Testing

@testable import GranaryKit

/// `OverlappedSink` (issue 35: a chain's restore hashes and writes pages on a thread of its own
/// while the next chunk is decompressed): the wrapped sink sees every byte, in order, once; what
/// it throws comes back to the caller and stops its bytes; a sink dropped without `finish` stops
/// its thread. Run under the thread sanitizer by `make tsan`.
@Suite("overlapped member sink")
struct OverlappedSinkTests {
    /// Hashes what it is given, and throws at the byte `failAt` when one is set.
    final class Recorder: MemberSink, @unchecked Sendable {
        var hasher = SHA256()
        var count = 0
        var calls = 0
        var finished = false
        var failedOnCall: Int?
        let failAt: Int?
        init(failAt: Int? = nil) { self.failAt = failAt }
        struct Refused: Error, Equatable { let at: Int }
        func consume(_ bytes: UnsafeRawBufferPointer) throws {
            calls += 1
            if let failAt, count + bytes.count > failAt {
                failedOnCall = calls
                throw Refused(at: failAt)
            }
            hasher.update(bufferPointer: bytes)
            count += bytes.count
        }
        func finish() throws { finished = true }
    }

    /// Chunks of uneven sizes (some larger than a buffer) of deterministic bytes.
    static func chunks(total: Int, seed: UInt64) -> [[UInt8]] {
        var state = seed
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        var result: [[UInt8]] = []
        var made = 0
        while made < total {
            let size = min(total - made, 1 + Int(next() % 300_000))
            result.append((0..<size).map { _ in UInt8(truncatingIfNeeded: next()) })
            made += size
        }
        return result
    }

    @Test("every byte reaches the wrapped sink once and in order, through buffers smaller than some chunks")
    func passesEveryByteInOrder() throws {
        let chunks = Self.chunks(total: 3_000_000, seed: 7)
        var expected = SHA256()
        for chunk in chunks { expected.update(data: chunk) }
        let recorder = Recorder()
        let sink = OverlappedSink(recorder, depth: 3, size: 64 * 1024)
        for chunk in chunks { try chunk.withUnsafeBytes { try sink.consume($0) } }
        try sink.finish()
        #expect(recorder.finished)
        #expect(recorder.count == 3_000_000)
        #expect(recorder.hasher.finalize() == expected.finalize())
        #expect(recorder.calls >= 3_000_000 / (64 * 1024), "handed over in buffer-sized pieces: \(recorder.calls)")
    }

    @Test("what the wrapped sink throws is thrown to the caller (by consume or finish), and no byte reaches it after")
    func failureComesBack() throws {
        let chunks = Self.chunks(total: 2_000_000, seed: 11)
        let recorder = Recorder(failAt: 500_000)
        let sink = OverlappedSink(recorder, depth: 2, size: 32 * 1024)
        var thrown: (any Error)?
        for chunk in chunks where thrown == nil {
            do { try chunk.withUnsafeBytes { try sink.consume($0) } } catch { thrown = error }
        }
        if thrown == nil {
            do { try sink.finish() } catch { thrown = error }
        } else {
            #expect(throws: Recorder.Refused(at: 500_000)) { try sink.finish() }
        }
        #expect(thrown as? Recorder.Refused == Recorder.Refused(at: 500_000), "\(String(describing: thrown))")
        #expect(!recorder.finished, "finish is not passed on after a failure")
        #expect(recorder.count <= 500_000)
        #expect(
            recorder.failedOnCall != nil && recorder.calls == recorder.failedOnCall, "the failing call was the last")
    }

    @Test("a sink dropped without finish (the archive failed first) stops its thread; the wrapped sink is let go")
    func droppedWithoutFinish() throws {
        weak var released: Recorder?
        do {
            let recorder = Recorder()
            released = recorder
            let sink = OverlappedSink(recorder, depth: 2, size: 16 * 1024)
            for chunk in Self.chunks(total: 400_000, seed: 3) { try chunk.withUnsafeBytes { try sink.consume($0) } }
            #expect(!recorder.finished)
        }
        #expect(released == nil, "the worker thread let the wrapped sink go")
    }
}
