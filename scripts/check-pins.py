#!/usr/bin/env python3
"""make check-pins: the resolved dependency graph is exactly what Package.swift pins.

Every package in `swift package show-dependencies --format json` (transitive ones too) must be
named in Package.swift with `exact: "VERSION"` at the version it resolved to, and Package.swift
must pin nothing the graph does not hold. A `from:`, `upToNextMinor`, range, `branch:` or
`revision:` requirement is refused: Package.resolved is not committed (the package mirror's
commit ids are not upstream's), so the pins are all that makes a build reproducible.

Usage: check-pins.py MANIFEST GRAPH_JSON   (GRAPH_JSON: the output of show-dependencies)
Exit 0 when they agree; 1 with one line per difference.
"""

import json
import re
import sys

PACKAGE_CALL = re.compile(r"\.package\s*\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.S)
URL = re.compile(r'url:\s*"(?P<url>[^"]+)"')
EXACT = re.compile(r'^\s*exact:\s*"(?P<version>[^"]+)"\s*$')


def identity(url: str) -> str:
    """SwiftPM's identity of a package URL: its last path component, lower-cased, without .git."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    if name.endswith(".git"):
        name = name[: -len(".git")]
    return name.lower()


def strip_comments(text: str) -> str:
    """The text without // and /* */ comments (a // inside a string, as in a URL, stays)."""
    out: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        else:
            out.append(char)
        i += 1
    return "".join(out)


def pins(manifest_text: str) -> tuple[dict[str, str], list[str]]:
    """The exact pins of the manifest by identity, and a problem per requirement that is not one."""
    found: dict[str, str] = {}
    problems: list[str] = []
    for call in PACKAGE_CALL.finditer(strip_comments(manifest_text)):
        args = call.group("args")
        url = URL.search(args)
        if url is None:
            problems.append(f"Package.swift: .package({' '.join(args.split())}) has no url: pin a URL with exact:")
            continue
        name = identity(url.group("url"))
        requirement = args[url.end():].strip().lstrip(",")
        exact = EXACT.match(requirement.rstrip().rstrip(","))
        if exact is None:
            problems.append(
                f"Package.swift: {name} is required as `{' '.join(requirement.split())}`, not pinned: "
                f'write exact: "VERSION"')
            continue
        if name in found:
            problems.append(f"Package.swift: {name} is named twice: keep one exact pin")
        found[name] = exact.group("version")
    return found, problems


def graph(document: dict) -> dict[str, set[str]]:
    """Every package under the root of show-dependencies' JSON, by identity, with its versions."""
    resolved: dict[str, set[str]] = {}

    def walk(node: dict) -> None:
        for child in node.get("dependencies", []):
            resolved.setdefault(child["identity"].lower(), set()).add(child["version"])
            walk(child)

    walk(document)
    return resolved


def compare(manifest_text: str, document: dict) -> list[str]:
    pinned, problems = pins(manifest_text)
    resolved = graph(document)
    for name in sorted(resolved):
        versions = resolved[name]
        if name not in pinned:
            problems.append(
                f"{name} {', '.join(sorted(versions))} is in the resolved graph but not pinned in Package.swift: "
                f'add .package(url: ..., exact: "{sorted(versions)[0]}")')
        elif versions != {pinned[name]}:
            problems.append(
                f"{name} resolved to {', '.join(sorted(versions))} but Package.swift pins {pinned[name]}: "
                "run swift package resolve, or correct the pin")
    for name in sorted(set(pinned) - set(resolved)):
        problems.append(f"{name} is pinned in Package.swift but not in the resolved graph: remove the pin")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: check-pins.py MANIFEST GRAPH_JSON", file=sys.stderr)
        return 64
    with open(argv[1], encoding="utf-8") as manifest, open(argv[2], encoding="utf-8") as document:
        problems = compare(manifest.read(), json.load(document))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    pinned, _ = pins(open(argv[1], encoding="utf-8").read())
    print(f"{len(pinned)} packages pinned exactly, as resolved: "
          + ", ".join(f"{name} {version}" for name, version in sorted(pinned.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
