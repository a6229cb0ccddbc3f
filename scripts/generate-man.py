#!/usr/bin/env python3
"""Post-processes swift-argument-parser's generated mdoc pages into man/.

The generator gives NAME, SYNOPSIS, DESCRIPTION and options from the command declarations;
we drop its page for the built-in `help`, replace its generic EXIT STATUS with granary's
codes and add FILES, ENVIRONMENT and EXAMPLES from man/src/granary.1.sections.
Usage: generate-man.py GENERATED_DIR MAN_DIR
"""
import os
import re
import sys

generated, man = sys.argv[1], sys.argv[2]
os.makedirs(man, exist_ok=True)
sections = open(os.path.join(man, "src", "granary.1.sections")).read()
for name in sorted(os.listdir(generated)):
    if not name.endswith(".1") or name == "granary.help.1":
        continue
    text = open(os.path.join(generated, name)).read()
    # References to the help page we do not ship; keep the commas of the list right.
    text = re.sub(r"\.Xr granary\.help 1 ,?\n", "", text)
    text = re.sub(r" ,\n\.Sh AUTHORS", "\n.Sh AUTHORS", text)
    if name == "granary.1":
        text = re.sub(r'\.Sh "EXIT STATUS"\n\.Ex -std\n', sections, text)
    else:
        text = text.replace(".Ex -std\n", "The exit codes are listed in\n.Xr granary 1 .\n")
    # Every page points at the configuration file's page, last (sections sort after names).
    text = re.sub(r'(\.Sh "SEE ALSO"\n(?:\.Xr [^\n]*\n)*?\.Xr [^,\n]* 1)\n', r"\1 ,\n.Xr granary.toml 5\n", text)
    if '.Sh "SEE ALSO"' not in text:
        text = text.replace(".Sh AUTHORS", '.Sh "SEE ALSO"\n.Xr granary 1 ,\n.Xr granary.toml 5\n.Sh AUTHORS')
    # The generator leaves an empty paragraph where an option's value list would go.
    text = re.sub(r"\n\.Pp\n(?=\.It )", "\n", text)
    # mdoc wants each sentence of running text on its own line.
    text = "\n".join(line if line.startswith(".") else re.sub(r"(?<=[A-Za-z0-9)][.!?]) +(?=[A-Z(])", "\n", line)
                      for line in text.split("\n"))
    with open(os.path.join(man, name), "w") as out:
        out.write(text)
