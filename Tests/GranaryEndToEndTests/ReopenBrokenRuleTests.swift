import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary-reopen-check` against owners that break one rule each.
@Suite("reopen protocol conformance: each rule broken on purpose", .serialized)
struct ReopenBrokenRuleTests: ReopenConformanceSuite {
    let folder = TemporaryFolder("granary-conformance")

    init() throws { try makeStores() }

    /// Each rule broken on purpose (`granary-demo-owner --break`), the check that must catch it,
    /// and what that check must say.
    static let brokenRules: [(rule: String, check: String, says: String)] =
        [
            ("hello-without-pid", "handshake", #"was answered "HELLO granary-reopen 1";"#),
            ("any-version", "versions", #"was answered "HELLO granary-reopen 999999999 "#),
            (
                "lenient-hello", "bad-hello",
                #"the first line "HELLO  granary-reopen 1" was answered "HELLO granary-reopen 1 "#
            ),
            ("ignore-unknown", "unknown-command", #"the line "" was answered nothing (no answer in time)"#),
            ("lenient-lease", "bad-lease", #""PAUSE 0" was answered "ERROR busy""#),
            ("cap-lease", "lease-bounds", #""PAUSE 3600000" was answered "ERROR bad-lease""#),
            ("refuse-resume-when-open", "resume-when-open", #""RESUME" was answered "ERROR unknown-command""#),
            ("any-line-ends-pause", "while-paused", #""PAUSE 100" was answered "PAUSED""#),
            ("stay-paused-on-bye", "bye", #"after BYE while paused the owner sent "ERROR unexpected-while-paused""#),
            ("stay-paused-when-gone", "peer-gone", "after the paused connection closed, a new conversation failed"),
            (
                "ignore-client-error", "client-error",
                #"after ERROR busy from the client the owner sent "ERROR unknown-command""#
            ),
            ("early-expiry", "expire", "after PAUSE 1000: before the lease ran out"),
            (
                "no-commit-lock", "commit-lock",
                #"while the commit lock was held past the lease the owner sent "EXPIRED""#
            ),
            ("no-idle-timeout", "idle-timeout", "the owner kept the connection open"),
            ("long-lines", "overlong-line", #"after a line of 1025 bytes the owner sent "ERROR unknown-command""#),
            ("one-thread", "several-stores", "HELLO granary-reopen 1 was answered nothing (no answer in time)"),
            ("early-resumed", "pause-resume", #"while paused the owner sent "RESUMED" before RESUME"#),
            ("keep-descriptor", "pause-resume", "still has descriptor"),
            // The rules granary-reopen(7) settled after an owner was written in C from it alone.
            (
                "loose-first-word", "unknown-command",
                #"the line "PAUSE\x09100" was answered "ERROR bad-lease"; expected "ERROR unknown-command""#
            ),
            ("any-error-ends", "unknown-command", #"the line "ERROR" was answered nothing (it closed the connection)"#),
            (
                "ignore-gone-while-pausing", "gone-while-pausing",
                "after a connection closed right after PAUSE 15000, a new conversation failed"
            ),
            ("idle-while-paused", "idle-timeout", "the idle timeout does not run while the store is paused"),
            ("late-idle-close", "idle-timeout", "the owner kept the connection open 12500 ms"),
            ("bye-lingers", "restore-conversations", "the owner kept the connection open 2000 ms after HELLO then BYE"),
            ("write-while-paused", "paused-untouched", "database was written; the owner must not open or write"),
        ]
        + (getuid() == 0
            ? [
                ("any-uid", "credentials", #"was answered "HELLO granary-reopen 1 "#),
                ("foreign-companions", "file-owners", "belongs to uid 65534, but the database to uid"),
            ] : [])

    @Test("an owner that breaks one rule on purpose fails the check of that rule, saying what it saw")
    func brokenRuleFailsItsCheck() throws {
        for (rule, name, says) in Self.brokenRules {
            let owner = try DemoOwner(
                stores: [store, cloud], log: folder.child("owner-\(rule).log"), intervalMs: 20, breaking: [rule])
            defer { owner.stop() }
            let result = try check(["--check", name, "--timeout", "2", store, cloud])
            #expect(result.status == 1, "\(rule): \(result.stdout)")
            #expect(verdicts(result.stdout) == [name: "FAIL"], "\(rule): \(result.stdout)")
            #expect(result.stdout.contains(says), "\(rule): \(result.stdout)")
            owner.stop()
            usleep(200_000)  // the kernel frees the socket names
        }
    }
}
