import ArgumentParser
import Foundation
import GranaryKit
import Synchronization

/// `granary backup` over several users: each user in a worker process of its own
/// (`UserWorkers`), so that a crash-class fault while working on one user (SIGBUS on a `-shm`
/// or store its owner truncates under a mapping, a trap, an abort) fails that user only and the
/// run goes on with the others. docs/security.md, "One user's content fails that user only".
///
/// A worker is this program run again with the same argument bytes and `--worker-user=ID`
/// after the command's name: it reads the same configuration and options as the parent, backs
/// up that one user (lock, recovery, snapshot, check, pack, publish, mirrors) and sends the
/// user's entry of the result (`BackupResult.User`, as JSON) to the parent. The parent prunes
/// (in order, under each user's lock, as in one process) and prints the run's result, the same
/// document and text as a run in one process gives.
///
/// With a local repository a worker does not send its archive to the mirrors: it hands it over to
/// the parent (`MirrorHandOver`, sent before the result), which sends it on a queue of its own
/// (`BackupRun.MirrorSender`, one upload at a time, under the user's lock) while the next workers
/// back up their users: no mirror, slow or dead, delays a local backup, and a mirror that failed
/// once is not tried again in the run ("failed earlier in this run"; `granary sync` catches up).
/// With a remote repository the archive exists on this machine only as the worker's temporary
/// file, so the worker sends it itself before it ends; a mirror that failed in one worker
/// (`FailedMirror`, `--worker-failed-mirror=…`) is passed to the workers started after it, so a
/// dead mirror still costs its time bound once per run.
enum BackupWorkers {
    static let flag = "worker-user"
    /// A mirror that failed earlier in the run (repeatable; ``FailedMirror/line``).
    static let failedFlag = "worker-failed-mirror"

