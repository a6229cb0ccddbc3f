import Foundation
import GranaryKit
import Testing

@Suite("granary config and the configuration file")
struct ConfigCommandTests {
    /// Runs `granary config --json` with an isolated XDG_CONFIG_HOME and returns key -> (value, source).
    func effective(_ arguments: [String], _ environment: [String: String], folder: TemporaryFolder) throws
        -> [String: (value: Any?, source: String)]
    {
        var env = ["XDG_CONFIG_HOME": folder.child("xdg")]
        env.merge(environment) { $1 }
        let result = try GranaryProcess.run(["config", "--json"] + arguments, environment: env)
        #expect(result.status == 0, "\(result.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        #expect(document["format"] as? Int == 1)
        var map: [String: (value: Any?, source: String)] = [:]
        for entry in document["settings"] as! [[String: Any]] {
            let value = entry["value"]
            map[entry["key"] as! String] = (value is NSNull ? nil : value, entry["source"] as! String)
        }
        return map
    }

    func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test("a flag beats the environment, which beats the file, which beats the default")
    func precedence() throws {
        let folder = TemporaryFolder()
        let file = folder.child("xdg/granary/config.toml")
        try write("root = \"/from/file\"\nrepo = \"/repo/file\"\ncompression = \"xz\"\n", to: file)
        var map = try effective([], [:], folder: folder)
        #expect(map["root"]?.value as? String == "/from/file" && map["root"]?.source == "file")
        #expect(map["compression"]?.value as? String == "xz" && map["compression"]?.source == "file")
        #expect(map["check"]?.value as? String == "quick" && map["check"]?.source == "default")
        #expect(map["level"]?.value == nil && map["level"]?.source == "default")
        map = try effective([], ["GRANARY_ROOT": "/from/env"], folder: folder)
        #expect(map["root"]?.value as? String == "/from/env" && map["root"]?.source == "environment")
        #expect(map["repo"]?.source == "file")
        map = try effective(["--root", "/from/flag"], ["GRANARY_ROOT": "/from/env"], folder: folder)
        #expect(map["root"]?.value as? String == "/from/flag" && map["root"]?.source == "flag")
    }

    @Test(
        "--config names the file and every key of it is read, retention included: numbers as numbers, durations as written, each key's own source"
    )
    func explicitFile() throws {
        let folder = TemporaryFolder()
        let file = folder.child("my.toml")
        try write(
            """
            root = "/r"
            level = 9
            check = "full"
            lock_timeout = "2min"
            owner_timeout = 5
            jobs = 4
            [retention]
            keep_daily = 7
            keep_within = "30d"
            [limits]
            time = "1min"
            memory = "1GiB"
            bytes_per_user = "20GiB"
            [reset]
            keep_tables = ["app_settings", "flags"]
            """, to: file)
        let map = try effective(["--config", file], [:], folder: folder)
        #expect(map["level"]?.value as? Int == 9)
        #expect(map["check"]?.value as? String == "full")
        #expect(map["lock_timeout"]?.value as? String == "2min")
        #expect(map["owner_timeout"]?.value as? String == "5s")
        #expect(map["jobs"]?.value as? Int == 4 && map["jobs"]?.source == "file")
        #expect(map["retention.keep_daily"]?.value as? Int == 7 && map["retention.keep_daily"]?.source == "file")
        #expect(map["retention.keep_within"]?.value as? String == "30d")
        #expect(
            map["retention.keep_last"]?.value as? Int == 0 && map["retention.keep_last"]?.source == "default",
            "a key the file does not set is not from the file")
        #expect(map["limits.time"]?.value as? String == "1min" && map["limits.time"]?.source == "file")
        #expect(map["limits.time_per_gib"]?.value as? String == "2min", "the table's other keys keep their defaults")
        #expect(map["limits.memory"]?.value as? String == "1GiB")
        #expect(
            map["limits.bytes_per_user"]?.value as? String == "20GiB" && map["limits.bytes_per_user"]?.source == "file")
        #expect(map["reset.keep_tables"]?.value as? [String] == ["app_settings", "flags"])
    }

    @Test(
        "a bad configuration file is a usage error naming the file, line and key",
        arguments: [
            ("root = \"/r\"\n\n[retention]\nkeep_dayly = 3\n", ":4: unknown key \"retention.keep_dayly\""),
            ("root = \"/r\"\ncolour = true\n", ":2: unknown key \"colour\""),
            ("root = \"/r\"\njobs = \"four\"\n", ":2: jobs must be an integer, not a string"),
            ("[retention]\nkeep_last = 1.5\n", ":2: retention.keep_last must be an integer"),
            ("compression = \"lz4\"\n", ":1: compression: \"lz4\" is not one of zstd"),
            ("root = \"/r\"\nrepo = \n", ":2:"),
        ])
    func badFile(text: String, expected: String) throws {
        let folder = TemporaryFolder()
        let file = folder.child("bad.toml")
        try write(text, to: file)
        let result = try GranaryProcess.run(["config", "--config", file])
        #expect(result.status == 64)
        #expect(result.stderr.contains(file + expected), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("an explicit file that is missing or unreadable is an error; a missing default file is not")
    func missingFile() throws {
        let folder = TemporaryFolder()
        var result = try GranaryProcess.run(["config", "--config", folder.child("nope.toml")])
        #expect(result.status == 64)
        #expect(result.stderr.contains("configuration file \(folder.child("nope.toml")) does not exist"))
        // A folder cannot be read as a file.
        result = try GranaryProcess.run(["config", "--config", folder.path])
        #expect(result.status == 64)
        #expect(result.stderr.contains(folder.path))
        result = try GranaryProcess.run(["config"], environment: ["XDG_CONFIG_HOME": folder.child("none")])
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test(
        "a configuration in a folder others can write: the hint fixes the folder (chmod go-w FOLDER), not the file; a file others can write: the file"
    )
    func openFolderHint() throws {
        guard geteuid() == 0 else { return }
        let folder = TemporaryFolder()
        let open = folder.child("shared")
        try FileSystem.makeDirectory(open)
        chmod(open, 0o777)
        let file = open + "/granary.toml"
        try write("", to: file)
        chmod(file, 0o600)
        var result = try GranaryProcess.run(["config", "--config", file])
        #expect(result.status == 64, "\(result.stderr)")
        let shown = (open as NSString).standardizingPath
        #expect(result.stderr.contains("Try: chown root -- \(shown) && chmod go-w -- \(shown)\n"), "\(result.stderr)")
        // Once the folder is root's alone, a file others can write is the file's fault.
        chmod(open, 0o755)
        chmod(file, 0o666)
        result = try GranaryProcess.run(["config", "--config", file])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("Try: chown root -- \(file) && chmod go-w -- \(file)\n"), "\(result.stderr)")
        chmod(file, 0o600)
        #expect(try GranaryProcess.run(["config", "--config", file]).status == 0)
    }

    @Test("other commands read the file too: users takes its root from it")
    func usersReadsFile() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try GranaryProcess.run([root], tool: "granary-sample")
        let file = folder.child("c.toml")
        try write("root = \"\(root)\"\n", to: file)
        let result = try GranaryProcess.run(["users", "--config", file])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("alice@example.com"))
    }
}
