import GranaryCLI
import GranaryKit

// GranaryKit's process-wide installs in SQLite (its allocator, its unix VFS's system calls),
// made here, before anything opens a database.
ProcessSetup.install()
GranaryMain.main()
