import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Hosts and sync's deletion records on local folders (no S3 server needed): the same rules as
/// on a bucket, where every machine runs them.
@Suite("hosts and deletion records on local repositories", .serialized)
struct HostOptionTests {
    let folder = TemporaryFolder("granary-host-option")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var mirror: String { initializedRepository(folder.child("mirror")) }
    var config: String { folder.child("config.toml") }
    let user = "alice@example.com"

    init() throws {
        try FileSystem.makeDirectory(root + "/" + user)
        try SampleData.makeItemsStore(root + "/" + user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        try "repo = \"\(repo)\"\n\n[[mirror]]\nrepo = \"\(mirror)\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
    }

    func granary(_ arguments: [String], host: String?, environment: [String: String] = [:]) throws
        -> GranaryProcess.Result
    {
        try GranaryProcess.run(
            arguments + ["--root", root, "--config", config] + (host.map { ["--host", $0] } ?? []),
            environment: environment)
    }

    /// Archive names in a folder of a local repository (host markers and records left out).
    func archives(_ location: String) -> [String] {
        FileSystem.contents(of: location + "/" + user).filter { !$0.hasPrefix(".") }.sorted()
    }

    /// Names of the host markers in the user's folder of `location`.
    func markers(_ location: String) -> [String] {
        FileSystem.contents(of: location + "/" + user).filter { $0.contains(".host=") }.sorted()
    }

    @Test("a host name that is not one is refused with 64, from --host, GRANARY_HOST or host =")
    func invalidHost() throws {
        let flag = try granary(["list"], host: "web 1")
        #expect(flag.status == 64, "\(flag.stderr)")
        #expect(flag.stderr.contains("invalid host name"), "\(flag.stderr)")
        let variable = try granary(["list"], host: nil, environment: ["GRANARY_HOST": "-x"])
        #expect(variable.status == 64, "\(variable.stderr)")
        #expect(variable.stderr.contains("GRANARY_HOST"), "\(variable.stderr)")
        try "repo = \"\(repo)\"\nhost = \"a/b\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let file = try granary(["list"], host: nil)
        #expect(file.status == 64, "\(file.stderr)")
        #expect(file.stderr.contains("host"), "\(file.stderr)")
    }

    @Test(
        "each archive's name holds its host (no marker beside it); the configured host is used; prune and delete keep to their host, record what they removed, and sync removes that alone"
    )
    func pruneDeleteSync() throws {
        // Names are unique to the microsecond: no waiting for the clock between backups.
        #expect(try granary(["backup", user], host: "a").status == 0)
        #expect(try granary(["backup", user], host: "a").status == 0)
        try "repo = \"\(repo)\"\nhost = \"b\"\n\n[[mirror]]\nrepo = \"\(mirror)\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        #expect(try granary(["backup", user], host: nil).status == 0, "host = b in the configuration")
        let all = archives(repo)
        #expect(all.count == 3)
        #expect(all.filter { $0.hasSuffix(".a.tar.zst") }.count == 2, "\(all)")
        #expect(all.filter { $0.hasSuffix(".b.tar.zst") }.count == 1, "\(all)")
        #expect(markers(repo).isEmpty, "no second object beside an archive")
        #expect(try granary(["verify", "--all"], host: "a").status == 0)
        #expect(try granary(["verify", "--all"], host: "b").status == 0)

        // Both hosts' syncs: the mirror gets every archive, under the same name.
        #expect(try granary(["sync"], host: "a").status == 0)
        #expect(try granary(["sync"], host: "b").status == 0)
        #expect(archives(mirror) == all)
        #expect(markers(mirror).isEmpty)

        // b cannot delete a's archive by name; a's prune leaves b's archive.
        let bDeletes = try granary(["delete", user + "/" + all[0]], host: "b")
        #expect(bDeletes.status == 66, "\(bDeletes.stderr)")
        #expect(bDeletes.stderr.contains("--host a"), "the hint names the host: \(bDeletes.stderr)")
        #expect(try granary(["prune", user, "--keep-last", "1"], host: "a").status == 0)
        #expect(archives(repo) == Array(all[1...]))
        let record = repo + "/.granary-deleted/a/" + user
        #expect(FileSystem.isRegularFile(record))
        #expect(FileSystem.status(record).map { $0.st_mode & 0o777 } == 0o600)
        #expect(FileSystem.status(repo + "/.granary-deleted").map { $0.st_mode & 0o777 } == 0o700)
        #expect(
            String(decoding: FileManager.default.contents(atPath: record) ?? Data(), as: UTF8.self) == all[0] + "\n")

        // b's sync removes nothing (it is not b's deletion); a's removes the pruned archive alone.
        #expect(try granary(["sync"], host: "b").status == 0)
        #expect(archives(mirror) == all)
        #expect(try granary(["sync"], host: "a").status == 0)
        #expect(archives(mirror) == Array(all[1...]))
    }

    @Test(
        "archives gone from the repository without a delete or prune (a lost, new or emptied repository) stay on the mirror"
    )
    func emptiedRepositoryKeepsMirror() throws {
        #expect(try granary(["backup", user], host: "a").status == 0)
        #expect(try granary(["backup", user], host: "a").status == 0)
        #expect(try granary(["sync"], host: "a").status == 0)
        let history = archives(mirror)
        #expect(history.count == 2)
        FileSystem.removeTree(repo)
        // A new repository in its place (granary init, as after a lost disk).
        initializedRepository(folder.child("repo"))
        #expect(try granary(["backup", user], host: "a").status == 0)
        let sync = try granary(["sync", "--json"], host: "a")
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(archives(mirror).count == 3, "\(archives(mirror))")
        #expect(Set(history).isSubset(of: archives(mirror)))
    }
}
