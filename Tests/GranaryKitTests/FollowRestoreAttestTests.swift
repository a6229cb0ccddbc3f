import Foundation
import Testing

@testable import GranaryKit

/// What `restore --at` may claim past a followed window's end (FollowRestore): `follow`'s state
/// attests a time only when it names the newest generation, the sequence and last observation
/// its segments show, and was caught up through the time; anything else attests nothing, and the
/// newest point covered is the end of a window at or before the time.
@Suite("follow: restore --at past a window's end, what follow's state attests")
struct FollowRestoreAttestTests {
    static let base = "20261130T020000.000000Z-h1.tar.zst"
    static let newer = "20261130T030000.000000Z-h1.tar.zst"

    static func segment(_ sequence: Int, _ first: Int64, _ last: Int64) -> FollowCatalogue.SegmentFile {
        let name = Segment.fileName(sequence: sequence, first: first, last: last)
        return FollowCatalogue.SegmentFile(
            object: "alice/follow/h1/" + base + "/" + name, path: name, name: name, sequence: sequence, first: first,
            last: last)
    }

    /// Segments 1 to 3, observations 1 s apart from 100 s, the window ending at 103 s.
    static let generation = FollowCatalogue.Generation(
        name: base, host: "h1",
        segments: [
            segment(1, 100_000_000, 101_000_000), segment(2, 101_500_000, 102_000_000),
            segment(3, 102_500_000, 103_000_000),
        ])

    static func entry(
        generation: String? = base, sequence: Int = 3, through: Int64? = 110_000_000, lastShipped: Int64? = 103_000_000,
        steadySince: Int64? = 99_000_000
    ) -> FollowStatus.User {
        var entry = FollowStatus.User()
        entry.generation = generation
        entry.sequence = sequence
        entry.shippedThrough = through
        entry.lastShipped = lastShipped
        entry.steadySince = steadySince
        return entry
    }

