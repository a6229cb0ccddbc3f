import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Refusals say whether to retry (issue 46): 75 only for what passes with time, and a message
/// that names the cause and what to do. The built binary, real stores.
@Suite("refusals that say whether to retry")
struct RefusalMessageTests {
    @Test(
        "a rollback store with a hot journal left by a killed writer fails its backup with 65, naming the journal and how to roll it back"
    )
    func hotJournal() throws {
        let site = try SampleSite()
        let user = "carol@example.com"
        let folder = site.root + "/" + user
        try FileSystem.makeDirectory(folder)
        let store = folder + "/Ledger.sqlite"
        // A writer killed mid-transaction: its pages spilled into the file, the journal left hot.
        let script = """
            import os, sqlite3
            con = sqlite3.connect(\(String(reflecting: store)), isolation_level=None)
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("CREATE TABLE t(x BLOB)")
            con.execute("INSERT INTO t SELECT randomblob(3000) FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 200) SELECT n FROM c)")
            con.execute("PRAGMA cache_size=2")
            con.execute("BEGIN IMMEDIATE")
            con.execute("UPDATE t SET x = randomblob(3000)")
            os._exit(0)
            """
        let writer = try GranaryProcess.runExecutable("/usr/bin/python3", ["-c", script])
        #expect(writer.status == 0, "\(writer.stderr)")
        #expect(FileManager.default.fileExists(atPath: store + "-journal"), "the writer left no journal")
        let run = try site.granary(["backup", user])
        #expect(run.status == 65, "\(run.status): \(run.stderr)")
        #expect(run.stderr.contains("hot journal"), "\(run.stderr)")
        #expect(run.stderr.contains("PRAGMA quick_check") && run.stderr.contains("owns the store"), "\(run.stderr)")
        #expect(!run.stderr.contains("run again"), "\(run.stderr)")
    }

    @Test(
        "an in-place restore whose attachment the app rewrote under its name is refused with 65, saying running again will not help and what to do; nothing changes, the owner keeps writing",
        arguments: [false, true])
    func rewrittenAttachment(owner: Bool) throws {
        let site = try SampleSite()
        let user = "dave@example.com"
        let folder = site.root + "/" + user
        try FileSystem.makeDirectory(folder)
        let store = folder + "/Notes.sqlite"
        try SampleData.makeCoreDataStore(store, notes: 9)
        let external = RestoreFixtures.externalFolder(of: store)
        let names = FileSystem.contents(of: external)
        #expect(names.count == 3)
        let backup = try site.granary(["backup", user])
        #expect(backup.status == 0, "\(backup.stderr)")
        let archives = site.archives(user)
        // The app (its owner process running, or closed) rewrites an attachment in place.
        let running = owner ? try DemoOwner(stores: [store], log: site.folder.child("owner.log")) : nil
        defer { running?.stop() }
        let rewritten = Data("rewritten by the app, same name".utf8)
        try rewritten.write(to: URL(fileURLWithPath: external + "/" + names[0]))
        let run = try site.granary(["restore", user])
        #expect(run.status == 65, "\(run.status): \(run.stderr)")
        #expect(run.stderr.contains(names[0]) && run.stderr.contains("other bytes"), "\(run.stderr)")
        #expect(run.stderr.contains("running again will not help") && run.stderr.contains("--to"), "\(run.stderr)")
        #expect(!run.stderr.contains("run again") && !run.stderr.contains("busy"), "\(run.stderr)")
        // Nothing changed: the attachment as the app wrote it, no other file, no safety archive.
        #expect(FileManager.default.contents(atPath: external + "/" + names[0]) == rewritten)
        #expect(FileSystem.contents(of: external) == names)
        #expect(site.archives(user) == archives)
        if let running {
            try running.waitForMoreWrites(3)
            #expect(running.process.isRunning)
        }
    }
}
