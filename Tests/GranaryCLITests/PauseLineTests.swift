import GranaryOwner
import Testing

@testable import GranaryCLI

/// The line a restore prints for each swapped store's owner (granary-reopen(7), THE PAUSE).
@Suite("restore: the pause line")
struct PauseLineTests {
    @Test(
        "the pause line says how the pause ended: RESUMED, late, expired (EXPIRED received), or no answer",
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
        ])
    func line(ending: RestoreResult.PauseEnding, expected: String) {
        #expect(RestoreResult.pauseLine("Local.sqlite", seconds: 0.0018, ending: ending) == expected)
    }

    @Test("how a pause ended is read from the restore's warning for that store, and that store only")
    func ending() {
        // The warnings as the restore gives them after the commit (Restorer).
        let warnings = [
            "restored; the owner of Cloud.sqlite reopened by itself: its lease had run out before RESUME",
            "restored; the owner of Late.sqlite resumed late (12034 ms after RESUME)",
            "restored; the owner of Gone.sqlite did not confirm it resumed (it reopens on its own when granary's connection closes)",
        ]
        #expect(RestoreResult.pauseEnding(of: "Cloud.sqlite", warnings: warnings) == .expired)
        #expect(RestoreResult.pauseEnding(of: "Late.sqlite", warnings: warnings) == .late)
        #expect(RestoreResult.pauseEnding(of: "Gone.sqlite", warnings: warnings) == .unanswered)
        #expect(RestoreResult.pauseEnding(of: "Local.sqlite", warnings: warnings) == .resumed)
        #expect(RestoreResult.pauseEnding(of: "Cloud", warnings: warnings) == .resumed)
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
