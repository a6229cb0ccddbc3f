import CLinux
import Foundation
import Testing

@testable import GranaryKit

/// `CPUYield`: the scheduling policy of real threads, read back from the kernel.
@Suite("CPU yield")
struct CPUYieldTests {
    static var idle: Int32 { granary_sched_idle() }
    static var other: Int32 { granary_sched_other() }

    /// The policy of a thread started now from the calling thread.
    static func policyOfNewThread() -> Int32 {
        let box = PolicyBox()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            box.policy = sched_getscheduler(0)
            done.signal()
        }
        thread.start()
        done.wait()
        return box.policy
    }

    @Test(
        "work on private files runs under SCHED_IDLE, as do threads it starts; normal {} and the end restore SCHED_OTHER"
    )
    func yieldsAndRestores() throws {
        let governor = CPUYield(permitted: true)
        // As root (CI) a thread may always come back from SCHED_IDLE, so the governor must be on.
        if getuid() == 0 { #expect(governor.enabled) }
        try #require(governor.enabled, "this user may not leave SCHED_IDLE: nothing to test")
        #expect(sched_getscheduler(0) == Self.other)
        governor.yielding {
            // `raised` would mean other load starved this test for a second: then SCHED_OTHER is right.
            #expect(sched_getscheduler(0) == Self.idle || governor.raised)
            #expect(Self.policyOfNewThread() == Self.idle || governor.raised)
            governor.yielding { #expect(sched_getscheduler(0) == Self.idle || governor.raised) }
            #expect(sched_getscheduler(0) == Self.idle || governor.raised, "a nested call must not restore")
            governor.normal {
                #expect(sched_getscheduler(0) == Self.other)
                #expect(Self.policyOfNewThread() == Self.other)
            }
            #expect(sched_getscheduler(0) == Self.idle || governor.raised)
            #expect(governor.mode != .normal)
        }
        #expect(sched_getscheduler(0) == Self.other)
    }

    @Test("a governor not permitted to yield (what GRANARY_YIELD=0 asks of granary) leaves every thread's policy alone")
    func switchedOff() {
        let governor = CPUYield(permitted: false)
        #expect(!governor.enabled)
        #expect(governor.mode == .normal)
        governor.yielding {
            #expect(sched_getscheduler(0) == Self.other)
            governor.normal { #expect(sched_getscheduler(0) == Self.other) }
        }
    }

    /// This thread's CPU time in nanoseconds, from the kernel's own clock.
    static func threadCPUTime() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    @Test("a thread's time on and waiting for a CPU is read from the kernel")
    func schedulerStatistics() throws {
        let before = try #require(CPUYield.times(of: granary_gettid()))
        // Spin for 30 ms of this thread's own CPU time, however loaded the machine is.
        let start = Self.threadCPUTime()
        var spins = 0
        while Self.threadCPUTime() - start < 30_000_000 { spins &+= 1 }
        let after = try #require(CPUYield.times(of: granary_gettid()))
        #expect(after.running - before.running >= 25_000_000, "\(before) → \(after) after \(spins) spins")
        #expect(after.waiting >= before.waiting)
        #expect(CPUYield.threads().contains(granary_gettid()))
        #expect(CPUYield.times(of: 0) == nil)
    }

    @Test("starved: waited half a second in the last one and ran less than a quarter")
    func starvationRule() {
        #expect(CPUYield.starved(.init(running: 0, waiting: 2_000_000_000)))
        #expect(CPUYield.starved(.init(running: 200_000_000, waiting: 500_000_000)))
        // Sharing the CPUs with other work, but getting a fair part of them.
        #expect(!CPUYield.starved(.init(running: 300_000_000, waiting: 3_000_000_000)))
        // Not running because there is nothing to do (waiting for the disk or for the snapshot).
        #expect(!CPUYield.starved(.init(running: 10_000_000, waiting: 100_000_000)))
    }
}

private final class PolicyBox: @unchecked Sendable {
    var policy: Int32 = -1
}
