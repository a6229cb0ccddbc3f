import Foundation

/// Reads the Core Data metadata of a store: `Z_METADATA` (store UUID and the binary
/// property list whose `NSStoreModelVersionHashes` names the model the store was written
/// with) and `Z_PRIMARYKEY` (one row per entity).
///
/// A store without both tables is not a Core Data store and gives `nil`.
public enum CoreDataMetadata {
    public static func read(_ db: Database) throws(SQLiteError) -> Manifest.CoreData? {
        guard try db.hasTable("Z_METADATA"), try db.hasTable("Z_PRIMARYKEY") else { return nil }
        var uuid: String?
        var hashes: [String: String] = [:]
        if let row = try db.rows("SELECT Z_UUID, Z_PLIST FROM Z_METADATA ORDER BY Z_VERSION DESC LIMIT 1").first {
            uuid = row[0].text
            if let plist = row[1].blob { hashes = modelVersionHashes(fromPlist: plist) }
        }
        var counts: [String: Int64] = [:]
        for row in try db.rows("SELECT Z_ENT, Z_NAME FROM Z_PRIMARYKEY ORDER BY Z_ENT") {
            guard let ent = row[0].integer, let name = row[1].text else { continue }
            // Entities live in table Z<NAME>; sub-entities share their root's table, told apart by Z_ENT.
            let table = "Z" + name.uppercased()
            if try db.hasTable(table) {
                let quoted = "\"" + table.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                counts[name] = try db.scalar("SELECT count(*) FROM \(quoted) WHERE Z_ENT = ?", [.integer(ent)])?.integer ?? 0
            } else {
                counts[name] = 0
            }
        }
        return Manifest.CoreData(storeUUID: uuid, modelVersionHashes: hashes, entityRowCounts: counts)
    }

    /// `NSStoreModelVersionHashes` from a `Z_PLIST` blob: entity → base64 of the hash.
    public static func modelVersionHashes(fromPlist bytes: [UInt8]) -> [String: String] {
        guard
            let object = try? PropertyListSerialization.propertyList(from: Data(bytes), options: [], format: nil),
            let dictionary = object as? [String: Any],
            let hashes = dictionary["NSStoreModelVersionHashes"] as? [String: Any]
        else { return [:] }
        var result: [String: String] = [:]
        for (entity, value) in hashes {
            if let data = value as? Data { result[entity] = data.base64EncodedString() }
        }
        return result
    }

    /// A `Z_PLIST` blob (binary property list) as Core Data writes it.
    public static func makePlist(storeUUID: String, modelVersionHashes: [String: Data]) -> [UInt8] {
        let dictionary: [String: Any] = [
            "NSStoreModelVersionHashes": modelVersionHashes,
            "NSStoreModelVersionHashesVersion": 3,
            "NSStoreModelVersionIdentifiers": [""],
            "NSStoreType": "SQLite",
            "NSStoreUUID": storeUUID,
            "NSPersistenceFrameworkVersion": 1141,
            "_NSAutoVacuumLevel": "2",
        ]
        let data = try! PropertyListSerialization.data(fromPropertyList: dictionary, format: .binary, options: 0)
        return Array(data)
    }
}