    @Test("a state naming the newest generation, its last sequence and observation, caught up through T, attests T")
    func attests() throws {
        let (generation, through) = try #require(
            FollowRestore.attested(105_000_000, generations: [Self.generation], entry: Self.entry()))
        #expect(generation.name == Self.base)
        #expect(through == 110_000_000)
        // Exactly at the moment it was caught up through, and at the window's end, too.
        #expect(FollowRestore.attested(110_000_000, generations: [Self.generation], entry: Self.entry()) != nil)
        #expect(FollowRestore.attested(103_000_000, generations: [Self.generation], entry: Self.entry()) != nil)
        // No lastShipped recorded: the sequence alone ties the state to the segments.
        #expect(
            FollowRestore.attested(105_000_000, generations: [Self.generation], entry: Self.entry(lastShipped: nil))
                != nil)
    }

    /// Each case: why, the state, the generations listed, the time asked for.
    static let unattested: [(String, FollowStatus.User?, [FollowCatalogue.Generation], Int64)] = [
        ("no state", nil as FollowStatus.User?, [FollowRestoreAttestTests.generation], Int64(105_000_000)),
        (
            "caught up only before T", FollowRestoreAttestTests.entry(through: 104_000_000),
            [FollowRestoreAttestTests.generation], 105_000_000
        ),
        (
            "never caught up", FollowRestoreAttestTests.entry(through: nil), [FollowRestoreAttestTests.generation],
            105_000_000
        ),
        (
            "another generation", FollowRestoreAttestTests.entry(generation: FollowRestoreAttestTests.newer),
            [FollowRestoreAttestTests.generation], 105_000_000
        ),
        (
            "no generation", FollowRestoreAttestTests.entry(generation: nil), [FollowRestoreAttestTests.generation],
            105_000_000
        ),
        (
            "an older sequence", FollowRestoreAttestTests.entry(sequence: 2), [FollowRestoreAttestTests.generation],
            105_000_000
        ),
        (
            "a sequence not listed", FollowRestoreAttestTests.entry(sequence: 4), [FollowRestoreAttestTests.generation],
            105_000_000
        ),
        (
            "another last observation", FollowRestoreAttestTests.entry(lastShipped: 102_000_000),
            [FollowRestoreAttestTests.generation], 105_000_000
        ),
        (
            "no unbroken stretch recorded (a state written before there was one)",
            FollowRestoreAttestTests.entry(steadySince: nil), [FollowRestoreAttestTests.generation], 105_000_000
        ),
        (
            "a stretch that began after the window's end (follow restarted, a round failed or paused meanwhile)",
            FollowRestoreAttestTests.entry(steadySince: 104_000_000), [FollowRestoreAttestTests.generation],
            105_000_000
        ),
        (
            "T before the window's end", FollowRestoreAttestTests.entry(), [FollowRestoreAttestTests.generation],
            102_800_000
        ),
        (
            "a hole in the sequence", FollowRestoreAttestTests.entry(),
            [
                FollowCatalogue.Generation(
                    name: FollowRestoreAttestTests.base, host: "h1",
                    segments: [
                        FollowRestoreAttestTests.generation.segments[0],
                        FollowRestoreAttestTests.generation.segments[2],
                    ])
            ],
            105_000_000
        ),
        (
            "a newer generation listed", FollowRestoreAttestTests.entry(),
            [
                FollowRestoreAttestTests.generation,
                FollowCatalogue.Generation(name: FollowRestoreAttestTests.newer, host: "h1", segments: []),
            ], 105_000_000
        ),
    ]

    @Test(
        "no state, a stale one, another generation's, a sequence or observation the segments do not show, a hole, a newer generation: nothing attested",
        arguments: FollowRestoreAttestTests.unattested)
    func attestsNothing(
        _ why: String, _ entry: FollowStatus.User?, _ generations: [FollowCatalogue.Generation], _ at: Int64
    ) {
        #expect(FollowRestore.attested(at, generations: generations, entry: entry) == nil, "\(why)")
    }

    @Test("the newest point covered at or before T is the end of a window piece, a gap's start included")
    func newestPoint() throws {
        #expect(FollowRestore.newestPoint(atOrBefore: 99_000_000, in: [Self.generation]) == nil)
        #expect(
            try #require(FollowRestore.newestPoint(atOrBefore: 200_000_000, in: [Self.generation])).1 == 103_000_000)
        // A resumed follower (segment 3 begins before segment 2 ends): the moments after its
        // first are a gap, so a time inside it restores to where the gap begins.
        let resumed = FollowCatalogue.Generation(
            name: Self.base, host: "h1",
            segments: [
                Self.segment(1, 100_000_000, 101_000_000), Self.segment(2, 101_500_000, 102_000_000),
                Self.segment(3, 101_800_000, 104_000_000),
            ])
        #expect(resumed.windows.count == 2)
        #expect(FollowCatalogue.covering(103_000_000, in: [resumed]) == nil)
        let point = try #require(FollowRestore.newestPoint(atOrBefore: 103_000_000, in: [resumed]))
        #expect(point.1 == 101_800_000)
        #expect(try #require(FollowRestore.newestPoint(atOrBefore: 105_000_000, in: [resumed])).1 == 104_000_000)
    }

    @Test(
        "the unbroken stretch starts at the first caught-up round and ends with a pause, a failure or a new generation")
    func steadySince() {
        var status = FollowStatus(host: "h1")
        func record(
            _ began: Int64, generation: String? = FollowRestoreAttestTests.base, caughtUp: Bool = true,
            paused: String? = nil
        ) {
            status.record(
                user: "alice", generation: generation, sequence: 1, lastShipped: nil, began: began, caughtUp: caughtUp,
                paused: paused)
        }
        record(10, caughtUp: false)
        #expect(status.users["alice"]?.steadySince == nil)
        record(20)
        record(30)
        #expect(status.users["alice"]?.steadySince == 20)
        record(35, caughtUp: false)
        #expect(status.users["alice"]?.steadySince == 20)
        record(40, paused: "following paused: a -wal that is a FIFO")
        #expect(status.users["alice"]?.steadySince == nil)
        record(50)
        #expect(status.users["alice"]?.steadySince == 50)
        record(60, generation: Self.newer)
        #expect(status.users["alice"]?.steadySince == nil)
        record(70, generation: Self.newer)
        #expect(status.users["alice"]?.steadySince == 70)
        record(80, generation: nil)
        #expect(status.users["alice"]?.steadySince == nil)
    }
}
