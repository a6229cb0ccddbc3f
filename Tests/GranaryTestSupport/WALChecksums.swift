import Foundation

/// A `-wal` file's checksums, for tests that forge frames (a commit claiming another page count,
/// a page changed) and need SQLite's chain of checksums to stay valid over them.
public enum WALChecksums {
    /// Recomputes every checksum of a `-wal` held in `data` (native little-endian magic or not).
    public static func rechecksum(_ data: inout [UInt8], pageSize: Int) {
        func get(_ at: Int) -> UInt32 {
            UInt32(data[at]) << 24 | UInt32(data[at + 1]) << 16 | UInt32(data[at + 2]) << 8 | UInt32(data[at + 3])
        }
        func put(_ value: UInt32, _ at: Int) {
            data[at] = UInt8(value >> 24)
            data[at + 1] = UInt8(truncatingIfNeeded: value >> 16)
            data[at + 2] = UInt8(truncatingIfNeeded: value >> 8)
            data[at + 3] = UInt8(truncatingIfNeeded: value)
        }
        let big = get(0) & 1 == 1
        func word(_ at: Int) -> UInt32 {
            big
                ? get(at)
                : UInt32(data[at]) | UInt32(data[at + 1]) << 8 | UInt32(data[at + 2]) << 16 | UInt32(data[at + 3]) << 24
        }
        var s1: UInt32 = 0
        var s2: UInt32 = 0
        func sum(_ from: Int, _ to: Int) {
            var i = from
            while i < to {
                s1 = s1 &+ word(i) &+ s2
                s2 = s2 &+ word(i + 4) &+ s1
                i += 8
            }
        }
        sum(0, 24)
        put(s1, 24)
        put(s2, 28)
        var at = 32
        while at + 24 + pageSize <= data.count {
            sum(at, at + 8)
            sum(at + 24, at + 24 + pageSize)
            put(s1, at + 16)
            put(s2, at + 20)
            at += 24 + pageSize
        }
    }
}
