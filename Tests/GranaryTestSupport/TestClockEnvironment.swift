import Foundation
import GranaryKit

/// The environment that makes a debug granary stamp the archives it writes at `date`
/// (`GRANARY_TEST_NOW`, read in GranaryCLI's TestHooks): a test sets the time an archive was taken
/// instead of sleeping until the clock gets there. Stamps still come strictly after the newest
/// archive the host has of the user, as with the real clock.
public func testClock(_ date: Date) -> [String: String] {
    ["GRANARY_TEST_NOW": ArchiveName.stamp(micros: ArchiveName.micros(date), precise: true)]
}

/// `testClock` `seconds` before now: an archive that is that old when the test looks at it.
public func testClock(secondsAgo seconds: Double) -> [String: String] {
    testClock(Date(timeIntervalSinceNow: -seconds))
}
