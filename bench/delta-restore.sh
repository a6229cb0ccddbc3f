#!/usr/bin/env bash
# make bench (delta restore): restore of a full + 23 deltas against a full restore of the same
# store, and verify of a delta against a full's verify (issue 35). A generated store (BENCH_MB,
# default 1024), a plain full, a full with page hashes (`backup --delta`), then 23 deltas, each
# after 1 % of the store's pages were rewritten. Then, alternating, BENCH_ROUNDS rounds (default 3)
# of: restore --to of the plain full, of the chain's full, of the newest delta (full + 23); and
# verify of the plain full and of the newest delta. Prints medians, ratios and peak RSS.
set -euo pipefail
MB=${BENCH_MB:-1024}
ROUNDS=${BENCH_ROUNDS:-3}
DELTAS=${BENCH_DELTAS:-23}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-delta-restore.XXXXXX); trap 'rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
now() { date +%s.%N; }
G=("$BIN/granary" --root "$W/root" --repo "$W/repo")
LIVE="$W/root/u/live.db"
timed() { # NAME COMMAND...: seconds and peak RSS (KiB) appended to $W/NAME.t and $W/NAME.m
    local name=$1; shift
    sync; sleep 2
    local t0; t0=$(now)
    /usr/bin/time -f "%M" -o "$W/rss" "$@" > "$W/$name.out"
    echo "$(now) - $t0" | bc >> "$W/$name.t"
    cat "$W/rss" >> "$W/$name.m"
}
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -n "$1" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }

mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$LIVE" "$MB" > /dev/null
sqlite3 "$LIVE" "pragma wal_checkpoint(truncate)" > /dev/null
"${G[@]}" init "$W/repo" > /dev/null
"${G[@]}" backup u --compression zstd
plain=$(basename "$(ls "$W"/repo/u/*.tar.zst | tail -1)")
sleep 1
"${G[@]}" backup u --delta
base=$(basename "$(ls "$W"/repo/u/*.tar.zst | tail -1)")
pages=$(sqlite3 "$LIVE" "pragma page_count")
rows=$(sqlite3 "$LIVE" "select max(id) from bulk")
n=$(( pages / 100 ))
carried=0
for i in $(seq 1 "$DELTAS"); do
    sqlite3 "$LIVE" "update bulk set body = hex(randomblob(256)) || printf('%.*c', 500, 'b') where id in (select 1 + abs(random()) % $rows from bulk limit $n)"
    sleep 1
    "${G[@]}" backup u --delta --json > "$W/backup.json"
    read -r kind changed < <(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['users'][0]['delta']; print(d['kind'], d.get('changedPages', 0))" "$W/backup.json")
    [ "$kind" = delta ] || { echo "backup $i was a $kind, not a delta"; exit 1; }
    carried=$(( carried + changed ))
done
newest=$(basename "$(ls "$W"/repo/u/*-delta.*tar.zst | tail -1)")
bytes() { stat -c %s "$W/repo/u/$1"; }
deltabytes=$(cat "$W"/repo/u/*-delta.*tar.zst | wc -c)
cat "$LIVE" > /dev/null

for round in $(seq 1 "$ROUNDS"); do
    for what in plain base newest; do
        rm -rf "$W/to"; mkdir "$W/to"
        timed "restore-$what" "${G[@]}" restore u "${!what}" --to "$W/to"
    done
    cmp <(sqlite3 "$W/to/live.db" .dump) <(sqlite3 -readonly "$LIVE" .dump) > /dev/null \
        || { echo "round $round: the restored chain DIFFERS from the live store"; exit 1; }
    timed verify-plain "${G[@]}" verify "u/$plain"
    timed verify-newest "${G[@]}" verify "u/$newest"
done
rm -rf "$W/to"

ratio() { echo "$(median "$W/$1.t") / $(median "$W/$2.t")" | bc -l; }
echo "store ${MB} MiB, ${pages} pages; ${DELTAS} deltas of ${n} random rows rewritten each (${carried} pages carried in all)"
echo "plain full $(bytes "$plain") bytes; chain's full $(bytes "$base") bytes; ${DELTAS} deltas ${deltabytes} bytes; ${ROUNDS} rounds, medians (range)"
printf "restore plain full          %6.2f s (%s)  peak RSS %s KiB\n" "$(median "$W/restore-plain.t")" "$(range "$W/restore-plain.t")" "$(sort -n "$W/restore-plain.m" | tail -1)"
printf "restore chain's full        %6.2f s (%s)  peak RSS %s KiB  (%.2fx the plain full's)\n" "$(median "$W/restore-base.t")" "$(range "$W/restore-base.t")" "$(sort -n "$W/restore-base.m" | tail -1)" "$(ratio restore-base restore-plain)"
printf "restore full + %2d deltas    %6.2f s (%s)  peak RSS %s KiB  (%.2fx the plain full's, %.2fx the chain's full's; target <= 1.2x)\n" "$DELTAS" "$(median "$W/restore-newest.t")" "$(range "$W/restore-newest.t")" "$(sort -n "$W/restore-newest.m" | tail -1)" "$(ratio restore-newest restore-plain)" "$(ratio restore-newest restore-base)"
printf "verify plain full           %6.2f s (%s)\n" "$(median "$W/verify-plain.t")" "$(range "$W/verify-plain.t")"
printf "verify newest delta         %6.2f s (%s)  (%.2fx the full's; target <= 0.10x)\n" "$(median "$W/verify-newest.t")" "$(range "$W/verify-newest.t")" "$(ratio verify-newest verify-plain)"
echo "restored full + ${DELTAS} deltas: .dump equals the live store's in every round"
