/// The member names a store gives rise to in an archive, and the clashes between two stores'.
///
/// A store `NAME` is packed as `stores/NAME`; `backup --delta` adds `stores/NAME.pages` (its page
/// hashes) and `stores/NAME.delta` (its changed pages); its Core Data external data goes under
/// `stores/FOLDER/.BASE_SUPPORT/_EXTERNAL_DATA/`, where BASE is the file name without its last
/// extension (``StoreFile/externalDataName(for:)``, Core Data's own naming). Nothing stops a
/// user's folder from holding stores whose members share a name: `Local.sqlite` and an app's
/// `Local.sqlite-backup` (or `Local.db`) share `.Local_SUPPORT/_EXTERNAL_DATA`, so every
/// attachment would be packed twice under one name; a store named `Local.sqlite.pages` is
/// `Local.sqlite`'s page-hash member. An archive with a member twice is refused by `verify` and
/// `restore` (``ArchiveVerifier``): it must never be written, and a backup that would write one
/// refuses that user (``BackupError/memberClash(user:member:first:second:)``) before anything
/// is copied.
public enum MemberNames {
    /// Two stores whose members share `member`.
    public struct Clash: Sendable, Equatable, CustomStringConvertible {
        public let member: String
        public let first: String
        public let second: String

        public var description: String { "stores \(first) and \(second) would both be packed as \(member)" }
    }

    /// What the store `name` is packed as: its own members (`files`) and the folder its external
    /// data goes under (`folder`, when it has any).
    static func members(ofStore name: String, externalData: Bool) -> (files: [String], folder: String?) {
        let own = Manifest.storesFolder + name
        return (
            [own, own + ".pages", own + ".delta"],
            externalData ? Manifest.storesFolder + StoreFile.externalDataName(for: name) : nil
        )
    }

    /// The first clash among `stores` (each a store's name in its folder and whether it has an
    /// external-data folder), or nil when every member name is its store's alone: no two stores
    /// share a member, and no store's member lies inside another's external-data folder.
    public static func clash(among stores: [(name: String, externalData: Bool)]) -> Clash? {
        var files: [String: String] = [:]
        var folders: [String: String] = [:]
        for store in stores {
            let (own, folder) = members(ofStore: store.name, externalData: store.externalData)
            for member in own {
                if let other = files[member], other != store.name {
                    return Clash(member: member, first: other, second: store.name)
                }
                files[member] = store.name
            }
            if let folder {
                if let other = folders[folder], other != store.name {
                    return Clash(member: folder + "/", first: other, second: store.name)
                }
                folders[folder] = store.name
            }
        }
        // A member inside another store's external-data folder (or a member where a folder is).
        for (folder, owner) in folders {
            for (member, store) in files where member == folder || member.hasPrefix(folder + "/") {
                return Clash(member: member, first: owner, second: store)
            }
        }
        return nil
    }

    /// The stores of `manifest` whose members would share `member` (a name found twice in an
    /// archive), for the message of `verify` and `restore`; nil when no two stores explain it.
    public static func explain(_ member: String, in manifest: Manifest) -> Clash? {
        let stores = manifest.stores.map { (name: $0.name, externalData: $0.externalDataPath != nil) }
        var owners: [String] = []
        for store in stores {
            let (own, folder) = members(ofStore: store.name, externalData: store.externalData)
            if own.contains(member) || folder.map({ member == $0 || member.hasPrefix($0 + "/") }) == true {
                owners.append(store.name)
            }
        }
        guard owners.count >= 2 else { return nil }
        return Clash(member: member, first: owners[0], second: owners[1])
    }

    /// The first member name that is in `paths` twice, or nil.
    public static func duplicate(in paths: [String]) -> String? {
        var seen: Set<String> = []
        for path in paths where !seen.insert(path).inserted { return path }
        return nil
    }
}
