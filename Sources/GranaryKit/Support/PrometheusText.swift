/// Prometheus' text exposition format, as node_exporter's textfile collector reads it: families of
/// gauges, each value with its labels. What `check --textfile` and `follow --textfile` write.
public struct PrometheusText {
    /// The text so far.
    public private(set) var output = ""

    public init() {}

    /// A label's value escaped as the format asks (backslash, double quote, line feed).
    public static func label(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }

    /// One gauge family: its help line, its type, then a line per value (`labels` is `{…}` or
    /// empty).
    public mutating func family(_ name: String, _ help: String, _ values: [(String, String)]) {
        output += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n"
        for (labels, value) in values { output += "\(name)\(labels) \(value)\n" }
    }
}
