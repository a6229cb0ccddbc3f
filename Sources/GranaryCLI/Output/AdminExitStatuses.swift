import GranaryKit

// Sources/GranaryKit/Catalogue/ArchiveLocator.swift
extension ArchiveOfAnotherUser: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? {
        "granary restore \(ShellWord.quote(owner)) \(ShellWord.quote(name))"
    }
}
