#!/usr/bin/env bash
# make bench, restore part: the owner's pause window during `granary restore` (PAUSED
# acknowledged -> RESUMED) for a 1 MiB and a 1 GiB store under a running granary-demo-owner,
# and the total restore time against the pipeline a user would otherwise run:
#   zstd -d archive | tar -x  +  sqlite3 "pragma integrity_check"  +  cp into place.
# Targets (issue 5): median pause under 20 ms; the 1 GiB window within 2x the 1 MiB one.
# Usage: bash bench/restore.sh [RUNS]   (BENCH_SIZES="1 1024" sizes in MiB; BIN=release bin dir)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SIZES=${BENCH_SIZES:-"1 1024"}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
WORK=${BENCH_WORK:-$PWD/bench/work/restore}
rm -rf "$WORK"; mkdir -p "$WORK"
G="$BIN/granary"
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }


printf '%-8s %-26s %-12s %-12s %-14s %-14s\n' size "pause median (min-max) ms" "restore s" "pipeline s" "archive" "store"
for mib in $SIZES; do
    root="$WORK/root-$mib"; repo="$WORK/repo-$mib"; user="bench@example.com"
    mkdir -p "$root/$user"
    store="$root/$user/Big.sqlite"
    # Rows of 4 KiB, half random (so zstd has real work), half constant.
    sqlite3 "$store" "pragma journal_mode=wal; create table blobs(id integer primary key, body blob);
        with recursive n(i) as (select 1 union all select i+1 from n where i < $((mib * 256)))
        insert into blobs(body) select randomblob(2048) || zeroblob(2048) from n;" >/dev/null
    "$G" init "$repo" > /dev/null
    "$G" backup "$user" --root "$root" --repo "$repo"
    archive=$(ls "$repo/$user"/*.tar.zst | head -1)
    sleep 1
    "$BIN/granary-demo-owner" --log "$WORK/owner-$mib.log" --interval-ms 2 "$store" & owner=$!
    until grep -q READY "$WORK/owner-$mib.log" 2>/dev/null; do sleep 0.05; done
    windows=(); totals=()
    for _ in $(seq "$RUNS"); do
        # BENCH_SETTLE=1: let the previous run's deletion of the replaced 1 GiB file reach the disk first.
        [ "${BENCH_SETTLE:-0}" = 1 ] && { sync; sleep 1; }
        start=$(now_ms)
        out=$("$G" restore "$user" "$(basename "$archive")" --root "$root" --repo "$repo" --no-safety-archive 2>&1)
        totals+=($(( $(now_ms) - start )))
        # "Local.sqlite: owner paused for 1.2 ms (from PAUSE sent to RESUMED received)"
        w=$(sed -n 's/^.*owner paused for \([0-9.]*\) ms.*$/\1/p' <<<"$out" | head -1)
        [ -n "$w" ] || { echo "restore failed: $out" >&2; kill "$owner"; exit 1; }
        windows+=("$w")
    done
    kill "$owner"; wait "$owner" 2>/dev/null || true
    pause=$(printf '%s\n' "${windows[@]}" | median)
    lo=$(printf '%s\n' "${windows[@]}" | sort -n | head -1); hi=$(printf '%s\n' "${windows[@]}" | sort -n | tail -1)
    restore=$(printf '%s\n' "${totals[@]}" | median)
    # The pipeline: decompress + extract, integrity check, copy into place.
    pipes=()
    for _ in $(seq "$RUNS"); do
        rm -rf "$WORK/pipe"; mkdir -p "$WORK/pipe"
        start=$(now_ms)
        zstd -dc "$archive" | tar -x -C "$WORK/pipe"
        sqlite3 "$WORK/pipe/stores/Big.sqlite" "pragma integrity_check" >/dev/null
        cp "$WORK/pipe/stores/Big.sqlite" "$WORK/pipe/copy.sqlite"
        pipes+=($(( $(now_ms) - start )))
    done
    pipeline=$(printf '%s\n' "${pipes[@]}" | median)
    printf '%-8s %-26s %-12s %-12s %-14s %-14s\n' "${mib}MiB" "$pause ($lo-$hi)" \
        "$(awk "BEGIN{printf \"%.2f\", $restore/1000}")" "$(awk "BEGIN{printf \"%.2f\", $pipeline/1000}")" \
        "$(du -h "$archive" | cut -f1)" "$(du -h "$store" | cut -f1)"
    rm -rf "$root" "$repo" "$WORK/pipe"
done
