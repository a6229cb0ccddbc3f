#!/usr/bin/env bash
# make bench (part 3): granary verify against the pipeline a user would otherwise write on the
# same archive: `zstd -d | tar -x` with SHA-256 of each file (sha256sum), then
# `sqlite3 x.db "pragma integrity_check"`. BENCH_MB=64 for a quick run (default 1024).
set -euo pipefail
MB=${BENCH_MB:-1024}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-verify.XXXXXX); trap 'rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
now() { date +%s.%N; }
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
"$BIN/granary" init "$W/repo" > /dev/null
"$BIN/granary" backup u --root "$W/root" --repo "$W/repo"
archive=$(ls "$W"/repo/u/*.tar.zst); size=$(stat -c %s "$archive")
rm -rf "$W/root"; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
cat "$archive" > /dev/null   # both runs start from a warm page cache

t0=$(now); /usr/bin/time -f "%M" -o "$W/mem" "$BIN/granary" verify "$archive" --repo "$W/repo"; t1=$(now)
g=$(echo "$t1 - $t0" | bc)
t0=$(now)
mkdir "$W/x"; zstd -q -d -c "$archive" | tar -x -C "$W/x"
(cd "$W/x" && find . -type f -print0 | xargs -0 sha256sum > /dev/null)
[ "$(sqlite3 "$W/x/stores/live.db" "pragma integrity_check")" = ok ]
t1=$(now); p=$(echo "$t1 - $t0" | bc)
echo "archive: $(( size / 1048576 )) MiB compressed, store ${MB} MiB"
printf "granary verify                          %6.2f s  peak RSS %s KiB  (%.0f MiB/s of store)\n" "$g" "$(cat "$W/mem")" "$(echo "$MB / $g" | bc -l)"
printf "zstd -d | tar -x, sha256sum, integrity  %6.2f s\n" "$p"
echo "ratio: verify time $(echo "scale=2; $g / $p" | bc)x the pipeline (target <= 1.0x)"
