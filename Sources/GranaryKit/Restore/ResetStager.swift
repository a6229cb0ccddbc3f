import Foundation

/// Builds the "empty" stores of `granary reset`: a consistent copy of each live store (backup
/// API) with every row deleted and the schema kept. For Core Data stores `Z_METADATA` is kept
/// (the app must still recognise its store) and `Z_PRIMARYKEY.Z_MAX` is set back to 0; the
/// external-data files go (the staged store has no external folder).
enum ResetStager {
    static func stage(from source: Database, into path: String, busyTimeout: Duration) throws {
        try FileSystem.makeDirectory((path as NSString).deletingLastPathComponent)
        let copy = try Database(path: path, mode: .create)
        try OnlineRestore.copy(from: source, to: copy, busyTimeout: busyTimeout)
        try copy.execute("PRAGMA foreign_keys=OFF")
        try copy.execute("BEGIN")
        for table in try copy.tableNames() where table != "Z_METADATA" && table != "Z_PRIMARYKEY" {
            try copy.execute("DELETE FROM \"\(table.replacingOccurrences(of: "\"", with: "\"\""))\"")
        }
        if try copy.hasTable("Z_PRIMARYKEY") { try copy.execute("UPDATE Z_PRIMARYKEY SET Z_MAX = 0") }
        if try copy.hasTable("sqlite_sequence") { try copy.execute("DELETE FROM sqlite_sequence") }
        try copy.execute("COMMIT")
        // Freed pages would otherwise still hold the deleted rows' bytes.
        try copy.execute("VACUUM")
    }
}
