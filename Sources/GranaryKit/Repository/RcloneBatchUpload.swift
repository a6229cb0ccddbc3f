import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension RcloneRepository {
    /// One file to upload and the object it becomes.
    public struct Upload: Sendable, Equatable {
        public let object: String
        public let file: String
        public init(object: String, file: String) {
            self.object = object
            self.file = file
        }
    }

    /// Whether ``uploadBatch(_:transfers:deadline:uploaded:)`` can be used: uploads go straight to
    /// their final name (object stores, where a PUT or a multipart completion is atomic).
    public func uploadsBatches() -> Bool { (try? uploadsDirectly()) ?? false }

    /// Uploads `files` in one rclone run (`rclone copy --files-from-raw` of a staging folder of
    /// hard links in the work folder, `transfers` at a time), each under its final name and never
    /// over an object already there (`--ignore-existing`): one process for many small objects,
    /// where a run each would cost a process start each. On an object store a cut or stopped
    /// upload leaves nothing under the name. `uploaded` is called with each object as rclone
    /// reports it copied, while the run goes on, so that one stalled transfer does not hold back
    /// the others. The run is stopped at `deadline` (seconds; nil: rclone's own timeouts).
    /// Returns the objects reported copied: the others (failed, stopped, or skipped because the
    /// name was taken) are the caller's to publish again, through
    /// ``Repository/publishObject(_:from:)``, which settles a name taken. `started` is handed the
    /// rclone process as soon as it runs (a caller that must end the run sooner kills it: the run
    /// then ends as a cut one, its staging folder removed).
    public func uploadBatch(
        _ files: [Upload], transfers: Int, deadline: Double?, started: (RcloneProcess) -> Void = { _ in },
        uploaded: (String) -> Void
    ) throws(RepositoryError) -> Set<String> {
        listings.changeBegins()
        defer { listings.changeEnds() }
        guard !files.isEmpty else { return [] }
        let work = try prepareWorkFolder()
        let staging = work + "/" + FileSystem.temporaryName(for: "follow-batch")
        guard RawPath.mkdir(staging, 0o700) == 0 else {
            throw .cannotCreate(staging, FileSystemError("create folder", path: staging))
        }
        defer { FileSystem.removeTree(staging) }
        var listed: [String: Upload] = [:]
        var list = ""
        for upload in files where !upload.object.contains("\n") && !upload.object.hasPrefix("/") {
            var parent = staging
            var made = true
            for part in upload.object.split(separator: "/").dropLast() {
                parent += "/" + part
                if RawPath.mkdir(parent, 0o700) != 0 && errno != EEXIST { made = false }
            }
            // A hard link (the work folder holds both): nothing copied.
            guard made, link(upload.file, staging + "/" + upload.object) == 0 else { continue }
            listed[upload.object] = upload
            list += upload.object + "\n"
        }
        guard !listed.isEmpty else { return [] }
        let listFile = staging + "/.files"
        do {
            try FileSystem.writeAtomically(Array(list.utf8), to: listFile)
        } catch {
            throw .cannotCreate(listFile, error)
        }
        let count = String(max(1, min(transfers, listed.count)))
        // rclone's log on its standard output, a JSON object a line: each object copied is said
        // as it completes ("Copied (new)"). `--quiet` and a log level exclude each other.
        let arguments =
            common.filter { $0 != "--quiet" } + [
                "copy", "--ignore-existing", "--no-traverse", "--files-from-raw", listFile, "--transfers", count,
                "--checkers", count, "--use-json-log", "--log-level", "INFO", "--stats", "0",
                "--stats-log-level", "DEBUG", "--log-file", "/dev/stdout", staging, remote(""),
            ]
        let process = try rclone.start(arguments, extra: extra)
        started(process)
        var done: Set<String> = []
        var pending: [UInt8] = []
        let timedOut = Rclone.read(process, deadline: deadline) { bytes in
            pending.append(contentsOf: bytes)
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                if let object = Self.copiedObject(line), listed[object] != nil, done.insert(object).inserted {
                    uploaded(object)
                }
            }
        }
        if timedOut { process.stop() } else { process.wait() }
        return done
    }

    /// The object a line of rclone's JSON log says was copied, if it says so.
    static func copiedObject(_ line: [UInt8]) -> String? {
        guard line.first == UInt8(ascii: "{"),
            let value = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
            let message = value["msg"] as? String, message.hasPrefix("Copied"),
            let object = value["object"] as? String
        else { return nil }
        return object
    }
}
