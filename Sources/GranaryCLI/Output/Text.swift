/// Lines of text output, built by a command's result and printed by `Console`.
///
/// A line is written with string interpolation; every piece of it (literal or interpolated)
/// is escaped by `TerminalText` when printed, so no name can reach the terminal raw.
///
/// ```swift
/// var text = TextOutput()
/// text.line("\(bold: user.id)  \(count) stores")
/// text.line("  \(store.name, width: 24) \(mode)")
/// ```
struct TextOutput {
    var lines: [TextLine] = []

    mutating func line(_ line: TextLine) { lines.append(line) }
}

/// How a piece of a line is shown on a colour terminal.
enum TextStyle: Sendable {
    case plain, bold, dim
}

/// One piece of a line: text, its style, and the columns it is padded to.
struct TextSpan: Sendable {
    var text: String
    var style: TextStyle = .plain
    var width: Int?
}

/// One line of output.
struct TextLine: ExpressibleByStringInterpolation, Sendable {
    var spans: [TextSpan]

    init(spans: [TextSpan]) { self.spans = spans }
    init(stringLiteral value: String) { spans = [TextSpan(text: value)] }
    init(stringInterpolation: StringInterpolation) { spans = stringInterpolation.spans }

    struct StringInterpolation: StringInterpolationProtocol {
        var spans: [TextSpan] = []

        init(literalCapacity: Int, interpolationCount: Int) {}

        mutating func appendLiteral(_ literal: String) {
            if !literal.isEmpty { spans.append(TextSpan(text: literal)) }
        }

        mutating func appendInterpolation(_ value: some CustomStringConvertible) {
            spans.append(TextSpan(text: value.description))
        }

        /// `value`, padded with spaces to `width` columns.
        mutating func appendInterpolation(_ value: some CustomStringConvertible, width: Int) {
            spans.append(TextSpan(text: value.description, width: width))
        }

        mutating func appendInterpolation(bold value: some CustomStringConvertible, width: Int? = nil) {
            spans.append(TextSpan(text: value.description, style: .bold, width: width))
        }

        mutating func appendInterpolation(dim value: some CustomStringConvertible, width: Int? = nil) {
            spans.append(TextSpan(text: value.description, style: .dim, width: width))
        }

        /// Another line's pieces, inline.
        mutating func appendInterpolation(_ line: TextLine) {
            spans += line.spans
        }
    }

    /// The line as printed: every piece escaped, padded, and styled when `color` is on.
    func rendered(color: Bool) -> String {
        var pieces: [(text: String, style: TextStyle)] = spans.map { span in
            var text = TerminalText.escape(span.text)
            if let width = span.width, text.count < width { text += String(repeating: " ", count: width - text.count) }
            return (text, span.style)
        }
        // No line ends in a space: not the padding of its last column, nor a literal's last space.
        while let last = pieces.last {
            var text = Substring(last.text)
            while text.last == " " { text = text.dropLast() }
            if text.isEmpty {
                pieces.removeLast()
                continue
            }
            pieces[pieces.count - 1].text = String(text)
            break
        }
        var out = ""
        for (text, style) in pieces {
            switch (color, style) {
            case (true, .bold): out += "\u{1B}[1m" + text + "\u{1B}[0m"
            case (true, .dim): out += "\u{1B}[2m" + text + "\u{1B}[0m"
            default: out += text
            }
        }
        return out
    }

    static func + (lhs: TextLine, rhs: TextLine) -> TextLine { TextLine(spans: lhs.spans + rhs.spans) }
    static func += (lhs: inout TextLine, rhs: TextLine) { lhs.spans += rhs.spans }
}
