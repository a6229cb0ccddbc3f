import Foundation

/// Where a restore of one user works: `<root>/.granary/restore/<user>/` holds `staged/` (the
/// verified new content, `stores/<name>` as in the archive), `aside/` (the replaced content, kept
/// for the safety archive, same layout) and the journal. It is granary's own folder, on the users'
/// filesystem, so that a rename between it and a user's folder is atomic.
public struct RestoreWork: Sendable {
    public let path: String

    public var staged: String { path + "/staged" }
    public var aside: String { path + "/aside" }
    public var journal: SwapJournal { SwapJournal(path: path + "/journal") }
    /// `<root>/.granary/kept/<user>/`: files granary moved out of the user's folder that may hold
    /// someone's writes (a `-wal` that appeared beside a new store while its owner was paused).
    /// Outside the work folder, which is deleted once the restore is done: nothing deletes it.
    public var kept: String {
        let state = ((path as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent
        return state + "/kept/" + (path as NSString).lastPathComponent
    }

    /// The staged database of a store.
    public func stagedStore(_ name: String) -> String { staged + "/" + Manifest.storesFolder + name }
    /// The kept-aside database of a store.
    public func asideStore(_ name: String) -> String { aside + "/" + Manifest.storesFolder + name }
    /// The staged and kept-aside external-data folders of a store.
    public func stagedExternal(_ name: String) -> String {
        staged + "/" + Manifest.storesFolder + StoreFile.externalDataName(for: name)
    }
    public func asideExternal(_ name: String) -> String {
        aside + "/" + Manifest.storesFolder + StoreFile.externalDataName(for: name)
    }

    /// Opens the folder holding `path` (in granary's work folder; made when missing with
    /// `create`) and gives its last component.
    static func parent(of path: String, create: Bool = false) throws -> (Folder<GranaryOwned>, String) {
        let folder = (path as NSString).deletingLastPathComponent
        if create { try FileSystem.makeDirectory(folder) }
        return (try Folder<GranaryOwned>.open(path: folder), (path as NSString).lastPathComponent)
    }
}
