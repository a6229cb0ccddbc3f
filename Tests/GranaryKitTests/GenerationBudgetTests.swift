import GranaryKit
import Testing

/// The bound on one user's generation storm (docs/follow.md, "Generation storms"): a burst at
/// once, then one more every period, never more than the burst saved up.
@Suite("follow: the generations a user may start")
struct GenerationBudgetTests {
    @Test("the burst at once, then one per period; a quiet spell saves up to the burst, no more")
    func bucket() {
        var budget = GenerationBudget(burst: 4, every: .seconds(10))
        let start = ContinuousClock.now
        for taken in 1...4 { #expect(budget.take(now: start) == nil, "generation \(taken) of the burst") }
        // The fifth waits a whole period, and asking again halfway does not move that moment.
        #expect(budget.take(now: start) == start + .seconds(10))
        #expect(budget.take(now: start + .seconds(5)) == start + .seconds(10))
        #expect(budget.take(now: start + .seconds(10)) == nil)
        #expect(budget.take(now: start + .seconds(10)) == start + .seconds(20))
        // A long quiet spell: the burst again, and not one more.
        let later = start + .seconds(1000)
        for taken in 1...4 { #expect(budget.take(now: later) == nil, "generation \(taken) after the spell") }
        #expect(budget.take(now: later) == later + .seconds(10))
    }
}
