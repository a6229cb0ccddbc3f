import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a filesystem can still take, as an unprivileged writer sees it: the one place granary asks
/// (`statvfs`) before a backup snapshots, a repository takes an archive, or a restore stages one.
public struct FreeSpace: Sendable, Equatable {
    /// Free bytes (`f_bavail × f_frsize`, at most `Int64.max`: a huge or lying filesystem does not overflow).
    public let bytes: Int64
    /// Free inodes; nil on a filesystem without a fixed number of them (btrfs reports none).
    public let files: Int64?

    /// What is kept free beyond what a write needs (a file's metadata, the folder's entry).
    public static let spare: Int64 = 64 << 10

    /// The free space of the filesystem that holds `path`; nil when it cannot be asked.
    public static func of(_ path: String) -> FreeSpace? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return FreeSpace(
            bytes: product(UInt64(info.f_bavail), UInt64(info.f_frsize)),
            files: info.f_files > 0 ? Int64(clamping: UInt64(info.f_favail)) : nil)
    }

    /// `a × b`, at most `Int64.max`.
    static func product(_ a: UInt64, _ b: UInt64) -> Int64 {
        let (result, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? .max : Int64(clamping: result)
    }
}
