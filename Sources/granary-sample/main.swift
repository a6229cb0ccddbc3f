import ArgumentParser
import Foundation
import GranaryKit

/// granary-sample: sample data for `make demo`, the tests and `make bench`.
struct GranarySample: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary-sample",
        abstract: "Write granary's sample data: users with WAL, rollback and Core Data stores, a writer, a big store.",
        subcommands: [Make.self, Write.self, Big.self],
        defaultSubcommand: Make.self
    )

    /// `granary-sample [make] DIR [ROWS]`: the built-in sample root.
    struct Make: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "make",
            abstract: "Write the sample root (four users) into DIR, which must be empty or missing.")

        @Argument(help: ArgumentHelp("The folder to write the sample root into.", valueName: "dir"))
        var directory: String

        @Argument(help: ArgumentHelp("Rows per sample table, 1-1000000.", valueName: "rows"))
        var rows: Int = 200

        func validate() throws {
            guard (1...1_000_000).contains(rows) else { throw ValidationError("rows must be 1 to 1000000") }
        }

        func run() throws {
            if FileManager.default.fileExists(atPath: directory),
                !((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).isEmpty
            {
                SampleWriter.fail("\(directory) is not empty; remove it first", 73)
            }
            do {
                try SampleData.generate(in: directory, rows: rows)
            } catch {
                SampleWriter.fail("\(error)", 74)
            }
        }
    }

    /// `granary-sample write STORE [--interval-ms N]`.
    struct Write: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "write",
            abstract:
                "Commit rows with sequential ids into STORE until killed, printing ID, latency (µs) and time per commit."
        )

        @Argument(help: ArgumentHelp("The store to write (created as a WAL store when missing).", valueName: "store"))
        var store: String

        @Option(help: ArgumentHelp("Milliseconds between commits, 0-60000.", valueName: "n"))
        var intervalMs: Int = 1

        func validate() throws {
            guard (0...60_000).contains(intervalMs) else { throw ValidationError("--interval-ms must be 0 to 60000") }
        }

        func run() throws { SampleWriter.writeRows(path: store, interval: intervalMs) }
    }

    /// `granary-sample big PATH SIZE_MB`.
    struct Big: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "big", abstract: "Write a WAL store of about SIZE_MB MiB (for make bench).")

        @Argument(help: ArgumentHelp("The store to write.", valueName: "path"))
        var path: String

        @Argument(help: ArgumentHelp("Its size in MiB, 1-1000000.", valueName: "size-mb"))
        var megabytes: Int

        func validate() throws {
            guard (1...1_000_000).contains(megabytes) else { throw ValidationError("SIZE_MB must be 1 to 1000000") }
        }

        func run() throws { SampleWriter.big(path: path, megabytes: megabytes) }
    }
}

Interruption.unblockSignals()
// GranaryKit's process-wide installs in SQLite, before anything opens a database.
ProcessSetup.install()
GranarySample.main()
