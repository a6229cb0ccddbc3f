// swift-tools-version: 6.0
import PackageDescription

#if canImport(Glibc)
    import Glibc
#endif

/// `make fuzz` sets GRANARY_FUZZ=1 (with its own --build-path): GranaryKit is then built with
/// libFuzzer's coverage instrumentation and the `granary-fuzz` target exists. A normal build
/// never sees either.
let fuzzing = getenv("GRANARY_FUZZ") != nil
let fuzzFlags: [SwiftSetting] = fuzzing ? [.unsafeFlags(["-sanitize=fuzzer,address"])] : []
/// Our C, in release builds (the shipped binaries), with glibc's checked string and memory
/// functions, as Debian's hardening flags build C (lintian's hardening-no-fortify-functions).
// Every C target: fortified in release; its `assert`s (the invariants of the tee, the allocator
// wrapper, the beneath table, the page hash) checked in debug builds, which `make test` and CI's
// tests run, and compiled out of release builds.
let hardenedC: [CSetting] = [
    .define("_FORTIFY_SOURCE", to: "2", .when(configuration: .release)),
    .define("NDEBUG", .when(configuration: .release)),
]

// No `platforms`: that list gives Apple platforms' minimum versions, and granary builds only on
// Linux (Glibc, openat2, per-thread credentials, /proc). A macOS entry claimed a port there is not.
let package = Package(
    name: "granary",
    products: [
        .executable(name: "granary", targets: ["granary"]),
        .executable(name: "granary-sample", targets: ["granary-sample"]),
        .library(name: "GranaryKit", targets: ["GranaryKit"]),
        // What an owning process links to speak the reopen protocol: no libarchive, no SQLite.
        .library(name: "GranaryOwner", targets: ["GranaryOwner"]),
        .executable(name: "granary-demo-owner", targets: ["granary-demo-owner"]),
        // The reopen protocol's conformance checker, for anyone writing an owner.
        .executable(name: "granary-reopen-check", targets: ["granary-reopen-check"]),
        // A process outside the reopen protocol that logs its acknowledged writes (tests, make soak).
        .executable(name: "granary-ledger-writer", targets: ["granary-ledger-writer"]),
    ],
    // Every package of the dependency graph, pinned exactly, transitive ones too: what root runs
    // on users' data is built from these versions and no others.
    // Package.resolved stays out of git (the package mirror's commit ids are not upstream's);
    // `make check-pins` fails when the resolved graph differs from these pins.
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/LebJe/TOMLKit", exact: "0.6.0"),
    ],
    targets: [
        // C at the edges: the system libraries, wrapped once in GranaryKit/SQLite and GranaryKit/Archive.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]
        ),
        .systemLibrary(name: "CLinux"),
        // A pass-through SQLite VFS that watches the snapshot's writes (overlapped pack).
        .target(name: "CSnapshotTee", dependencies: ["CSQLite"], cSettings: hardenedC),
        // The trust boundary's system calls: openat2 beneath a folder, per-thread owner
        // credentials, and SQLite's file access redirected beneath a folder (Users/Folder.swift).
        .target(name: "CBeneath", dependencies: ["CSQLite"], cSettings: hardenedC),
        // Time budgets and per-connection memory ceilings for SQLite's work on stores.
        .target(name: "CSQLiteLimits", dependencies: ["CSQLite"], cSettings: hardenedC),
        // SHA-256 of sixteen pages at once with AVX-512 (`backup --delta`'s page hashes).
        .target(name: "CPageHash", dependencies: ["CSHA256"], cSettings: hardenedC),
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"])]
        ),
        // SHA-256 of one message: the CPU's SHA instructions where it has them, else portable C.
        .target(name: "CSHA256", cSettings: hardenedC),
        // Its Swift face, `SHA256`: every digest granary writes or checks.
        .target(name: "GranaryDigest", dependencies: ["CSHA256"]),
        // The reopen protocol (man 7 granary-reopen): the owner side and granary's client.
        .target(name: "GranaryOwner", dependencies: ["GranaryDigest"]),
        // All behaviour lives here; it never prints.
        .target(
            name: "GranaryKit",
            dependencies: [
                "CSQLite", "CArchive", "CZstd", "CLinux", "CSnapshotTee", "CBeneath", "CSQLiteLimits", "CPageHash",
                "GranaryOwner", "GranaryDigest",
            ],
            // Test seams (crash injection) exist in debug builds only: see Support/TestHooks.swift.
            swiftSettings: fuzzFlags + [.define("TEST_HOOKS", .when(configuration: .debug))]
        ),
        // The command line: parsing, rendering (text and JSON), errors to exit codes. A library so
        // that the fuzz target can feed argument vectors to the same parser.
        .target(
            name: "GranaryCLI",
            dependencies: [
                "GranaryKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ],
            // The test switches read from the environment: debug builds only (TestHooks.swift).
            swiftSettings: fuzzFlags + [.define("TEST_HOOKS", .when(configuration: .debug))]
        ),
        // The `granary` executable: GranaryCLI's entry point and nothing else.
        .executableTarget(name: "granary", dependencies: ["GranaryCLI"]),
        // Prints the configuration file's keys for `make generate` (granary.toml(5)); not installed.
        .executableTarget(
            name: "granary-config-keys",
            dependencies: ["GranaryCLI", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        // Generates the built-in sample data that `make demo` and the tests share.
        .executableTarget(
            name: "granary-sample",
            dependencies: [
                "GranaryKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // An app server in miniature that owns a user's stores through GranaryOwner (tests, make demo).
        .executableTarget(
            name: "granary-demo-owner",
            dependencies: [
                "GranaryKit", "GranaryOwner", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Checks that an owner follows man 7 granary-reopen; needs only GranaryOwner.
        .executableTarget(
            name: "granary-reopen-check",
            dependencies: ["GranaryOwner", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // Writes rows into a store with plain SQLite and logs each acknowledged commit to a ledger
        // (issue 30's proof: a third process beside the owners; tests and make soak only).
        .executableTarget(name: "granary-ledger-writer", dependencies: ["CSQLite"]),
        // What the test targets share (a private temporary folder per test).
        // The test binaries' setup: GranaryKit's process-wide installs (ProcessSetup), before any test.
        .target(name: "CTestSetup", dependencies: ["CBeneath", "CSQLiteLimits"], path: "Tests/CTestSetup"),
        .target(
            name: "GranaryTestSupport", dependencies: ["GranaryKit", "CTestSetup"], path: "Tests/GranaryTestSupport"),
        .testTarget(
            name: "GranaryKitTests",
            dependencies: [
                "GranaryKit", "GranaryCLI", "CSQLite", "GranaryOwner", "GranaryDigest", "GranaryTestSupport",
            ]),
        .testTarget(
            name: "GranaryEndToEndTests",
            dependencies: ["GranaryKit", "GranaryOwner", "GranaryDigest", "GranaryTestSupport"]),
        .testTarget(name: "GranaryCLITests", dependencies: ["GranaryCLI", "GranaryKit", "GranaryTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)

if fuzzing {
    package.targets.append(
        .executableTarget(
            name: "granary-fuzz",
            dependencies: ["GranaryKit", "GranaryCLI"],
            path: "Fuzz",
            swiftSettings: [.unsafeFlags(["-sanitize=fuzzer,address", "-parse-as-library"])],
            linkerSettings: [.unsafeFlags(["-sanitize=fuzzer,address"])]
        ))
}
