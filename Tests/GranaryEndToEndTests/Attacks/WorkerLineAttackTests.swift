import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 47: a worker process is root's own, but it works on a user's hostile files; its
    /// parent takes nothing from its lines on trust. Here a real worker of a debug build (the
    /// same binary and entry point as every worker) writes hostile lines to its parent before it
    /// dies or exits (`GRANARY_TEST_WORKER_SAYS`, `_TRAP`, `_EXIT`).
    @Suite("20. a worker's lines reach its parent as words, never as orders")
    struct WorkerLines {
        /// A first `backup --all` (each user has an archive), then the lab's watch.
        static func prepared(_ lab: Lab) throws -> (json: [String: [String: Any]], watch: Lab.Watch) {
            let first = try lab.granary(["backup", "--all", "--json"], timeout: 120)
            try #require(first.status == 0, "\(first)")
            return (try AttackTests.Resources.document(first), lab.watch())
        }

        static func says(_ lab: Lab, _ lines: [String]) throws -> String {
            let file = lab.base + "/worker-says"
            try Lab.write(file, lines.joined(), mode: 0o600)
            return file
        }

        /// Every archive of both users, and the root-only canary, as they were.
        static func expectNothingRemoved(_ lab: Lab, archives: [String], since watch: Lab.Watch) throws {
            for archive in archives {
                #expect(FileSystem.status(archive) != nil, "\(archive) was removed")
            }
            #expect(FileSystem.status(lab.canaryFile) != nil)
            try lab.expectContained(since: watch, "hostile worker lines")
        }

        static func allArchives(_ lab: Lab) -> [String] {
            ["attacker", "victim"].flatMap { user in
                FileSystem.contents(of: lab.repo + "/" + user).filter { $0.hasSuffix(".tar.zst") }.map {
                    lab.repo + "/" + user + "/" + $0
                }
            }
        }

        @Test(
            "a worker that hands over a path to remove outside its own temporary files, then dies: nothing is removed; that user fails, the other is backed up",
            arguments: ["canary", "dot-dot", "other user's archive", "own archive", "CRLF"])
        func handOverThenDie(target: String) throws {
            let lab = try Lab()
            let (_, watch) = try Self.prepared(lab)
            let archives = Self.allArchives(lab)
            let own = try #require(archives.first { $0.contains("/attacker/") })
            let victims = try #require(archives.first { $0.contains("/victim/") })
            let name = PathText.lastComponent(own)
            let path: String
            var line: String
            switch target {
            case "canary": path = lab.canaryFile
            case "dot-dot": path = lab.repo + "/attacker/../victim/" + PathText.lastComponent(victims)
            case "other user's archive": path = victims
            case "own archive": path = own
            default: path = lab.canaryFile
            }
            line = "M\t1\t\(name)\t\(path)\n"
            if target == "CRLF" {
                // A mirror's reason holding CRLF: one Swift Character, neither "\r" nor "\n".
                line = "F\t\(lab.base)/mirror\t75\tthe mirror said busy\r\n" + line
            }
            let file = try Self.says(lab, [line, "P\tsnapshot\u{1B}]0;owned\u{07}\t1\t2\n"])
            let outcome = try lab.granary(
                ["backup", "--all", "--json"],
                environment: ["GRANARY_TEST_WORKER_SAYS": "attacker:" + file, "GRANARY_TEST_WORKER_TRAP": "attacker"],
                timeout: 120)
            Lab.expectDocumented(outcome, "a worker handing over \(target), then trapping")
            #expect(outcome.status == 1, "\(outcome)")
            let users = try AttackTests.Resources.document(outcome)
            #expect(users["attacker"]?["ok"] as? Bool == false, "\(outcome)")
            #expect(users["victim"]?["ok"] as? Bool == true, "\(outcome)")
            #expect(!outcome.stdout.contains("\u{1B}") && !outcome.stderr.contains("\u{1B}"), "\(outcome)")
            try Self.expectNothingRemoved(lab, archives: archives, since: watch)
        }

        @Test(
            "a worker that exits 0 after a result naming another user and a hand-over of its user's published archive: the result is refused (that user fails), nothing is removed"
        )
        func resultForAnotherUser() throws {
            let lab = try Lab()
            let (first, watch) = try Self.prepared(lab)
            let archives = Self.allArchives(lab)
            let own = try #require(archives.first { $0.contains("/attacker/") })
            // The victim's own entry of the first run, word for word: a result the parent can read.
            let victimEntry = try #require(first["victim"])
            let json = String(
                decoding: try JSONSerialization.data(withJSONObject: victimEntry, options: [.sortedKeys]), as: UTF8.self
            )
            let file = try Self.says(
                lab, ["M\t1\t\(PathText.lastComponent(own))\t\(own)\n", "R\t" + json + "\n"])
            let outcome = try lab.granary(
                ["backup", "--all", "--json"],
                environment: ["GRANARY_TEST_WORKER_SAYS": "attacker:" + file, "GRANARY_TEST_WORKER_EXIT": "attacker"],
                timeout: 120)
            Lab.expectDocumented(outcome, "a worker speaking for another user")
            #expect(outcome.status == 1, "\(outcome)")
            let document = try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any]
            let ids = (document?["users"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            #expect(ids.sorted() == ["attacker", "victim"], "one entry per user: \(ids)")
            let users = try AttackTests.Resources.document(outcome)
            #expect(users["attacker"]?["ok"] as? Bool == false, "\(outcome)")
            let message = (users["attacker"]?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message.contains("another user"), "\(message)")
            #expect(users["victim"]?["ok"] as? Bool == true, "\(outcome)")
            try Self.expectNothingRemoved(lab, archives: archives, since: watch)
        }
    }
}
