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
}
