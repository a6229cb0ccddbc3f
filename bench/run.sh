#!/usr/bin/env bash
# make bench: granary backup vs `sqlite3 .backup && tar --zstd` vs `zstd -T0 -3` (floor), with a writer running.
# BENCH_MB=64 make bench for a quick run (default 1024); BENCH_RUNS=3 rounds (the median is reported).
set -euo pipefail
MB=${BENCH_MB:-1024}
RUNS=${BENCH_RUNS:-3}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
writer=
W=$(mktemp -d /var/tmp/granary-bench.XXXXXX); trap '[ -n "$writer" ] && kill $writer 2>/dev/null; rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
now() { date +%s.%N; }
rate() { # commits/s and worst latency (ms) from a writer log over T seconds; with a start time
  # (s since the epoch), also when the worst commit began relative to it (column 3: its end).
  awk -v t="$2" -v s="${3:-}" '{n++; if ($2>m) {m=$2; at=$3 - $2/1e6}} END {printf "%.0f commits/s, worst %.1f ms", n/t, m/1000; if (s != "") printf " (began at %+.2f s)", at - s}' "$1"; }
# The CPU line of /proc/stat, for the share of time the hypervisor gave our CPUs to others
# (steal): on a busy host it alone moves a round by 10% or more.
cpu() { head -1 /proc/stat; }
steal() { echo "$1
$2" | awk '{t=0; for (i=2; i<=NF; i++) t+=$i; if (NR==1) {a=t; s=$9} else printf "%.0f%%", 100*($9-s)/(t-a)}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Every timed step starts with nothing dirty in the page cache: otherwise the kernel's writeback
# of the generated store (or of the step before) lands on whichever contender runs next.
# Nor right after the step before's files were deleted: on this VM (ext4 mounted `discard` on a
# virtual disk) deleting a written 1.4 GB file slows the disk for several seconds afterwards, past
# what the guest can see (no I/O in flight, no discard pending): a writer's fsync waited 140–165 ms
# then, and at most 10–19 ms when the next round started 10 s or 20 s after the delete (measured
# 2026-11-23). `settle` syncs, waits until the disk has had no discard and no I/O in flight for a
# second (20 s at most), then BENCH_SETTLE seconds more (default 10), and reads the store once
# more: this VM pages out page cache left idle for seconds (a DAMON `pageout` scheme), and every
# contender is meant to start from the warm store the warm-up round left.
disk() { awk -v d="$(basename "$(findmnt -no SOURCE --target "$W" 2>/dev/null)")" '$3==d {print $12, $15}' /proc/diskstats; }
settle() {
  sync
  local quiet=0 last now_ i
  last=$(disk)
  # Nothing to watch when it is not a block device in /proc/diskstats (tmpfs…).
  for i in $(seq 80); do
    [ -n "$last" ] && [ "$quiet" -lt 4 ] || break
    sleep 0.25; now_=$(disk)
    if [ "$now_" = "$last" ] && [ "${now_%% *}" = 0 ]; then quiet=$((quiet + 1)); else quiet=0; fi
    last=$now_
  done
  sleep "${BENCH_SETTLE:-10}"
  cat "$W/root/u/live.db" > /dev/null
}
settle
"$BIN/granary-sample" write "$W/root/u/live.db" --interval-ms 1 > "$W/idle.log" & writer=$!
sleep 5; kill $writer; wait $writer 2>/dev/null || true; writer=
echo "writer alone: $(rate "$W/idle.log" 5)"
alone=$(wc -l < "$W/idle.log")
# The pipeline runs with the same writer load, on a twin of the store: the CLI's stepwise .backup
# restarts whenever another connection commits to its source, so on the live store it never ends.
cp "$W/root/u/live.db" "$W/twin.db"; [ -f "$W/root/u/live.db-wal" ] && cp "$W/root/u/live.db-wal" "$W/twin.db-wal"
echo "store: ${MB} MiB; $RUNS rounds of granary then the pipeline, each after a settle (see settle), each with a writer"
echo "committing every ms (on the store for granary, on a copy of it for the pipeline: sqlite3's .backup"
echo "restarts on every commit to its source), after one warm-up round that is not timed; the"
echo "median round is what counts."
# One warm-up round, not timed: the first touch of memory in a fresh VM is slow (a 1 GiB snapshot
# took 2.2 s instead of 0.9) for whichever runs first, granary or the pipeline.
"$BIN/granary" init "$W/warm" > /dev/null
"$BIN/granary" backup u --root "$W/root" --repo "$W/warm" > /dev/null
sqlite3 "$W/root/u/live.db" ".backup $W/x.db" && tar --zstd -cf "$W/x.tar.zst" -C "$W" x.db
rm -rf "$W/warm" "$W/x.db" "$W/x.tar.zst"
for round in $(seq "$RUNS"); do
  rm -rf "$W/repo" "$W/x.db" "$W/x.tar.zst"
  "$BIN/granary" init "$W/repo" > /dev/null
  settle
  # The writer's rate alone is taken right before each backup, from the same writer process
  # (its rate drifts by 10% or more between minutes on this VM): the share is per round.
  "$BIN/granary-sample" write "$W/root/u/live.db" --interval-ms 1 >> "$W/busy.log" & writer=$!
  sleep 1; : > "$W/busy.log"; sleep 3; before=$(wc -l < "$W/busy.log")
  # Its worst commit alone in those 3 s: the VM stalls a lone commit now and then with no backup at all.
  alone_worst=$(awk '{if ($2>m) m=$2} END {printf "%.1f", m/1000}' "$W/busy.log"); : > "$W/busy.log"
  c0=$(cpu); t0=$(now); /usr/bin/time -f "%M" -o "$W/mem" "$BIN/granary" backup u --root "$W/root" --repo "$W/repo" --json > "$W/backup.json"; t1=$(now)
  stolen=$(steal "$c0" "$(cpu)")
  g=$(echo "$t1 - $t0" | bc); gs=$(stat -c %s "$W"/repo/u/*.tar.zst)
  load=$(rate "$W/busy.log" "$g" "$t0")
  # The writer's share of its rate alone, and its worst commit in ms, for the targets below.
  awk -v t="$g" -v a="$before" '{n++; if ($2>m) m=$2} END {printf "%.3f %.1f\n", (n/t)/(a/3), m/1000}' "$W/busy.log" >> "$W/writer.all"
  share_r=$(tail -1 "$W/writer.all" | awk '{printf "%.0f%%", $1 * 100}')
  kill $writer; wait $writer 2>/dev/null || true; writer=
  stages=$(python3 -c 'import json,sys; u=json.load(open(sys.argv[1]))["users"][0]; s=u["stages"]; print("snapshot %.2f s, check and hash %.2f s, pack %.2f s, sync %.2f s, CPU %s" % (s["snapshot"], s["checkAndHash"], s["pack"], s["sync"], u["priority"]))' "$W/backup.json")
  settle
  "$BIN/granary-sample" write "$W/twin.db" --interval-ms 1 >> "$W/twin.log" & writer=$!
  sleep 1; : > "$W/twin.log"
  t0=$(now); sqlite3 "$W/root/u/live.db" ".backup $W/x.db" && tar --zstd -cf "$W/x.tar.zst" -C "$W" x.db; t1=$(now)
  p=$(echo "$t1 - $t0" | bc); ps_=$(stat -c %s "$W/x.tar.zst")
  kill $writer; wait $writer 2>/dev/null || true; writer=
  twin=$(rate "$W/twin.log" "$p")
  # For reference, the pipeline once more with no writer anywhere (the bench's old condition).
  rm -f "$W/x.db" "$W/x.tar.zst"; settle
  t0=$(now); sqlite3 "$W/root/u/live.db" ".backup $W/x.db" && tar --zstd -cf "$W/x.tar.zst" -C "$W" x.db; t1=$(now)
  q=$(echo "$t1 - $t0" | bc); echo "$q" >> "$W/q.times"
  printf "round %d: granary %5.2f s (%s; peak RSS %s KiB; CPU stolen by the host %s; writer %s)  pipeline %5.2f s (writer on the copy %s; %.2f s with no writer)  ratio %.2fx\n" \
    "$round" "$g" "$stages" "$(cat "$W/mem")" "$stolen" "$load, $share_r of its $(echo "$before / 3" | bc) alone just before, when its worst was $alone_worst ms" "$p" "$twin" "$q" "$(echo "scale=3; $g / $p" | bc)"
  echo "$g" >> "$W/g.times"; echo "$p" >> "$W/p.times"; echo "$(cat "$W/mem")" >> "$W/mem.all"
done
rm -f "$W/x.db" "$W"/twin.db*
settle
t0=$(now); zstd -q -T0 -3 -c "$W/root/u/live.db" > "$W/raw.zst"; t1=$(now)
f=$(echo "$t1 - $t0" | bc); fs=$(stat -c %s "$W/raw.zst")
g=$(median < "$W/g.times"); p=$(median < "$W/p.times")
printf "granary backup      %6.2f s  %12d bytes  peak RSS %s KiB (largest round)\n" "$g" "$gs" "$(sort -n "$W/mem.all" | tail -1)"
printf "sqlite3+tar --zstd  %6.2f s  %12d bytes\n" "$p" "$ps_"
printf "zstd -T0 -3 (floor) %6.2f s  %12d bytes\n" "$f" "$fs"
q=$(median < "$W/q.times")
echo "ratios (medians): time $(echo "scale=2; $g / $p" | bc)x, size $(echo "scale=3; $gs / $ps_" | bc)x"
echo "  (the pipeline with no writer at all: $(printf %.2f "$q") s; granary's time is $(echo "scale=2; $g / $q" | bc)x that)"
share=$(awk '{print $1}' "$W/writer.all" | median); lowest=$(awk '{print $1}' "$W/writer.all" | sort -n | head -1); worst=$(awk '{print $2}' "$W/writer.all" | sort -n | tail -1)
rss=$(sort -n "$W/mem.all" | tail -1)
yes() { if [ "$1" = 1 ]; then echo met; else echo missed; fi; }
echo "issue 3 targets (time, size and writer share: median round; stalls and memory: worst round):"
echo "  time <= 0.6x the pipeline:        $(yes "$(echo "$g / $p <= 0.6" | bc -l)")"
echo "  size <= 1.02x the pipeline's:     $(yes "$(echo "$gs / $ps_ <= 1.02" | bc -l)")"
echo "  writer keeps >= 80% of its rate:  $(yes "$(echo "$share >= 0.8" | bc -l)") (median $(printf %.0f "$(echo "$share * 100" | bc -l)")%, lowest $(printf %.0f "$(echo "$lowest * 100" | bc -l)")%)"
echo "  no commit stalled over 100 ms:    $(yes "$(echo "$worst < 100" | bc -l)") (worst $worst ms)"
echo "  peak RSS under 64 MiB:            $(yes "$(echo "$rss < 65536" | bc -l)") ($rss KiB)"
