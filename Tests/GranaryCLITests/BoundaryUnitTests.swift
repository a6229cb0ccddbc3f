import Foundation
import Testing

@testable import GranaryCLI
@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// The pieces of issue 31's third round that need no second user: the environment root's rclone
/// is given, how hints are marked and quoted, what a refused `load_extension` exits with.
@Suite("the trust boundary's pieces: rclone's environment, hints, exit codes")
struct BoundaryUnitTests {
    @Test("as root under sudo, nothing inherited reaches rclone; as root's own, only the allow-list; RCLONE_RC* never")
    func rcloneEnvironment() throws {
        let inherited = [
            "AWS_ACCESS_KEY_ID": "AKIAUSER", "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "RCLONE_RC": "true",
            "RCLONE_RC_NO_AUTH": "true", "RCLONE_CONFIG_OFFSITE_TYPE": "alias", "RCLONE_PASSWORD_COMMAND": "id",
            "RCLONE_TIMEOUT": "5s", "LD_PRELOAD": "/tmp/x.so", "PATH": "/home/user/bin", "HOME": "/home/user",
        ]
        let sudo = try RemoteEnvironment.build(
            from: inherited.merging(["SUDO_USER": "user", "SUDO_UID": "1000"]) { $1 }, euid: 0, uid: 0, file: nil)
        #expect(sudo.environment.keys.filter { $0.hasPrefix("AWS_") || $0.hasPrefix("RCLONE_") }.isEmpty)
        #expect(sudo.environment["PATH"] == Rclone.systemFolders.joined(separator: ":"))
        #expect(sudo.environment["HOME"] != "/home/user")
        #expect(sudo.ignored.contains("RCLONE_CONFIG_OFFSITE_TYPE") && sudo.ignored.contains("AWS_ENDPOINT_URL"))
        // A real uid that is not root's is not root's own environment either (a setuid wrapper).
        let setuid = try RemoteEnvironment.build(from: inherited, euid: 0, uid: 1000, file: nil)
        #expect(setuid.environment["AWS_ACCESS_KEY_ID"] == nil)
        let own = try RemoteEnvironment.build(from: inherited, euid: 0, uid: 0, file: nil)
        #expect(own.environment["AWS_ACCESS_KEY_ID"] == "AKIAUSER")
        #expect(own.environment["RCLONE_CONFIG_OFFSITE_TYPE"] == "alias")
        #expect(own.environment["RCLONE_TIMEOUT"] == "5s")
        for name in ["RCLONE_RC", "RCLONE_RC_NO_AUTH", "RCLONE_PASSWORD_COMMAND", "LD_PRELOAD"] {
            #expect(own.environment[name] == nil, "\(name) reached root's rclone")
        }
        // Not root: the user's own environment, less the remote control.
        let user = try RemoteEnvironment.build(from: inherited, euid: 1000, uid: 1000, file: nil)
        #expect(user.environment["RCLONE_RC"] == nil && user.environment["LD_PRELOAD"] == "/tmp/x.so")
    }

    @Test("every rclone granary starts runs with TCELL_MINIMIZE=1 (no start-up width table), unless it is set")
    func rcloneStartsLight() throws {
        // /usr/bin/env stands in for rclone's executable: it prints the environment it was given.
        let plain = try Rclone(executable: "/usr/bin/env", environment: ["PATH": "/usr/bin:/bin"]).run([])
        let lines = String(decoding: plain.standardOutput, as: UTF8.self).split(separator: "\n")
        #expect(plain.status == 0 && lines.contains("TCELL_MINIMIZE=1"), "\(lines)")
        let own = try Rclone(executable: "/usr/bin/env", environment: ["TCELL_MINIMIZE": ""]).run([])
        let ownLines = String(decoding: own.standardOutput, as: UTF8.self).split(separator: "\n")
        #expect(ownLines.contains("TCELL_MINIMIZE=") && !ownLines.contains("TCELL_MINIMIZE=1"), "\(ownLines)")
    }

    @Test("a command hint quotes every word and is printed Try:; prose is printed Hint:")
    func hintMarks() {
        let hostile = "/srv/$(touch PWNED)'x\n.sqlite"
        let hint = Hint.command("sqlite3", "-readonly", hostile, ".schema")
        let failure = Failure(code: .dataError, message: "m", hint: hint)
        #expect(failure.hintIsCommand)
        #expect(failure.hint == "sqlite3 -readonly $'/srv/$(touch PWNED)\\'x\\x0a.sqlite' .schema")
        let prose = Failure(code: .dataError, message: "m", hint: "look at it")
        #expect(!prose.hintIsCommand && prose.hint == "look at it")
        let encoded = String(decoding: try! JSONEncoder().encode(failure), as: UTF8.self)
        #expect(!encoded.contains("\\u0001") && !encoded.contains("hintIsCommand"), "\(encoded)")
    }

    @Test("SQLite's 'not authorized' (load_extension in a store's schema) exits 65, not 74")
    func notAuthorized() {
        let error = SQLiteError(code: 1, message: "not authorized", path: "/srv/u/Ext.sqlite")
        #expect(error.status == .dataError)
        #expect(SQLiteError(code: 23, message: "authorization denied").status == .dataError)
        #expect(SQLiteError(code: 1, message: "something else").status == .ioError)
    }
}
