import Foundation

/// The checks `ArchiveVerifier` runs, once every member is extracted and matches its manifest
/// entry, on an archive with delta information (issue 35).
///
/// A delta alone: each `.delta` is well formed, states the recorded page size and count, carries
/// pages within that count, in order, as many as recorded; the carried external-data files are in
/// the state the manifest lists. (Whether its pages make the recorded state needs its base:
/// `verify --chain`.) A full with page hashes: each extracted store's own state digest is
/// the recorded one, and so is its `.pages` file's.
///
/// A member in `streamed` went to a ``MemberSink`` instead of the folder: its sink checked it (a
/// delta's pages applied as they streamed, `DeltaRestore`), or its owner checks what it stood for
/// (a chain's full's `.pages`: the rebuilt store is checked against the newest state digest).
enum DeltaCheck {
    static func check(_ manifest: Manifest, in folder: String, archive: String, streamed: Set<String> = []) throws {
        guard let info = manifest.delta else { return }
        func fail(_ member: String?, _ reason: String) -> VerificationFailure {
            VerificationFailure(archive: archive, member: member, reason: reason)
        }
        guard info.stores.map(\.name) == manifest.stores.map(\.name) else {
            throw fail(Manifest.memberName, "lists other stores under \"delta\" than under \"stores\"")
        }
        for (store, recorded) in zip(manifest.stores, info.stores) {
            guard ArchiveVerifier.isSafe(store.name), store.path == Manifest.storesFolder + store.name,
                manifest.isDelta
                    ? recorded.pages == nil && recorded.changes == PageFiles.deltaMember(store.name)
                    : recorded.pages == PageFiles.pagesMember(store.name) && recorded.changes == nil
            else {
                throw fail(
                    store.path, "names store \(store.name.debugDescription), which would leave the user's folder")
            }
            let member = manifest.isDelta ? recorded.changes : recorded.pages
            guard let member, manifest.files.contains(where: { $0.path == member }) else {
                throw fail(
                    Manifest.memberName, "names \(member ?? "no member") for \(store.name), which it does not list")
            }
            if streamed.contains(member) { continue }
            do {
                if manifest.isDelta {
                    // Its pages in order and in range, as many as recorded; that they make the
                    // recorded state is `verify --chain`'s to prove (the hash list is the base's).
                    let changes = PageFiles.deltaMember(store.name)
                    let header = try PageChanges.read(folder + "/" + changes) { _, _ in }
                    guard header.pageSize == recorded.pageSize, header.pageCount == recorded.pageCount,
                        header.changed == recorded.changedPages
                    else {
                        throw fail(
                            changes,
                            "states \(header.changed) of \(header.pageCount) pages of \(header.pageSize) bytes, the manifest \(recorded.changedPages ?? 0) of \(recorded.pageCount) of \(recorded.pageSize)"
                        )
                    }
                } else {
                    let pages = PageFiles.pagesMember(store.name)
                    let summary = try PageFiles.summary(ofPages: folder + "/" + pages)
                    guard summary.pageSize == recorded.pageSize, summary.pageCount == recorded.pageCount,
                        summary.stateDigest == recorded.stateDigest
                    else {
                        throw fail(
                            pages,
                            "states \(summary.pageCount) pages of \(summary.pageSize) bytes with state digest \(summary.stateDigest), the manifest \(recorded.pageCount) of \(recorded.pageSize) with \(recorded.stateDigest)"
                        )
                    }
                    let own = try PageFiles.hash(file: folder + "/" + store.path, pageSize: recorded.pageSize)
                    guard own.stateDigest == recorded.stateDigest else {
                        throw fail(
                            store.path, "has state digest \(own.stateDigest), the manifest says \(recorded.stateDigest)"
                        )
                    }
                }
            } catch let error as DeltaError {
                // Named by member, not by the scratch copy's path.
                switch error {
                case .malformed(let path, let reason) where path.hasPrefix(folder + "/"):
                    throw fail(String(path.dropFirst(folder.count + 1)), reason)
                case .notPages(let path, let size, let pageSize) where path.hasPrefix(folder + "/"):
                    throw fail(
                        String(path.dropFirst(folder.count + 1)),
                        "has \(size) bytes, not a whole number of \(pageSize)-byte pages")
                default: throw fail(nil, error.description)
                }
            }
        }
        if manifest.isDelta {
            let state = Dictionary(
                (info.external ?? []).map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
            for file in manifest.files where file.kind == .external && state[file.path] != file {
                throw fail(file.path, "is carried but is not in the state the manifest lists")
            }
        }
    }
}
