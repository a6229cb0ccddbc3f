#!/usr/bin/env bash
# make bench (week, issue 49): a faked week of hourly `backup --all --delta` with the stores'
# owners writing between runs, a nightly verify and check, a few restores (each leaving a safety
# archive), then prune with restic's retention (`--keep-hourly 24 --keep-daily 7`); and the same
# with restic 0.14 on the same folders (`restic backup ROOT --time T` each hour, `restic forget
# --keep-hourly 24 --keep-daily 7 --prune`). Prints both repositories' space after the week and
# after the prune, both prunes' times, and the ratios (targets: granary's prune <= 2x restic's
# time, its space <= 3x restic's).
#
# The hours are faked with libfaketime (Debian's faketime, installed when missing): each run of
# granary and of restic sees the clock at its hour. WEEK_RUNS=172 for the issue's week (default
# 48: two days, a few minutes); WEEK_USERS users (default 3), each with a WAL store of WEEK_MB MiB
# (default 16) from `granary-sample big` beside granary-sample's own four users; WEEK_CHANGE rows
# rewritten per user and hour (default 200). BIN=DIR takes the binaries from DIR. WEEK_SAVE=DIR
# keeps a copy of both repositories (and the root) as they are before the prunes, for
# bench/prune-ab.sh to prune again and again with two builds.
set -euo pipefail
export TZ=UTC
RUNS=${WEEK_RUNS:-48}
USERS=${WEEK_USERS:-3}
MB=${WEEK_MB:-16}
CHANGE=${WEEK_CHANGE:-200}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-week.XXXXXX); trap 'rm -rf "$W"' EXIT
command -v faketime >/dev/null || apt-get install -y -qq faketime >/dev/null
# libfaketime also shifts the times stat(2) returns, by each run's own offset: an archive's
# modification time would differ from one run to the next, and granary would rightly take every
# archive for one changed since it was written (no delta on it). Only the clock is faked.
export NO_FAKE_STAT=1
command -v restic >/dev/null || apt-get install -y -qq restic >/dev/null
export RESTIC_REPOSITORY="$W/restic" RESTIC_PASSWORD=granary-bench RESTIC_CACHE_DIR="$W/restic-cache"
now() { date +%s.%N; }
start=$(date -u -d "$(date -u +%Y-%m-%d) - 8 days" +%s)
at() { date -u -d "@$((start + $1 * 3600))" "+%Y-%m-%d %H:%M:%S"; } # the faked time of run N
G=("$BIN/granary" --root "$W/root" --repo "$W/repo")
g() { local t=$1; shift; faketime "$t" "${G[@]}" "$@"; } # granary at faked time T

"$BIN/granary-sample" "$W/root" > /dev/null
for i in $(seq "$USERS"); do
    mkdir -p "$W/root/u$i"; "$BIN/granary-sample" big "$W/root/u$i/live.db" "$MB" > /dev/null
    sqlite3 "$W/root/u$i/live.db" "pragma wal_checkpoint(truncate)" > /dev/null
done
"$BIN/granary" init "$W/repo" > /dev/null
restic init -q > /dev/null

write() { # run N: each big store gets CHANGE rows rewritten and a few new; alice and bob a row
    local n=$1 i rows
    for i in $(seq "$USERS"); do
        rows=$(sqlite3 "$W/root/u$i/live.db" "select max(id) from bulk")
        sqlite3 "$W/root/u$i/live.db" "update bulk set body = hex(randomblob(200)) where id in (select 1 + abs(random()) % $rows from bulk limit $CHANGE); insert into bulk(body) select hex(randomblob(300)) from bulk limit 20" > /dev/null
    done
    sqlite3 "$W/root/alice@example.com/Local.sqlite" "insert into items(body, created) values ('hour $n', $n)" > /dev/null
    sqlite3 "$W/root/bob@example.com/Notes.sqlite" "update ZNOTE set ZTITLE = 'hour $n' where Z_PK = 1" > /dev/null
}

