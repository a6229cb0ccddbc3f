/// An error of granary's core: `description` is one line naming what failed and the thing
/// concerned (a user, a path, an archive). The errors carry typed values, never advice about a
/// command line: the program that uses the core decides what a failure means to its user (the
/// `granary` command gives each its exit status and a hint, in GranaryCLI).
public protocol GranaryError: Error, CustomStringConvertible {}

extension SQLiteError: GranaryError {}
