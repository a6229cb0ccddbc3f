import GranaryKit
import Testing

@Suite("member names unique by construction")
struct MemberNamesTests {
    @Test(
        "stores whose names differ only after the first dot share an attachments folder when they have one",
        arguments: ["Local.sqlite-backup", "Local.db", "Local"])
    func sharedSupportFolder(second: String) {
        let clash = MemberNames.clash(among: [("Local.sqlite", true), (second, true)])
        #expect(clash?.member == "stores/.Local_SUPPORT/_EXTERNAL_DATA/")
        #expect(clash?.first == "Local.sqlite" && clash?.second == second)
        // Without an attachments folder nothing is packed twice.
        #expect(MemberNames.clash(among: [("Local.sqlite", false), (second, false)]) == nil)
    }

    @Test("a store named as another's page hashes or changes clashes with it", arguments: [".pages", ".delta"])
    func hashMember(suffix: String) {
        let clash = MemberNames.clash(among: [("Local.sqlite", false), ("Local.sqlite" + suffix, false)])
        #expect(clash?.member == "stores/Local.sqlite" + suffix)
    }

    @Test("stores in different folders, or with different base names, do not clash")
    func noClash() {
        #expect(
            MemberNames.clash(among: [
                ("Local.sqlite", true), ("Data/Local.sqlite", true), ("Notes.sqlite", true), ("Local2.sqlite", true),
            ]) == nil)
    }

    @Test("a member found twice in an archive is explained by the stores that share it")
    func explain() {
        var manifest = Manifest(
            user: "alice", host: "h", created: .init(timeIntervalSince1970: 0), label: nil, compression: .zstd,
            stores: [], files: [])
        for name in ["Local.sqlite", "Local.db"] {
            manifest.stores.append(
                Manifest.Store(
                    name: name, path: "stores/" + name, pageSize: 4096, pageCount: 1, journalMode: "wal",
                    sqliteVersion: "3", check: "full", integrity: "ok",
                    externalDataPath: "stores/.Local_SUPPORT/_EXTERNAL_DATA"))
        }
        let clash = MemberNames.explain("stores/.Local_SUPPORT/_EXTERNAL_DATA/photo-1", in: manifest)
        #expect(clash?.first == "Local.sqlite" && clash?.second == "Local.db")
        #expect(MemberNames.explain("stores/Other.sqlite", in: manifest) == nil)
    }
}
