import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// `Parallel.each`, which issues the syncs of a group of `follow`'s segments together: every index
/// once, the results in order, at most `width` at once, and a real `fsync` of real files through
/// it. `make tsan` runs this suite under the thread sanitizer.
@Suite("Parallel.each")
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
        let results = Parallel.each(shape.count, width: shape.width) { index -> Int in
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
        let codes = Parallel.each(fds.count, width: 8) { index -> Int32 in fsync(fds[index]) == 0 ? 0 : errno }
        #expect(codes == [0, 0, 0, 0, EBADF, 0])
        for (index, fd) in descriptors.enumerated() where index != 4 { close(fd) }
    }
}
