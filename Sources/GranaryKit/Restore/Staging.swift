import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Extracts an archive into a staging folder and verifies everything in it before anything
/// live is touched: every member must be listed in the manifest with the size and SHA-256 it
/// has, every listed file must be present, and every store must pass `PRAGMA integrity_check`.
public enum Staging {
    /// Extracts `archive` into `folder` (which must exist and be empty) and verifies it fully
    /// (`ArchiveVerifier`, with `integrity_check`). Returns the manifest. Throws
    /// `RestoreError.verificationFailed` for anything wrong with the data, including an archive
    /// whose manifest names another user than `user`.
    public static func extract(
        archive: String, into folder: String, user: String? = nil, limits: ContentLimits = .defaults
    ) throws -> Manifest {
        try extract(source: .file(archive), name: archive, into: folder, user: user, limits: limits)
    }

    /// Extracts the archive `source` gives (a local file, or a remote archive streamed) as
    /// ``extract(archive:into:user:limits:)`` does; `name` names it in messages. `limits`: the time
    /// budget and memory ceiling of each store's check (the run's, ``RunContext/limits``).
    public static func extract(
        source: ArchiveSource, name archive: String, into folder: String, user: String? = nil,
        limits: ContentLimits = .defaults
    ) throws -> Manifest {
        do {
            // Every file, those a format-2 archive lists in MANIFEST.files too: restore needs their modes.
            // Before a byte is written: room for every file at its full length (the users'
            // filesystem is shared; a staging that filled it would fail every other user's writes).
            // A full with page hashes (issue 35): its `.pages` are checked by SHA-256 and not
            // written, so its stores are checked as any full's are (SHA-256, integrity_check), not
            // hashed a second time page by page for a state digest a restore does not use.
            let manifest = try ArchiveVerifier.extract(
                source: source, name: archive, into: folder, check: .full, expectedUser: user, allFiles: true,
                limits: limits, room: { try StagingRoom.check($0, in: folder) },
                sink: { manifest, member in
                    manifest.delta?.stores.contains { $0.pages == member } == true ? Discard() : nil
                }
            ).manifest
            // Issue 35: a delta alone holds no store; `DeltaRestore` rebuilds it from its chain.
            if manifest.isDelta {
                throw VerificationFailure(
                    archive: archive,
                    reason: "is a delta archive: restore it by name from the repository that holds its base")
            }
            return manifest
        } catch let failure as VerificationFailure {
            let reason = failure.member.map { $0 + " " + failure.reason } ?? failure.reason
            throw RestoreError.verificationFailed(archive: archive, reason: reason, newestGood: nil, user: user)
        }
    }

    /// The staged path of a store of `manifest` inside `folder`.
    public static func stagedPath(of store: Manifest.Store, in folder: String) -> String {
        folder + "/" + store.path
    }

    /// The staged external-data folder of a store, when the archive has one.
    public static func stagedExternal(of store: Manifest.Store, in folder: String) -> String? {
        store.externalDataPath.map { folder + "/" + ($0.hasSuffix("/") ? String($0.dropLast()) : $0) }
    }
}

/// Whether a folder's filesystem can take what an archive's files need.
public enum StagingRoom {
    public enum Unit: Sendable, Equatable { case bytes, files }

    /// Throws `RestoreError.noRoomToStage` when the filesystem of `folder` has fewer free bytes
    /// (as an unprivileged user sees them, less 64 KiB to spare) or free inodes than `needs` asks for.
    public static func check(_ needs: ArchiveVerifier.Needs, in folder: String) throws {
        guard let space = FreeSpace.of(folder) else { return }
        let free = space.bytes
        if needs.bytes > free - FreeSpace.spare {
            throw RestoreError.noRoomToStage(folder: folder, needed: needs.bytes, free: free, unit: .bytes)
        }
        // Filesystems without a fixed number of inodes (btrfs) report none at all.
        if let files = space.files, Int64(needs.files) > files {
            throw RestoreError.noRoomToStage(folder: folder, needed: Int64(needs.files), free: files, unit: .files)
        }
    }
}
