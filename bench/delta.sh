#!/usr/bin/env bash
# make bench (delta): backup --delta on a generated store after 1 % of its pages were rewritten,
# against a full backup of the same store (issue 35). Prints bytes, time and peak RSS of each, and
# the restore and verify of the delta against those of the full. BENCH_MB=64 for a quick run
# (default 1024). Phase 1 detects changes by hashing every page of the snapshot (as the snapshot is
# written); for a WAL store's delta the copy is not written (only its changed pages are kept).
# Then restic 0.14 (installed with apt-get when missing; NO_RESTIC=1 skips it) backs up
# the `sqlite3 .backup` copy of the same store before and after the same change, as its users
# do: granary's delta bytes against what restic's second backup added to its repository.
set -euo pipefail
MB=${BENCH_MB:-1024}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-delta.XXXXXX); trap 'rm -rf "$W"' EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
RESTIC=
if [ -z "${NO_RESTIC:-}" ]; then
    command -v restic >/dev/null || apt-get install -y -qq restic >/dev/null
    RESTIC=restic
    export RESTIC_REPOSITORY="$W/restic" RESTIC_PASSWORD=granary-bench RESTIC_CACHE_DIR="$W/restic-cache"
fi
restic_backup() { # NAME: the `sqlite3 .backup` copy of the live store into restic; bytes added into $W/NAME.b
    rm -f "$W/copy.db"; sqlite3 "$W/root/u/live.db" ".backup '$W/copy.db'"
    local before; before=$(du -sb "$W/restic" | cut -f1)
    timed "$1" restic backup --json "$W/copy.db"
    echo $(( $(du -sb "$W/restic" | cut -f1) - before )) > "$W/$1.b"
}
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
if [ -n "$RESTIC" ]; then restic init -q > /dev/null; restic_backup restic1; fi
"${G[@]}" init "$W/repo" > /dev/null

timed full "${G[@]}" backup u --compression zstd --json
full=$(ls "$W"/repo/u/*.tar.zst | tail -1); fullsize=$(stat -c %s "$full")
sleep 1
timed base "${G[@]}" backup u --delta
sleep 1
pages=$(sqlite3 "$W/root/u/live.db" "pragma page_count")
rows=$(sqlite3 "$W/root/u/live.db" "select max(id) from bulk")
n=$(( pages / 100 ))
sqlite3 "$W/root/u/live.db" "update bulk set body = hex(randomblob(256)) || printf('%.*c', 500, 'b') where id in (select 1 + abs(random()) % $rows from bulk limit $n)"
timed delta "${G[@]}" backup u --delta --json
delta=$(ls "$W"/repo/u/*-delta.*tar.zst | tail -1); deltasize=$(stat -c %s "$delta")
[ -z "$RESTIC" ] || restic_backup restic2
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
stages() { python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['users'][0]; s=u.get('stages') or {}; print('  (snapshot %.2f s, check and hash %.2f s, pack %.2f s, sync %.2f s)' % tuple(s.get(k, 0) for k in ('snapshot', 'checkAndHash', 'pack', 'sync')))" "$1"; }
printf "full:"; stages "$W/full.out"; printf "delta:"; stages "$W/delta.out"
if [ -n "$RESTIC" ]; then
    added=$(python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"summary\"' in l][-1]['data_added'])" "$W/restic2.out")
    printf "restic first backup    %8.2f s  %10d bytes added to its repository\n" "$(cat "$W/restic1.t")" "$(cat "$W/restic1.b")"
    printf "restic after change    %8.2f s  %10d bytes added (data_added %d)\n" "$(cat "$W/restic2.t")" "$(cat "$W/restic2.b")" "$added"
    echo "granary's delta: $(echo "scale=3; $deltasize / $(cat "$W/restic2.b")" | bc) of restic's added bytes (target <= 0.100)"
fi
printf "restore full           %8.2f s\n" "$(cat "$W/restorefull.t")"
printf "restore delta (1+1)    %8.2f s  (%.2fx the full's)\n" "$(cat "$W/restoredelta.t")" "$(echo "$(cat "$W/restoredelta.t") / $(cat "$W/restorefull.t")" | bc -l)"
printf "verify full            %8.2f s\n" "$(cat "$W/verifyfull.t")"
printf "verify delta           %8.2f s  (%.2fx the full's; target <= 0.10x)\n" "$(cat "$W/verifydelta.t")" "$(echo "$(cat "$W/verifydelta.t") / $(cat "$W/verifyfull.t")" | bc -l)"
printf "verify --chain         %8.2f s\n" "$(cat "$W/verifychain.t")"