gb=0; rb=0; restores=0
echo "a faked week: $RUNS hourly runs, $((USERS + 4)) users ($USERS with a ${MB} MiB WAL store), $CHANGE rows rewritten per store and hour"
for n in $(seq 0 $((RUNS - 1))); do
    t=$(at "$n")
    [ "$n" -eq 0 ] || write "$n"
    t0=$(now); g "$t" backup --all --delta -q; t1=$(now)
    faketime "$t" restic backup -q --time "$t" --host bench "$W/root" > /dev/null; t2=$(now)
    gb=$(echo "$gb + $t1 - $t0" | bc); rb=$(echo "$rb + $t2 - $t1" | bc)
    # Nightly (at 02:00 of the faked days): verify and check, and restic's check.
    if [ "$(date -u -d "$t" +%H)" = 02 ]; then
        g "$t" verify --all -q > /dev/null || { echo "nightly verify failed at $t"; exit 1; }
        g "$t" check -q > /dev/null || true
        faketime "$t" restic check -q > /dev/null
    fi
    # A restore now and then (a quarter, half and three quarters in): each leaves a safety archive.
    if [ "$n" -gt 0 ] && { [ "$n" -eq $((RUNS / 4)) ] || [ "$n" -eq $((RUNS / 2)) ] || [ "$n" -eq $((3 * RUNS / 4)) ]; }; then
        write "$n"
        g "$t" restore "u$(( (restores % USERS) + 1 ))" -q > /dev/null
        restores=$((restores + 1))
    fi
done
end=$(at "$RUNS")
gweek=$(du -sb "$W/repo" | cut -f1); rweek=$(du -sb "$W/restic" | cut -f1)
archives=$(find "$W/repo" -name '*.tar.zst' | wc -l)
safety=$(find "$W/repo" -name '*-pre-restore*.tar.zst' | wc -l)
safetydelta=$(find "$W/repo" -name '*-pre-restore-delta*.tar.zst' | wc -l)
safetybytes=$(find "$W/repo" -name '*-pre-restore*.tar.zst' -printf '%s\n' | awk '{s+=$1} END {print s+0}')

if [ -n "${WEEK_SAVE:-}" ]; then
    rm -rf "$WEEK_SAVE"; mkdir -p "$WEEK_SAVE"
    cp -a "$W/repo" "$W/restic" "$W/root" "$WEEK_SAVE/"; echo "end='$end'" > "$WEEK_SAVE/end"
fi
sync; sleep 2
t0=$(now); g "$end" prune --all --keep-hourly 24 --keep-daily 7 -q > "$W/prune.out"; t1=$(now)
faketime "$end" restic forget -q --keep-hourly 24 --keep-daily 7 --prune > /dev/null; t2=$(now)
gp=$(echo "$t1 - $t0" | bc); rp=$(echo "$t2 - $t1" | bc)
gafter=$(du -sb "$W/repo" | cut -f1); rafter=$(du -sb "$W/restic" | cut -f1)
left=$(find "$W/repo" -name '*.tar.zst' | wc -l)
# Every archive left restores (its chain whole): verify --chain proves it without a live store.
g "$end" verify --all --chain -q > /dev/null || { echo "verify --chain after prune FAILED"; exit 1; }
snapshots=$(faketime "$end" restic snapshots --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)))")

echo "backups: granary $(printf %.1f "$gb") s, restic $(printf %.1f "$rb") s in all; $restores restores"
echo "granary: $archives archives ($safety safety archives, $safetydelta of them deltas, $safetybytes bytes)"
printf "space after the week   granary %12d bytes  restic %12d bytes  ratio %.2f\n" "$gweek" "$rweek" "$(echo "$gweek / $rweek" | bc -l)"
printf "space after prune      granary %12d bytes  restic %12d bytes  ratio %.2f (target <= 3)\n" "$gafter" "$rafter" "$(echo "$gafter / $rafter" | bc -l)"
printf "prune                  granary %8.2f s  restic %8.2f s  ratio %.2f (target <= 2)\n" "$gp" "$rp" "$(echo "$gp / $rp" | bc -l)"
echo "after prune: granary $left archives, restic $snapshots snapshots; every granary archive verifies with its chain"
