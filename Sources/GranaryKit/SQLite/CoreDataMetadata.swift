import Foundation

/// Reads the Core Data metadata of a store: `Z_METADATA` (store UUID and the binary
/// property list whose `NSStoreModelVersionHashes` names the model the store was written
/// with) and `Z_PRIMARYKEY` (one row per entity).
///
/// A store without both tables is not a Core Data store and gives `nil`.
///
/// Entity row counts take one pass over each entity table: an entity's rows live in the table
/// of its root entity (`Z` and the root's name upper-cased; `Z_PRIMARYKEY.Z_SUPER` names each
/// entity's parent), told apart by `Z_ENT`, so each table is counted once with
/// `GROUP BY Z_ENT`, whatever the number of entities (a count per entity would scan the table
/// once per entity: minutes for 20,000 entities of 20,000 rows). The table names are read once.
public enum CoreDataMetadata {
    public static func read(_ db: Database) throws(SQLiteError) -> Manifest.CoreData? {
        let tables = Dictionary(
            try db.rows("SELECT name FROM sqlite_schema WHERE type = 'table'").compactMap { $0[0].text }.map {
                ($0.uppercased(), $0)
            },
            uniquingKeysWith: { first, _ in first })
        guard tables["Z_METADATA"] != nil, tables["Z_PRIMARYKEY"] != nil else { return nil }
        var uuid: String?
        var hashes: [String: String] = [:]
        if let row = try db.rows("SELECT Z_UUID, Z_PLIST FROM Z_METADATA ORDER BY Z_VERSION DESC LIMIT 1").first {
            uuid = row[0].text
            if let plist = row[1].blob { hashes = modelVersionHashes(fromPlist: plist) }
        }
        let hasSuper = try db.rows("SELECT name FROM pragma_table_info('Z_PRIMARYKEY')").contains {
            $0[0].text?.uppercased() == "Z_SUPER"
        }
        var names: [Int64: String] = [:]
        var parents: [Int64: Int64] = [:]
        for row in try db.rows("SELECT Z_ENT, Z_NAME\(hasSuper ? ", Z_SUPER" : "") FROM Z_PRIMARYKEY") {
            guard let ent = row[0].integer, let name = row[1].text else { continue }
            names[ent] = name
            if hasSuper, let parent = row[2].integer, parent != 0, parent != ent { parents[ent] = parent }
        }
        // Each entity's root, remembered on the way (a chain of N entities costs N steps, not N²;
        // a cycle, which Core Data never writes, ends the walk).
        var roots: [Int64: Int64] = [:]
        func root(of ent: Int64) -> Int64 {
            var path: [Int64] = []
            var seen: Set<Int64> = []
            var current = ent
            while roots[current] == nil, let parent = parents[current], names[parent] != nil,
                seen.insert(current).inserted
            {
                path.append(current)
                current = parent
            }
            let found = roots[current] ?? current
            for step in path { roots[step] = found }
            roots[ent] = found
            return found
        }
        var byTable: [String: [Int64]] = [:]
        for ent in names.keys { byTable["Z" + names[root(of: ent)]!.uppercased(), default: []].append(ent) }
        var counts: [String: Int64] = [:]
        for name in names.values { counts[name] = 0 }
        for (table, entities) in byTable.sorted(by: { $0.key < $1.key }) {
            guard let actual = tables[table] else { continue }
            let quoted = "\"" + actual.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            let known = Set(entities)
            let rows: [Row]
            do { rows = try db.rows("SELECT Z_ENT, count(*) FROM \(quoted) GROUP BY Z_ENT") } catch {
                // A table of that name without Z_ENT is not an entity table: its entities have no rows.
                if error.limit != nil || error.kind != .other { throw error }
                continue
            }
            for row in rows {
                guard let ent = row[0].integer, known.contains(ent), let name = names[ent], let count = row[1].integer
                else { continue }
                counts[name] = count
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
    ///
    /// Written with `PropertyListEncoder`: `PropertyListSerialization` cannot write an array
    /// (`NSStoreModelVersionIdentifiers`) in a binary linked with Swift's static standard library
    /// ("property lists cannot contain objects of type 'Not A Type'"), as the release binaries are.
    public static func makePlist(storeUUID: String, modelVersionHashes: [String: Data]) -> [UInt8] {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        // Encoding strings, numbers and data cannot fail.
        let data = try! encoder.encode(CoreDataPlist(storeUUID: storeUUID, modelVersionHashes: modelVersionHashes))
        return Array(data)
    }
}

/// The metadata dictionary Core Data keeps in `Z_METADATA.Z_PLIST`, as `makePlist` writes it.
private struct CoreDataPlist: Encodable {
    var storeUUID: String
    var modelVersionHashes: [String: Data]

    enum CodingKeys: String, CodingKey {
        case modelVersionHashes = "NSStoreModelVersionHashes"
        case hashesVersion = "NSStoreModelVersionHashesVersion"
        case identifiers = "NSStoreModelVersionIdentifiers"
        case storeType = "NSStoreType"
        case storeUUID = "NSStoreUUID"
        case frameworkVersion = "NSPersistenceFrameworkVersion"
        case autoVacuumLevel = "_NSAutoVacuumLevel"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(modelVersionHashes, forKey: .modelVersionHashes)
        try container.encode(3, forKey: .hashesVersion)
        try container.encode([""], forKey: .identifiers)
        try container.encode("SQLite", forKey: .storeType)
        try container.encode(storeUUID, forKey: .storeUUID)
        try container.encode(1141, forKey: .frameworkVersion)
        try container.encode("2", forKey: .autoVacuumLevel)
    }
}
