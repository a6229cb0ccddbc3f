import Foundation

/// Builds the "empty" stores of `granary reset`: for each live store, a new database with its
/// schema and the rows of the tables that hold schema state only (`EmptyStore`: Core Data's
/// `Z_METADATA` and `Z_PRIMARYKEY`, with `Z_MAX` set back to 0, migration tables, `[reset]
/// keep_tables`). The external-data files go (the staged store has no external folder).
///
/// The caller opens the live store (read-only, beneath its folder); `EmptyStore` reads it in one
/// read transaction.
enum ResetStager {
    /// `keep`: the tables kept with their rows (``EmptyStore/keptTables(besides:)``).
    static func stage(from source: Database, into path: String, keep: [String]) throws {
        try FileSystem.makeDirectory(PathText.parent(path))
        try EmptyStore.build(from: source, into: path, keep: keep)
    }
}

/// What a dry run of a reset shows: per store of a user, what a reset empties and keeps.
public enum ResetPlan {
    /// One store's plan.
    public struct Store: Sendable {
        public var name: String
        public var plan: EmptyStore.Plan
    }

    /// The plans of every store of `user` under `root`. Reads each store read-only, beneath its
    /// folder (one snapshot each), under the run's content limits, keeping the run's configured
    /// tables (``RunContext/resetKeepTables``); changes nothing.
    public static func stores(
        of user: UserID, in root: Root, busyTimeout: Duration = .seconds(10), context: RunContext = .defaults
    ) throws -> [Store] {
        try root.user(user).stores().map { store in
            let source = try Database(
                try store.sqliteName(), mode: .readOnly, busyTimeout: busyTimeout, limits: context.limits)
            return Store(
                name: store.name,
                plan: try EmptyStore.plan(of: source, keep: EmptyStore.keptTables(besides: context.resetKeepTables)))
        }
    }
}
