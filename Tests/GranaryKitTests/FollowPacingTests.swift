import Foundation
import Testing

@testable import GranaryKit

/// How long `follow` waits after a user's first change (FollowPacing): as long as the interval
/// allows less what rounds lately overshot, never below half the interval.
@Suite("follow pacing")
struct FollowPacingTests {
    /// A pacing of a 1-s interval after `count` rounds 100 ms apart, each `overshoot` late.
    static func paced(_ count: Int, overshoot: Int64) -> FollowPacing {
        var pacing = FollowPacing(interval: 1_000_000)
        var now: Int64 = 10_000_000
        for _ in 0..<count {
            pacing.record(due: now - overshoot, ended: now)
            now += 100_000
        }
        return pacing
    }

    @Test("before anything is measured it waits half the interval, as before pacing")
    func startsAtHalf() {
        #expect(FollowPacing(interval: 1_000_000).delay == 500_000)
        #expect(FollowPacing(interval: 4_000_000).delay == 2_000_000)
    }

    @Test("rounds durable soon after they were due: it waits the interval less the floor and the safety")
    func quietRoundsWaitLonger() {
        // Two windows of rounds that each overshot 30 ms.
        let pacing = Self.paced(50, overshoot: 30_000)
        // The floor (three tenths of the interval) and the safety: 650 ms.
        #expect(pacing.delay == 1_000_000 - 300_000 - 50_000)
    }

    @Test("a round that overshot shortens the wait for two windows, then it is forgotten")
    func overshootAgesOut() {
        var pacing = FollowPacing(interval: 1_000_000)
        var now: Int64 = 10_000_000
        func rounds(_ count: Int, overshoot: Int64) {
            for _ in 0..<count {
                pacing.record(due: now - overshoot, ended: now)
                now += 100_000
            }
        }
        rounds(50, overshoot: 10_000)
        rounds(1, overshoot: 400_000)
        #expect(pacing.delay == 1_000_000 - 400_000 - 50_000)
        // Still remembered through the window after it.
        rounds(25, overshoot: 10_000)
        #expect(pacing.delay == 550_000)
        rounds(25, overshoot: 10_000)
        #expect(pacing.delay == 650_000)
    }

    @Test("rounds that overshoot more than half the interval: it waits half the interval, no less")
    func loadedFallsBackToHalf() {
        #expect(Self.paced(50, overshoot: 900_000).delay == 500_000)
    }

    @Test("a short interval (the tests' 100 ms) keeps half of it")
    func shortInterval() {
        var pacing = FollowPacing(interval: 100_000)
        pacing.record(due: 0, ended: 1)
        #expect(pacing.delay == 50_000)
    }
}
