#!/usr/bin/env python3
"""Fixes swift-argument-parser's generated completion scripts where they fall short.

Candidates for USER and ARCHIVE come from folder names that end users influence (an app
names a user's folder after the e-mail address they registered, and a quoted local part may
hold $, (, ), backquotes, quotes and spaces). They must reach the command line as data:
  - bash: the generator passes them through `compgen -W "$(granary ---completion ...)"`, and
    compgen expands each word: `$(cmd)` and backquotes run, `$HOME` expands, quotes vanish.
    Here they are read line by line into COMPREPLY instead, untouched (granary has already
    filtered them by the word typed so far, dequoted), and readline's filename quoting
    (`complete -o filenames`) quotes them as they are inserted.
  - zsh: `_describe` splits a candidate at its first colon; granary escapes `\\` and `:` in
    what it prints for zsh (SAP_SHELL=zsh), see Completions.deliverable.
  - fish takes command substitution output as literal candidates and quotes them itself.
Also: `granary help <TAB>` offers the commands, and fish 3 (which refuses `commandline -tC`
outside an interactive edit) gets the token's length instead, the same number.
Usage: patch-completions.py bash|zsh|fish < generated > patched
"""
import re
import sys

shell = sys.argv[1]
text = sys.stdin.read()

commands = re.search(r"^    ([a-z|]+)\|help\)$", text, re.M) if shell == "bash" else None


def require(old, new):
    global text
    if old not in text:
        sys.exit(f"patch-completions.py: the generated {shell} script has changed; update the patch ({old[:60]!r})")
    text = text.replace(old, new)


if shell == "bash":
    names = commands.group(1).replace("|", " ")
    before = text
    text = re.sub(r'__granary_add_completions -W "\$\(__granary_custom_complete (.*?)\)"\n',
                  r"__granary_add_custom_completions \1\n", text)
    if text == before:
        sys.exit("patch-completions.py: no custom completion found in the bash script")
    require("\n_granary() {\n", '''
# Candidates as data: one per line, never expanded or split (see scripts/patch-completions.py).
__granary_add_custom_completions() {
    local completion
    while IFS='' read -r completion; do
        # No candidate is no line: an empty one would be inserted (with -o filenames, as "zz/").
        [[ -n "${completion}" ]] && COMPREPLY+=("${completion}")
    done < <(__granary_custom_complete "${@}")
}

_granary() {
''')
    require('''_granary_help() {
    repeating_flags=()
    non_repeating_flags=(--version)
    repeating_options=()
    non_repeating_options=()
    __granary_offer_flags_options -1
}''', f'''_granary_help() {{
    repeating_flags=()
    non_repeating_flags=(--version)
    repeating_options=()
    non_repeating_options=()
    __granary_offer_flags_options -1
    [[ "${{cur}}" = -* ]] || COMPREPLY+=($(compgen -W '{names}' -- "${{cur}}"))
}}''')
elif shell == "zsh":
    names = re.search(r"^        (init\|users\|[a-z|]+)\|help\)$", text, re.M).group(1).replace("|", " ")
    require("'*:subcommands:'", f"'1:command:({names})'")
elif shell == "fish":
    names = re.search(r"^        case 'config'", text, re.M) and " ".join(
        re.findall(r"-fa '([a-z]+)' -d", text))
    require("(__granary_tokens -tC)", "(string length -- (commandline -ct))")
    text = text.rstrip("\n") + "\n" + (
        "complete -c 'granary' -n '__granary_should_offer_completions_for_positional \"granary help\" -eq 1' "
        f"-fa '{' '.join(n for n in names.split() if n != 'help')}'\n")
else:
    sys.exit("usage: patch-completions.py bash|zsh|fish")
sys.stdout.write(text)
