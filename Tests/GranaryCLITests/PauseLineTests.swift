import GranaryOwner
import Testing

@testable import GranaryCLI

/// The line a restore prints for each swapped store's owner (granary-reopen(7), THE PAUSE).
@Suite("restore: the pause line")
struct PauseLineTests {
    @Test(
        "the pause line says how the pause ended: RESUMED, late, expired (EXPIRED received), no answer, or the owner gone",
        arguments: [
            (
                RestoreResult.PauseEnding.resumed,
                "Local.sqlite: owner paused for 1.8 ms (from PAUSE sent to RESUMED received)"
            ),
            (.late, "Local.sqlite: owner paused for 1.8 ms (from PAUSE sent to RESUMED received, late)"),
            (
                .expired,
                "Local.sqlite: owner paused for 1.8 ms, expired (from PAUSE sent to EXPIRED received: its lease ran out)"
            ),
            (
                .unanswered,
                "Local.sqlite: owner paused for at least 1.8 ms (from PAUSE sent until granary stopped waiting for RESUMED)"
            ),
            (
                .gone,
                "Local.sqlite: owner paused for at most 1.8 ms, gone (from PAUSE sent until its connection closed without an answer: the owner exited)"
            ),
        ])
    func line(ending: RestoreResult.PauseEnding, expected: String) {
        #expect(RestoreResult.pauseLine("Local.sqlite", seconds: 0.0018, ending: ending) == expected)
    }

    @Test("how a pause ended is read from the report's field, RESUMED on time when it has none")
    func ending() {
        #expect(RestoreResult.pauseEnding("expired") == .expired)
        #expect(RestoreResult.pauseEnding("late") == .late)
        #expect(RestoreResult.pauseEnding("unanswered") == .unanswered)
        #expect(RestoreResult.pauseEnding("gone") == .gone)
        #expect(RestoreResult.pauseEnding("resumed") == .resumed)
        #expect(RestoreResult.pauseEnding(nil) == .resumed)
    }
}

/// What granary tells the admin when an owner refuses.
@Suite("reopen refusals: exit status and hint")
struct ReopenRefusalHintTests {
    @Test("an owner that speaks none of granary's versions: 75, and a hint to bring them to one version")
    func unsupportedVersion() {
        let error = ReopenError.refused(
            store: "/srv/users/alice/Local.sqlite",
            reason: ReopenRefusal.unsupportedVersion(spoken: [2, 3]).explanation)
        #expect(error.status == .temporaryFailure)
        #expect(
            error.description.hasSuffix(
                "refused: unsupported-version (it speaks versions 2, 3 of the reopen protocol, granary 1)"))
        #expect(error.hint?.contains("both speak one version of the reopen protocol") == true)
        #expect(ReopenError.refused(store: "s", reason: "busy").hint == "run again; see the owner's log")
    }
}
