import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// `Parallel.Pool.each`, which issues the syncs of a group of `follow`'s segments together: every
/// index once, the results in order, at most `width` at once, a real `fsync` of real files
/// through it, its helpers kept from call to call and ended with the pool, and a call that
/// returns with no helper at all. `make tsan` runs this suite under the thread sanitizer.
@Suite("Parallel.Pool.each")
struct ParallelEachTests {
    /// How many bodies run at once, and the most seen.
    final class Gauge: @unchecked Sendable {
        let lock = NSLock()
        var now = 0
        var most = 0
        var calls: [Int] = []
        func enter(_ index: Int) {
            lock.withLock {
                now += 1
                most = max(most, now)
                calls.append(index)
            }
        }
        func leave() { lock.withLock { now -= 1 } }
    }

    @Test(
        "every index once, results in order, at most width at once",
        arguments: [(0, 4), (1, 4), (5, 1), (7, 3), (40, 8)])
    func eachIndexOnce(_ shape: (count: Int, width: Int)) {
        let gauge = Gauge()
        let pool = Parallel.Pool(width: shape.width)
        let results = pool.each(shape.count) { index -> Int in
            gauge.enter(index)
            usleep(2_000)
            gauge.leave()
            return index * index
        }
        #expect(results == (0..<shape.count).map { $0 * $0 })
        #expect(gauge.calls.sorted() == Array(0..<shape.count))
        #expect(gauge.most <= max(1, shape.width))
        if shape.count >= 40 && shape.width > 1 {
            // Sleeping bodies overlap once threads are there (the assertion that they do at all):
            // forty of 2 ms leave the helpers 80 ms to start, however loaded the machine.
            #expect(gauge.most > 1)
        }
    }

    @Test("fsync of real files through it: 0 for each, and an errno for a descriptor that is not open")
    func syncsFiles() throws {
        let folder = TemporaryFolder()
        var descriptors: [Int32] = []
        for index in 0..<6 {
            let fd = open(folder.child("f\(index)"), O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            #expect(write(fd, "segment \(index)", 9) == 9)
            descriptors.append(fd)
        }
        // (Closed, and -1 in its place: its number may be taken by any test's open meanwhile.)
        close(descriptors[4])
        descriptors[4] = -1
        let fds = descriptors
        let codes = Parallel.Pool(width: 8).each(fds.count) { index -> Int32 in fsync(fds[index]) == 0 ? 0 : errno }
        #expect(codes == [0, 0, 0, 0, EBADF, 0])
        for (index, fd) in descriptors.enumerated() where index != 4 { close(fd) }
    }

    @Test("a pool keeps its helpers from call to call, at most width - 1, and they end when it is let go")
    func poolKeepsHelpers() throws {
        var pool: Parallel.Pool? = Parallel.Pool(width: 4)
        let shared = pool!.shared
        for round in 0..<50 {
            let gauge = Gauge()
            let results = pool!.each(3 + round % 5) { index -> Int in
                gauge.enter(index)
                usleep(200)
                gauge.leave()
                return index + round
            }
            #expect(results == (0..<(3 + round % 5)).map { $0 + round })
            #expect(gauge.most <= 4)
        }
        // Fifty calls, three helpers at most: not a thread per call.
        #expect(shared.runningNow <= 3)
        pool = nil
        let deadline = Date().addingTimeInterval(30)
        while shared.runningNow > 0 && Date() < deadline { usleep(10_000) }
        #expect(shared.runningNow == 0)
    }

    @Test("with no helper started, every body runs on the caller, once, in order, and the call returns")
    func poolWithoutHelpers() {
        let pool = Parallel.Pool(width: 8)
        pool.startsHelpers = false
        let caller = pthread_self()
        let gauge = Gauge()
        let results = pool.each(20) { index -> Bool in
            gauge.enter(index)
            gauge.leave()
            return pthread_equal(pthread_self(), caller) != 0
        }
        #expect(results == Array(repeating: true, count: 20))
        #expect(gauge.calls == Array(0..<20))
        #expect(pool.shared.runningNow == 0)
    }

    @Test("two callers of one pool at once: each gets its own results")
    func poolTwoCallers() {
        let pool = Parallel.Pool(width: 3)
        let other = Pending {
            pool.each(30) { index -> Int in
                usleep(100); return index * 2
            }
        }
        let mine = pool.each(30) { index -> Int in
            usleep(100)
            return index * 3
        }
        #expect(mine == (0..<30).map { $0 * 3 })
        #expect((try? other.wait()) == (0..<30).map { $0 * 2 })
    }

    struct Refused: Error, Equatable { let which: String }

    @Test("both: the two results, each piece run once; the first error of a, then b")
    func bothRuns() throws {
        let gauge = Gauge()
        let (a, b) = try Parallel.both(
            { () -> String in
                gauge.enter(0)
                usleep(50_000)
                gauge.leave()
                return "check"
            },
            { () -> Int in
                gauge.enter(1)
                usleep(50_000)
                gauge.leave()
                return 42
            })
        #expect(a == "check" && b == 42)
        #expect(gauge.calls.sorted() == [0, 1])
        #expect(throws: Refused(which: "a")) {
            _ = try Parallel.both(
                { () -> Int in throw Refused(which: "a") }, { () -> Int in throw Refused(which: "b") })
        }
        #expect(throws: Refused(which: "b")) {
            _ = try Parallel.both({ () -> Int in 1 }, { () -> Int in throw Refused(which: "b") })
        }
    }
}
