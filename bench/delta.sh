#!/usr/bin/env bash
# make bench (delta): backup --delta on a generated store after 1 % of its pages were rewritten,
# against a full backup of the same store (issue 35). Prints bytes, time and peak RSS of each, and
# the restore and verify of the delta against those of the full. BENCH_MB=64 for a quick run
# (default 1024). Phase 1 detects changes by hashing every page of the snapshot.
set -euo pipefail
MB=${BENCH_MB:-1024}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-delta.XXXXXX); trap 'rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
now() { date +%s.%N; }
G=("$BIN/granary" --root "$W/root" --repo "$W/repo")
timed() { # NAME COMMAND...: seconds and peak RSS (KiB) into $W/NAME.t and $W/NAME.m
    local name=$1; shift
    sync; sleep 2
    local t0; t0=$(now)
    /usr/bin/time -f "%M" -o "$W/$name.m" "$@" > "$W/$name.out"
    echo "$(now) - $t0" | bc > "$W/$name.t"
}
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
sqlite3 "$W/root/u/live.db" "pragma wal_checkpoint(truncate)" > /dev/null
cat "$W/root/u/live.db" > /dev/null

timed full "${G[@]}" backup u --compression zstd
full=$(ls "$W"/repo/u/*.tar.zst | tail -1); fullsize=$(stat -c %s "$full")
sleep 1
timed base "${G[@]}" backup u --delta
sleep 1
pages=$(sqlite3 "$W/root/u/live.db" "pragma page_count")
rows=$(sqlite3 "$W/root/u/live.db" "select max(id) from bulk")
n=$(( pages / 100 ))
sqlite3 "$W/root/u/live.db" "update bulk set body = hex(randomblob(256)) || printf('%.*c', 500, 'b') where id in (select 1 + abs(random()) % $rows from bulk limit $n)"
timed delta "${G[@]}" backup u --delta --json
delta=$(ls "$W"/repo/u/*-delta.tar.zst | tail -1); deltasize=$(stat -c %s "$delta")
changed=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['users'][0]['delta']; print(d['kind'], d['changedPages'], d['pages'])" "$W/delta.out")

mkdir "$W/r1" "$W/r2"
timed restorefull "${G[@]}" restore u "$(basename "$full")" --to "$W/r1"
timed restoredelta "${G[@]}" restore u "$(basename "$delta")" --to "$W/r2"
timed verifyfull "${G[@]}" verify "u/$(basename "$full")"
timed verifydelta "${G[@]}" verify "u/$(basename "$delta")"
timed verifychain "${G[@]}" verify "u/$(basename "$delta")" --chain
cmp <(sqlite3 "$W/r2/live.db" .dump) <(sqlite3 -readonly "$W/root/u/live.db" .dump) > /dev/null \
    && echo "restored delta: .dump equals the live store's" || { echo "restored delta DIFFERS"; exit 1; }

echo "store ${MB} MiB, ${pages} pages; rewrote ${n} random rows: delta $changed (kind, changed pages, pages)"
printf "full backup            %8.2f s  %10d bytes  peak RSS %s KiB\n" "$(cat "$W/full.t")" "$fullsize" "$(cat "$W/full.m")"
printf "full with page hashes  %8.2f s                     peak RSS %s KiB\n" "$(cat "$W/base.t")" "$(cat "$W/base.m")"
printf "delta backup           %8.2f s  %10d bytes  peak RSS %s KiB\n" "$(cat "$W/delta.t")" "$deltasize" "$(cat "$W/delta.m")"
echo "delta: $(echo "scale=2; 100 * $deltasize / $fullsize" | bc) % of the full's bytes (target <= 5 %), $(echo "scale=2; 100 * $(cat "$W/delta.t") / $(cat "$W/full.t")" | bc) % of its time (target <= 25 %)"
printf "restore full           %8.2f s\n" "$(cat "$W/restorefull.t")"
printf "restore delta (1+1)    %8.2f s  (%.2fx the full's)\n" "$(cat "$W/restoredelta.t")" "$(echo "$(cat "$W/restoredelta.t") / $(cat "$W/restorefull.t")" | bc -l)"
printf "verify full            %8.2f s\n" "$(cat "$W/verifyfull.t")"
printf "verify delta           %8.2f s  (%.2fx the full's; target <= 0.10x)\n" "$(cat "$W/verifydelta.t")" "$(echo "$(cat "$W/verifydelta.t") / $(cat "$W/verifyfull.t")" | bc -l)"
printf "verify --chain         %8.2f s\n" "$(cat "$W/verifychain.t")"
