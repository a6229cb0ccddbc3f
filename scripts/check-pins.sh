#!/usr/bin/env bash
# make check-pins: the dependency graph SwiftPM resolves is exactly the graph Package.swift pins
# (scripts/check-pins.py), and the check itself still catches each way they can differ.
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$SWIFT" package show-dependencies --format json > "$work/graph.json"
python3 scripts/check-pins.py Package.swift "$work/graph.json"

# The check must fail on each of these; a check that cannot fail checks nothing.
expect_refused() {
    local what=$1 manifest=$2 graph=$3
    if python3 scripts/check-pins.py "$manifest" "$graph" 2> "$work/why"; then
        echo "check-pins accepted $what" >&2
        exit 1
    fi
    grep -q . "$work/why" || { echo "check-pins refused $what without saying why" >&2; exit 1; }
}
sed 's/exact: "\([^"]*\)"/from: "\1"/' Package.swift > "$work/range.swift"
expect_refused "a from: range" "$work/range.swift" "$work/graph.json"
grep -v 'TOMLKit", exact' Package.swift > "$work/unpinned.swift"
expect_refused "a package of the graph left unpinned" "$work/unpinned.swift" "$work/graph.json"
python3 - "$work/graph.json" > "$work/drifted.json" <<'EOF'
import json, sys
graph = json.load(open(sys.argv[1]))
def drift(node):
    for child in node["dependencies"]:
        child["version"] = child["version"] + ".1"
        drift(child)
drift(graph)
json.dump(graph, sys.stdout)
EOF
expect_refused "a graph resolved to other versions" Package.swift "$work/drifted.json"
echo "check-pins refuses a range, a package of the graph left unpinned and a drifted graph"
