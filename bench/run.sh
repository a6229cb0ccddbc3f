#!/usr/bin/env bash
# make bench: granary backup vs `sqlite3 .backup && tar --zstd` vs `zstd -T0 -3` (floor), with a writer running.
# BENCH_MB=64 make bench for a quick run (default 1024).
set -euo pipefail
MB=${BENCH_MB:-1024}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench.XXXXXX); trap 'kill $writer 2>/dev/null || true; rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
now() { date +%s.%N; }
rate() { # commits/s and worst latency (ms) from a writer log over its last N lines
  awk -v t="$2" '{n++; if ($2>m) m=$2} END {printf "%.0f commits/s, worst %.1f ms", n/t, m/1000}' "$1"; }
# Every timed step starts with nothing dirty in the page cache: otherwise the kernel's writeback
# of the generated store (or of the step before) lands on whichever contender runs next.
sync
"$BIN/granary-sample" write "$W/root/u/live.db" --interval-ms 1 > "$W/idle.log" & writer=$!
sleep 5; kill $writer; wait $writer 2>/dev/null || true
echo "writer alone: $(rate "$W/idle.log" 5)"
sync
"$BIN/granary-sample" write "$W/root/u/live.db" --interval-ms 1 > "$W/busy.log" & writer=$!
sleep 1; : > "$W/busy.log"
t0=$(now); /usr/bin/time -f "%M" -o "$W/mem" "$BIN/granary" backup u --root "$W/root" --repo "$W/repo"; t1=$(now)
g=$(echo "$t1 - $t0" | bc); gs=$(stat -c %s "$W"/repo/u/*.tar.zst)
echo "writer during granary: $(rate "$W/busy.log" "$g")"
kill $writer; wait $writer 2>/dev/null || true
sync
t0=$(now); sqlite3 "$W/root/u/live.db" ".backup $W/x.db" && tar --zstd -cf "$W/x.tar.zst" -C "$W" x.db; t1=$(now)
p=$(echo "$t1 - $t0" | bc); ps_=$(stat -c %s "$W/x.tar.zst")
sync
t0=$(now); zstd -q -T0 -3 -c "$W/root/u/live.db" > "$W/raw.zst"; t1=$(now)
f=$(echo "$t1 - $t0" | bc); fs=$(stat -c %s "$W/raw.zst")
echo "store: ${MB} MiB"
printf "granary backup      %6.2f s  %12d bytes  peak RSS %s KiB\n" "$g" "$gs" "$(cat "$W/mem")"
printf "sqlite3+tar --zstd  %6.2f s  %12d bytes\n" "$p" "$ps_"
printf "zstd -T0 -3 (floor) %6.2f s  %12d bytes\n" "$f" "$fs"
echo "ratios: time $(echo "scale=2; $g / $p" | bc)x, size $(echo "scale=3; $gs / $ps_" | bc)x"
