#!/usr/bin/env bash
# make fuzz: libFuzzer over the manifest parser, the archive verifier, the command line
# (argument vectors into granary's parser and the commands' argument checks) and names (store
# names and user ids through the folder-name mapping, the terminal's escaping, user id checks and
# JSON's exact bytes, with their round-trip properties) and paths (every path-taking option and
# configuration key: --root, --repo, --config, --mirror, restore --to, root, repo, [[mirror]] repo,
# the GRANARY_* variables' values, parsed and resolved as a command does before its work),
# FUZZ_SECONDS each. The paths target runs without LeakSanitizer's check: TOMLKit (upstream)
# never frees the 24-byte error record of each TOMLTable(string:), one per configuration file
# read, which every parse of a configuration would report; crashes and hangs still fail it.
# (Absolute corpus and findings paths: the paths target works in a scratch folder of its own.)
# Seeds: a real archive of the sample data, its manifest, and every fault scripts/tamper-archive.py
# derives from it. A crash, a leak report or a timeout fails the run and leaves the input in
# .build-fuzz/findings/ (replay: GRANARY_FUZZ_TARGET=... .build-fuzz/release/granary-fuzz FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
FUZZ=.build-fuzz/release/granary-fuzz
BIN=$(swift build --show-bin-path)
W=.build-fuzz/work; rm -rf "$W"; mkdir -p "$W" .build-fuzz/findings .build-fuzz/corpus/manifest .build-fuzz/corpus/archive .build-fuzz/corpus/commandline .build-fuzz/corpus/names .build-fuzz/corpus/paths
# Name seeds: store names and user ids, NUL between them (not UTF-8, escapes, line breaks,
# bidirectional overrides, the same name in NFC and NFD, Hangul syllable and jamo, granary's own
# escape code points).
python3 - .build-fuzz/corpus/names <<'NAMES'
import sys
seeds = [
    ["Caf\u00e9.sqlite".encode(), "Cafe\u0301.sqlite".encode()],
    [b"bad\xff\xfe.sqlite", b"\xc3(x.sqlite", b"\xf4\x8f\xbd\x81pua.sqlite", b"\xed\xa0\x80"],
    ["esc\x1b[31mred.sqlite".encode(), b"new\nline", b"cr\rlf", "next\u0085line".encode(), "evil\u202eetilqs".encode()],
    ["alice@example.com".encode(), "j\u00f6rg@example.com".encode(), "jo\u0308rg@example.com".encode(), b"-rf", b"..", b"a/b"],
    ["\u00c5".encode(), "A\u030a".encode(), "\u212b".encode(), "\uac00".encode(), "\u1100\u1161".encode(), "e\x1b\u0301".encode(), "e\x1b\u00e9".encode()],
    [b"n" * 240 + b".sqlite", b"u" * 243 + b"@example.com"],
]
for i, names in enumerate(seeds):
    open("%s/seed-%d" % (sys.argv[1], i), "wb").write(b"\0".join(names))
NAMES
# Path seeds: paths, NUL between them (~ in every place, .., empty parts, a file for a folder).
python3 - .build-fuzz/corpus/paths <<'PATHS'
import sys
seeds = [
    [b"~", b"x/~"], [b"~/gb", b"~root/gb"], [b"x/~/y", b"./~"], [b"..", b"/.."], [b"//", b""], [b".", b"-"],
    [b"a//b/../c", b"/etc/passwd"], [b"/dev/null", b"line\nbreak"], [b"s3:", b"rclone:~"], [b"~" * 300, b"d/" * 2100],
    [b"bad\xff/~", b"/proc/self/root/.."],
]
for i, paths in enumerate(seeds):
    open("%s/seed-%d" % (sys.argv[1], i), "wb").write(b"\0".join(paths))
PATHS
# Command-line seeds: real command lines, NUL between the words.
i=0
while IFS= read -r line; do
  i=$((i + 1)); printf '%s' "$line" | tr ' ' '\0' > ".build-fuzz/corpus/commandline/seed-$i"
done <<'SEEDS'
backup --all --root /nonexistent --repo /nonexistent --level 19 --jobs 2 --lock-timeout 1m30s
backup dave@example.com --compression gzip --level 10 --json -q
restore alice@example.com --dry-run --owner-timeout 0.5 --method swap --at 20261122T101500Z
prune --all --keep-last -1 --keep-within 1d12h --dry-run -v
check --max-age 26h --json
verify --user bob@example.com --latest --check quick
delete --dry-run dave@example.com/2026 --force
inspect dave@example.com/20261122T101500Z.tar.zst
help backup
bakup --all
--root /r --repo /p users -q -v
config --config /nonexistent.toml --json
init /nonexistent/repo --json
SEEDS
"$BIN/granary-sample" "$W/root" >/dev/null
"$BIN/granary" init "$W/repo" >/dev/null
"$BIN/granary" backup --root "$W/root" --repo "$W/repo" --compression none dave@example.com bob@example.com
for good in "$W"/repo/*/*.tar; do
  user=$(basename "$(dirname "$good")")
  cp "$good" ".build-fuzz/corpus/archive/good-$user.tar"
  tar -xOf "$good" MANIFEST.json > ".build-fuzz/corpus/manifest/$user.json"
  for fault in flip-store lie-sha drop-member extra-member dotdot symlink hardlink fifo duplicate manifest-not-json manifest-newer manifest-not-first; do
    python3 scripts/tamper-archive.py "$good" ".build-fuzz/corpus/archive/$fault-$user.tar" "$fault"
  done
done
for target in manifest archive commandline names paths; do
  echo "== fuzzing the $target for ${SECONDS_EACH}s"
  ASAN_OPTIONS=$(case $target in paths) echo detect_leaks=0;; *) echo "${ASAN_OPTIONS:-}";; esac) \
  GRANARY_FUZZ_TARGET=$target "$FUZZ" -max_total_time="$SECONDS_EACH" -max_len=$(case $target in manifest) echo 65536;; commandline|names|paths) echo 4096;; *) echo 262144;; esac) \
    -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 -artifact_prefix="$PWD/.build-fuzz/findings/$target-" \
    "$PWD/.build-fuzz/corpus/$target" 2> "$W/$target.log" || { tail -40 "$W/$target.log"; echo "fuzz: $target FAILED (input in .build-fuzz/findings/)"; exit 1; }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$W/$target.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$W/$target.log" | tail -1)
  echo "   $runs inputs, $cov, no crash"
done
