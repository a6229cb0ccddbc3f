import ArgumentParser
import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

// granary-reopen-check: the reopen protocol's conformance checker. It connects to whatever
// process serves the given stores and tries the rules of man 7 granary-reopen one by one.

struct ReopenCheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary-reopen-check",
        abstract: "Check that the owner serving a store follows the reopen protocol (man 7 granary-reopen).",
        discussion: """
            It connects to the owner of each STORE the way granary does and tries the protocol's \
            rules: one line per check, pass, FAIL or skip, and exit status 1 when any check fails. \
            The owner is paused several times (for milliseconds, for a second or two, and once for 13 s) and left \
            running. Run it as the store's owner or root (as root it also checks that other users \
            are refused), while no restore of the store runs. It takes about 40 s, most of it \
            waiting for the owner's idle timeout.
            """)

    @Option(help: ArgumentHelp("Run only this check (repeatable); see --list.", valueName: "name"))
    var check: [String] = []

    @Option(help: ArgumentHelp("Seconds an answer may take.", valueName: "seconds"))
    var timeout: Double = 5

    @Flag(help: "List the checks and exit.")
    var list = false

    @Argument(
        help: ArgumentHelp(
            "The store's database file; give several stores of one owner to check that they are served independently.",
            valueName: "store"))
    var stores: [String] = []

    func validate() throws {
        if list { return }
        if stores.isEmpty { throw ValidationError("give the store whose owner to check") }
        if !(timeout > 0 && timeout <= 600) { throw ValidationError("--timeout must be from 0 to 600 seconds") }
        let names = Set(Conformance.all.map(\.name))
        for name in check where !names.contains(name) {
            throw ValidationError("no check named \(name); see --list")
        }
    }

    func run() throws {
        if list {
            for check in Conformance.all { print(pad(check.name) + check.summary) }
            return
        }
        var addresses: [ReopenAddress] = []
        for store in stores {
            do {
                addresses.append(try ReopenAddress(store: store))
            } catch {
                FileHandle.standardError.write(
                    Data("granary-reopen-check: \(error)\nTry: give the path of an existing store\n".utf8))
                throw ExitCode(66)
            }
        }
        var info = stat()
        guard stat(addresses[0].canonicalPath, &info) == 0 else { throw ExitCode(66) }
        let conformance = Conformance(stores: addresses, storeUID: info.st_uid, timeout: .seconds(timeout))
        let chosen = check.isEmpty ? Conformance.all : Conformance.all.filter { check.contains($0.name) }
        var failed = 0
        var skipped = 0
        for check in chosen {
            let line: String
            do {
                line = "pass  " + pad(check.name) + (try check.run(conformance))
            } catch let failure as CheckFailure {
                failed += 1
                line = "FAIL  " + pad(check.name) + failure.detail
            } catch let skip as CheckSkipped {
                skipped += 1
                line = "skip  " + pad(check.name) + skip.reason
            }
            // One write per line, so that a reader of a pipe sees each check as it ends.
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
        FileHandle.standardOutput.write(
            Data(
                "\(chosen.count) checks: \(chosen.count - failed - skipped) passed, \(failed) failed, \(skipped) skipped\n"
                    .utf8))
        if failed > 0 { throw ExitCode(1) }
    }

    private func pad(_ name: String) -> String {
        name.padding(toLength: max(18, name.count + 1), withPad: " ", startingAt: 0)
    }
}

ReopenCheckCommand.main()
