#!/usr/bin/env python3
"""Post-processes swift-argument-parser's generated mdoc pages into man/.

The generator gives NAME, SYNOPSIS, DESCRIPTION and the options from the command
declarations, one page per command named granary.COMMAND.1. We ship them as
granary-COMMAND.1 (git's and restic's convention, so `man granary-backup` and man-db's
`man granary backup` find them), drop the page of the built-in `help`, and add:
  - to every page: its --json document (from docs/json/COMMAND.schema.json), NOTES from
    man/src/granary-COMMAND.notes when there is one, and SEE ALSO;
  - to granary(1): the description from man/src/granary.1.description, the commands with
    their one-line summaries, the global options under OPTIONS, and EXIT STATUS,
    ENVIRONMENT, FILES and EXAMPLES from man/src/granary.1.sections.
groff 1.22's mdoc heads a page "BSD General Commands Manual"; an empty system name
(`.ds doc-volume-operating-system`) makes it "General Commands Manual".
Usage: generate-man.py GENERATED_DIR MAN_DIR
"""
import json
import os
import re
import sys
import textwrap

generated, man = sys.argv[1], sys.argv[2]
package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
source = os.path.join(man, "src")


def read(path):
    with open(path) as f:
        return f.read()


def shape(schema, node, depth=0):
    """A JSON schema as the document's outline: {format, users: [{id, ok, ...}]}."""
    if "anyOf" in node:
        node = next(n for n in node["anyOf"] if n.get("type") != "null")
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    if node.get("type") == "object" and "properties" in node:
        keys = ["format"] if depth == 0 else []
        keys += [k for k in node["properties"] if k != "format"]
        parts = []
        for key in keys:
            inner = shape(schema, node["properties"][key], depth + 1)
            parts.append(key + (": " + inner if inner else ""))
        return "{" + ", ".join(parts) + "}"
    if node.get("type") == "array":
        inner = shape(schema, node["items"], depth + 1)
        return "[" + inner + "]" if inner else ""
    return ""


def json_paragraph(command):
    path = os.path.join(package, "docs", "json", command + ".schema.json")
    if not os.path.exists(path):
        return ""
    schema = json.load(open(path))
    outline = textwrap.fill(shape(schema, schema), 72, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
    return (".Pp\nWith\n.Fl -json :\n.Bd -literal -offset indent\n" + outline.replace("\\", "\\e") + "\n.Ed\n"
            + schema.get("description", "") + "\n")


def mdoc_sentences(text):
    # mdoc wants each sentence of running text on its own line.
    return "\n".join(line if line.startswith(".") else re.sub(r"(?<=[A-Za-z0-9)][.!?]) +(?=[A-Z(])", "\n", line)
                     for line in text.split("\n"))


pages = {}
for name in sorted(os.listdir(generated)):
    if name.endswith(".1") and name != "granary.help.1":
        pages[name] = read(os.path.join(generated, name))

commands = [name[len("granary."):-2] for name in pages if name != "granary.1"]
summaries = {}
for name, text in pages.items():
    match = re.search(r'^\.Nd "?(.*?)"?$', text, re.M)
    summaries[name] = match.group(1) if match else ""

for old in os.listdir(man):
    if re.fullmatch(r"granary([.-][a-z]+)?\.1", old):
        os.remove(os.path.join(man, old))

# Section 1 pages by name (mandoc's order): the commands and the owners' checker.
see_also_commands = "".join(f".Xr {page} 1 ,\n" for page in sorted([f"granary-{c}" for c in commands] + ["granary-reopen-check"]))
for name, text in pages.items():
    command = None if name == "granary.1" else name[len("granary."):-2]
    out = "granary.1" if command is None else f"granary-{command}.1"
    text = re.sub(r"^\.Dt GRANARY(\.[A-Z]+)? 1$",
                  lambda m: ".\\\" An empty system name: groff's header says \"General Commands Manual\", not \"BSD ...\".\n"
                  ".ds doc-volume-operating-system\n.Dt " + out[:-2].upper() + " 1", text, flags=re.M)
    text = text.replace("\n.Os\n", "\n.Os granary\n")
    text = re.sub(r"\.Xr granary\.help 1 ,?\n", "", text)
    text = re.sub(r"\.Xr granary\.([a-z]+) 1", r".Xr granary-\1 1", text)
    # The generated SEE ALSO and AUTHORS go; ours follow.
    text = re.sub(r'\.Sh "SEE ALSO"\n(?:\.Xr [^\n]*\n)*', "", text)
    if command is None:
        description = read(os.path.join(source, "granary.1.description"))
        listing = ".Sh COMMANDS\n.Bl -tag -width Ds\n" + "".join(
            f".It Cm {c}\n{summaries['granary.' + c + '.1']}\nSee\n.Xr granary-{c} 1 .\n" for c in commands) + ".El\n"
        # The generated DESCRIPTION is the exit-code sentence and the option list: the option
        # list becomes OPTIONS, the exit codes have their own section.
        text = re.sub(r"\.Sh DESCRIPTION\n.*?\n(\.Bl -tag)", lambda m: ".Sh DESCRIPTION\n" + description + listing
                      + ".Sh OPTIONS\nThe global options, taken by every command:\n" + m.group(1), text, count=1, flags=re.S)
        text = re.sub(r'\.Sh "EXIT STATUS"\n\.Ex -std\n', read(os.path.join(source, "granary.1.sections")), text)
        see_also = see_also_commands + ".Xr granary.toml 5 ,\n.Xr granary-reopen 7\n"
    else:
        text = text.replace(".Ex -std\n", "The exit codes are listed in\n.Xr granary 1 .\n")
        # The command's --json document closes its DESCRIPTION, before the option list.
        text = re.sub(r"(\.Sh DESCRIPTION\n(?:.*?\n)??)(\.Bl -tag)", lambda m: m.group(1) + json_paragraph(command).replace(".Pp\n", "", m.group(1) == ".Sh DESCRIPTION\n") + m.group(2),
                      text, count=1, flags=re.S)
        see_also = ".Xr granary 1 ,\n.Xr granary.toml 5" + (" ,\n.Xr granary-reopen 7\n" if command in ("restore", "reset") else "\n")
    notes = os.path.join(source, f"granary-{command}.notes")
    if os.path.exists(notes):
        text = text.replace(".Sh AUTHORS", ".Sh NOTES\n" + read(notes) + ".Sh AUTHORS")
    text = text.replace(".Sh AUTHORS", '.Sh "SEE ALSO"\n' + see_also + ".Sh AUTHORS")
    # NAME names the page as its file does (granary-backup, as git-commit(1) does) and the summary
    # goes unquoted: man-db's whatis parser (lexgrog) reads neither a name with a space nor the
    # quotes, so apropos and whatis did not find the pages. SYNOPSIS keeps the words typed.
    if command is not None:
        text = text.replace(f'.Nm "granary {command}"\n', f".Nm granary-{command}\n", 1)
        text = re.sub(r"^\.Nm$", f'.Nm "granary {command}"', text, flags=re.M)
    text = re.sub(r'^\.Nd "(.*)"$', r".Nd \1", text, count=1, flags=re.M)
    # The generator leaves an empty paragraph where an option's value list would go.
    text = re.sub(r"\n\.Pp\n(?=\.It )", "\n", text)
    with open(os.path.join(man, out), "w") as f:
        f.write(mdoc_sentences(text))
