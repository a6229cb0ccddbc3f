import Foundation
import GranaryKit

/// Text for a restore or reset report, shared by `restore` and `reset`.
enum RestoreRendering {
    static func render(_ report: RestoreReport, verb: String, console: Console) {
        if let recovered = report.recovered { RecoverRendering.render(recovered, console: console) }
        let head = report.dryRun ? "would \(verb)" : verb == "restore" ? "restored" : "reset"
        var line = "\(head) \(console.bold(report.user))"
        if let archive = report.archive { line += " from \((archive as NSString).lastPathComponent)" }
        if let target = report.target { line += " into \(target)" }
        console.out(line)
        for store in report.stores {
            var detail = "  " + Format.pad(store.name, 24) + " " + Format.pad(store.method.rawValue, 8)
            if let pid = store.ownerPID { detail += " owner pid \(pid)" }
            if !store.openBy.isEmpty && store.ownerPID == nil { detail += " open by \(store.openBy.map(String.init).joined(separator: ", "))" }
            if report.dryRun { detail += "  \(store.staged) -> \(store.live)" }
            console.out(detail)
        }
        for store in report.stores {
            guard let window = store.paused else { continue }
            let ms = Double(window.components.attoseconds) / 1e15 + Double(window.components.seconds) * 1000
            console.info("\(store.name): owner paused for \(String(format: "%.1f", ms)) ms (from PAUSE sent to RESUMED received)")
        }
        for warning in report.warnings { console.info("granary: warning: " + warning) }
        if let safety = report.safetyArchive { console.out("replaced content kept in \(safety)") }
        if let pending = report.safetyArchivePending {
            console.info("granary: restored; \(pending)")
            console.info("Try: granary recover \(report.user) once the repository can take it")
        }
    }
}

/// Text for a recovery report.
enum RecoverRendering {
    static func render(_ report: Recovery.Report, console: Console) {
        guard report.hadJournal else { return }
        console.out("recovered an interrupted swap of \(report.user): rolled back \(report.rolledBack.count), finished \(report.rolledForward.count)")
        for name in report.rolledBack { console.out("  \(Format.pad(name, 24)) old content kept") }
        for name in report.rolledForward { console.out("  \(Format.pad(name, 24)) new content kept") }
        if let safety = report.safetyArchive { console.out("replaced content kept in \(safety)") }
        if let pending = report.safetyArchivePending { console.info("granary: \(pending)") }
        for path in report.intruders { console.info("granary: moved away \(path), which appeared while its owner was paused") }
    }
}