    /// The parent's side: the users' entries, in order.
    static func run(
        _ operation: BackupOperation, users: [UserID], jobs: Int, prune policy: RetentionPolicy?,
        progress: (any BackupProgress)?
    ) -> [BackupResult.User] {
        let words = GranaryMain.argumentBytes()
        let failed = Mutex<[FailedMirror]>([])
        // Each worker hands its new archive over; the parent sends it to the mirrors on a queue of
        // its own while the next workers back up their users.
        let sender = BackupRun.MirrorSender(operation)
        let replies = UserWorkers.run(
            users: users, jobs: jobs,
            arguments: { user in arguments(words, for: user, failed: failed.withLock { $0 }) }, progress: progress,
            finished: { reply in
                failed.withLock { known in
                    for mirror in reply.failedMirrors where !known.contains(where: { $0.location == mirror.location }) {
                        known.append(mirror)
                    }
                }
                if let handOver = reply.handedOver, case .success = reply.get() {
                    sender.send(handOver, of: reply.user)
                } else if let handOver = reply.handedOver, handOver.removeAfter,
                    handOver.isAccepted(staging: try? operation.repository.stagingFolder(for: reply.user))
                {
                    unlink(handOver.path)
                }
            })
        let uploads = sender.finish()
        var entries = replies.map { reply -> BackupResult.User in
            switch reply.get() {
            case .success(let json):
                do {
                    let decoder = JSONDecoder()
                    decoder.nonConformingFloatDecodingStrategy = .convertFromString(
                        positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
                    var entry = try decoder.decode(BackupResult.User.self, from: Data(json.utf8))
                    // A worker speaks for its own user only (the prune below acts on the entry's).
                    guard entry.id == reply.user.rawValue else {
                        return BackupResult.User(
                            id: reply.user.rawValue,
                            failure: Failure(
                                UnexpectedError(
                                    description:
                                        "\(reply.user): the worker's result names another user (\(entry.id.debugDescription)); not taken"
                                )))
                    }
                    if let sent = uploads[reply.user.rawValue], !sent.isEmpty {
                        entry.mirrors = sent.map(BackupResult.Mirror.init)
                    }
                    return entry
                } catch {
                    return BackupResult.User(
                        id: reply.user.rawValue,
                        failure: Failure(
                            UnexpectedError(
                                description: "\(reply.user): the worker's result could not be read: \(error)")))
                }
            case .failure(let failure):
                // What the dead worker left (its snapshots, a half-written archive) goes now, not
                // at the next run: only temporaries of processes no longer alive are removed.
                _ = operation.repository.removeDeadTemporaries(users: [reply.user])
                return BackupResult.User(id: reply.user.rawValue, failure: Failure(failure))
            }
        }
        guard let policy else { return entries }
        // As BackupRun: each user whose backup succeeded, in order, stopping at an interruption.
        for index in entries.indices {
            if Interruption.isRequested { break }
            guard entries[index].ok, let user = try? UserID(entries[index].id) else { continue }
            do {
                entries[index].prune = PruneResult.Plan(
                    try ArchiveRemoval.prune(
                        user: user, repository: operation.repository, policy: policy, root: operation.root,
                        lockTimeout: operation.options.lockTimeout))
            } catch let error as any GranaryError {
                entries[index].ok = false
                entries[index].error = Failure(error)
            } catch {
                entries[index].ok = false
                entries[index].error = Failure(UnexpectedError(description: "\(user): \(error)"))
            }
        }
        return entries
    }

    /// The worker's command line: the parent's words, with `--worker-user=ID` (and a
    /// `--worker-failed-mirror=…` for each mirror in `failed`) right after the command's name
    /// (before any `--`, so that they are read as options).
    static func arguments(_ words: [String], for user: UserID, failed: [FailedMirror] = []) -> [String] {
        var words = words
        let command = words.firstIndex(of: BackupCommand.configuration.commandName ?? "backup") ?? -1
        if command < 0 { words.insert("backup", at: 0) }
        words.insert(
            contentsOf: ["--\(flag)=\(user.rawValue)"] + failed.map { "--\(failedFlag)=\($0.line)" },
            at: max(command, 0) + 1)
        return words
    }

    /// The worker's side: backs up `user` with `operation`, sends the user's entry on standard
    /// output and ends the process (`ExitCode(0)`: the parent reports the user, success or not).
    static func serve(
        _ operation: BackupOperation, user: String, failedEarlier: [String], reporter: UserWorkers.Reporter
    ) throws -> Never {
        #if TEST_HOOKS
            // GRANARY_TEST_WORKER_SAYS=ID:FILE: the worker for ID first writes FILE's bytes on its
            // standard output as they are, to show that the parent trusts no line of a worker;
            // with GRANARY_TEST_WORKER_EXIT=ID it then exits 0, those lines its only words.
            let environment = ProcessInfo.processInfo.environment
            if let says = environment["GRANARY_TEST_WORKER_SAYS"],
                let colon = says.firstIndex(of: ":"), says[..<colon] == user,
                let bytes = FileManager.default.contents(atPath: String(says[says.index(after: colon)...]))
            {
                var rest = [UInt8](bytes)[...]
                while !rest.isEmpty {
                    let n = rest.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    rest = rest.dropFirst(n)
                }
                if environment["GRANARY_TEST_WORKER_EXIT"] == user { exit(0) }
            }
            // GRANARY_TEST_WORKER_TRAP=ID: the worker for ID traps (a Swift runtime check), to show
            // that a run over several users outlives it.
            if environment["GRANARY_TEST_WORKER_TRAP"] == user {
                fatalError("trap asked for by GRANARY_TEST_WORKER_TRAP")
            }
        #endif
        let entry: BackupResult.User
        do {
            let id = try UserID(user)
            let earlier = failedEarlier.compactMap(FailedMirror.init(line:))
            // With a local repository the mirrors are the parent's to send (beside the next
            // workers): the published archive is handed over. A remote repository's archive is
            // here only as this worker's temporary file, which the next worker's clean-up of dead
            // processes' temporaries would remove: this worker sends it itself.
            let handOver = operation.repository.isLocal
            guard
                let outcome = BackupRun.run(
                    operation, users: [id], jobs: 1, failedMirrors: earlier, sendMirrors: !handOver
                ).first
            else {
                throw UnexpectedError(description: "\(user): no outcome")
            }
            if handOver, let file = outcome.result?.mirrorFile, let entry = outcome.result?.entry {
                reporter.handOver(
                    MirrorHandOver(archive: entry.name.fileName, path: file.path, removeAfter: file.removeAfter))
            }
            // The mirrors that failed here (not a name taken on the mirror, which is this archive's
            // alone), for the workers started next.
            for upload in outcome.result?.mirrors ?? [] {
                guard let error = upload.error, !(error is MirrorError), !(error is MirrorSkipped), !(error is ChainGap)
                else { continue }
                reporter.failed(
                    FailedMirror(location: upload.location, code: error.exitStatus.rawValue, reason: error.description))
            }
            entry = BackupResult.User(outcome)
        } catch let error as any GranaryError {
            entry = BackupResult.User(id: user, failure: Failure(error))
        }
        // Strings exactly as they are (names that are not UTF-8 included): the parent's own
        // encoding makes the document.
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        let json = (try? encoder.encode(entry)).map { String(decoding: $0, as: UTF8.self) }
        reporter.finish(json ?? "")
        throw ExitCode(0)
    }
}
