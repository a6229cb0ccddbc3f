import CBeneath
import CSQLiteLimits

/// The two process-wide changes GranaryKit needs in SQLite, made by the program, never behind
/// its back: a program that embeds GranaryKit calls ``install()`` once at start, before anything
/// opens a database (the `granary` executable, `granary-sample`, `granary-demo-owner`, the fuzz
/// target and the test binaries do).
///
/// 1. SQLite's allocator is wrapped so that each connection's memory ceiling
///    (``ContentLimits``) is charged to that connection alone. `sqlite3_config` takes it only
///    before SQLite is initialised, hence at start.
/// 2. The unix VFS's path-based system calls (open, stat, unlink…) are replaced by ones that
///    resolve the names ``Folder/sqliteName(_:)`` gives beneath the folder's descriptor, and
///    pass every other name to the real call. Databases opened by ordinary paths are unaffected.
public enum ProcessSetup {
    /// What ``install()`` found.
    public struct Outcome: Sendable, Equatable {
        /// Memory ceilings are enforced (false: SQLite was initialised before the install).
        public var memoryCeilings: Bool
        /// SQLite opens files beneath folders' descriptors (false: its VFS cannot take it).
        public var beneath: Bool

        public init(memoryCeilings: Bool, beneath: Bool) {
            self.memoryCeilings = memoryCeilings
            self.beneath = beneath
        }
    }

    /// Installs both, in the order they need (the allocator before anything initialises SQLite).
    /// Once per process; later calls return the first one's outcome.
    @discardableResult
    public static func install() -> Outcome {
        let memory = granary_limits_install() != 0
        let beneath = granary_beneath_install() == 0
        return Outcome(memoryCeilings: memory, beneath: beneath)
    }
}
