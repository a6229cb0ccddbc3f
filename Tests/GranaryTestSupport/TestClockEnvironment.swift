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

/// One whole second, a minute before this test process first asked (`YYYYMMDDTHHMMSSZ`), for the
/// tests that take every archive in one second (`GRANARY_TEST_NOW`): their archives are as old
/// as the real clock says, whenever the tests run. (A fixed date there turned `check`'s age rule
/// red one day after it was written.)
public let testSecond: String = ArchiveName.stamp(
    micros: ArchiveName.micros(Date(timeIntervalSinceNow: -60)), precise: false)
