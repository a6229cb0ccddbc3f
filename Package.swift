// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "granary",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "granary", targets: ["granary"]),
        .executable(name: "granary-sample", targets: ["granary-sample"]),
        .library(name: "GranaryKit", targets: ["GranaryKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
    ],
    targets: [
        // C at the edges: the two system libraries, wrapped once in GranaryKit/SQLite and GranaryKit/Archive.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        .systemLibrary(
            name: "CArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"])]
        ),
        // All behaviour lives here; it never prints.
        .target(
            name: "GranaryKit",
            dependencies: [
                "CSQLite", "CArchive",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ]
        ),
        // The thin command-line front end.
        .executableTarget(
            name: "granary",
            dependencies: [
                "GranaryKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Generates the built-in sample data that `make demo` and the tests share.
        .executableTarget(
            name: "granary-sample",
            dependencies: ["GranaryKit"]
        ),
        .testTarget(name: "GranaryKitTests", dependencies: ["GranaryKit", "CSQLite"]),
        .testTarget(name: "GranaryEndToEndTests", dependencies: ["GranaryKit"]),
    ],
    swiftLanguageModes: [.v6]
)
