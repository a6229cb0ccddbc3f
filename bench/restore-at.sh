#!/usr/bin/env bash
# make bench (issue 51's restore target): `restore USER --at TIME` of a generated WAL store with
# commits on top of its base, against a plain restore of that base, both `--to` a folder. An owner
# holds the store open and commits BENCH_AT_RATE times a second for BENCH_AT_SECONDS while
# `granary follow` ships them (defaults: 3,600 commits over 60 s, each rewriting 4 rows: an hour of
# an app committing once a second, compressed into a minute; its segments are one a second, so a
# real hour would have 60 times as many, each smaller). BENCH_MB sets the store's size (default
# 256; the issue's target is stated for 1024). BENCH_RUNS rounds of each, alternated (median).
# The replayed store must hold exactly what the owner committed.
set -euo pipefail
MB=${BENCH_MB:-256}
RATE=${BENCH_AT_RATE:-60}
SECONDS_=${BENCH_AT_SECONDS:-60}
RUNS=${BENCH_RUNS:-3}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-at.XXXXXX)
FOLLOW=; HOLDER=
cleanup() {
    [ -z "$FOLLOW" ] || kill "$FOLLOW" 2>/dev/null || true
    [ -z "$HOLDER" ] || kill "$HOLDER" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "${BENCH_KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'delta = true\n' > "$W/config.toml"
G() { "$BIN/granary" --root "$W/root" --repo "$W/repo" --config "$W/config.toml" "$@"; }
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
sqlite3 "$W/root/u/live.db" "pragma wal_checkpoint(truncate)" > /dev/null
rows=$(sqlite3 "$W/root/u/live.db" "select max(id) from bulk")
# The owner: one connection held open, as an app holds one; a first commit before follow starts
# (a -wal begun after its generation would start another); then, on a signal (SIGUSR1), it commits
# RATE times a second for SECONDS, each commit rewriting 4 random rows, and keeps its connection.
cat > "$W/owner.py" <<'PY'
import os, random, signal, sqlite3, sys, time
path, rows, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA synchronous=NORMAL")
db.execute("PRAGMA user_version = 1")
go = []
signal.signal(signal.SIGUSR1, lambda *a: go.append(1))
while not go:
    time.sleep(0.05)
start = time.monotonic()
n = 0
while n < rate * seconds:
    due = start + n / rate
    delay = due - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    db.execute("BEGIN")
    for _ in range(4):
        db.execute("UPDATE bulk SET body = hex(randomblob(200)) WHERE id = ?", (random.randint(1, rows),))
    db.execute("COMMIT")
    n += 1
print(n, flush=True)
# Open until killed, as an app's connection: its close would checkpoint and remove the -wal, a new
# generation for follow (whose base backup would then be what holds the last commits).
time.sleep(86400)
PY
python3 "$W/owner.py" "$W/root/u/live.db" "$rows" "$RATE" "$SECONDS_" > "$W/owner.out" &
HOLDER=$!
sleep 1
"$BIN/granary" init "$W/repo" > /dev/null
# (Started directly, not through G: $! must be granary's pid, for the SIGTERM below.)
"$BIN/granary" --root "$W/root" --repo "$W/repo" --config "$W/config.toml" follow --interval 1s \
    2> "$W/follow.log" &
FOLLOW=$!
for _ in $(seq 1 600); do ls "$W"/repo/u/follow/*/*/*.seg > /dev/null 2>&1 && break; sleep 0.5; done
ls "$W"/repo/u/follow/*/*/*.seg > /dev/null || { echo "follow started no generation:"; cat "$W/follow.log"; exit 1; }
kill -USR1 "$HOLDER"
until [ -s "$W/owner.out" ]; do kill -0 "$HOLDER" || { echo "the owner failed"; exit 1; }; sleep 0.5; done
commits=$(cat "$W/owner.out")
# Everything shipped (no new segment for 3 s, on a loaded machine the follower may lag); then
# follow stops (SIGTERM: it ships what it holds).
quiet=0
for _ in $(seq 1 240); do
    newest=$(ls -t "$W"/repo/u/follow/*/*/*.seg | sed -n 1p)
    if [ $(( $(date +%s) - $(stat -c %Y "$newest") )) -ge 3 ]; then quiet=1; break; fi
    sleep 0.5
done
[ "$quiet" = 1 ] || { echo "follow kept shipping for 2 minutes after the owner stopped"; exit 1; }
kill "$FOLLOW"; wait "$FOLLOW" 2>/dev/null || true; FOLLOW=
segments=$(ls "$W"/repo/u/follow/*/*/*.seg | wc -l)
base=$(ls "$W"/repo/u/*.tar.zst | head -1)
# The moment: the end of the followed window, to the microsecond: the newest segment's last
# observation, the third part of its name (SEQUENCE-FIRST-LAST.seg).
at=$(basename "$(ls "$W"/repo/u/follow/*/*/*.seg | sort | tail -1)" .seg | cut -d- -f3)
expected=$(sqlite3 "$W/root/u/live.db" "select count(*), sum(length(body)), max(body) from bulk" | sha256sum | cut -c1-16)
timed() { # NAME ARGS...: seconds into $W/NAME.t (appended), peak RSS (KiB) into $W/NAME.m
    local name=$1; shift
    rm -rf "$W/out"; sync; sleep 2
    local t0; t0=$(now)
    /usr/bin/time -f "%M" -o "$W/$name.m" "$BIN/granary" --root "$W/root" --repo "$W/repo" \
        --config "$W/config.toml" "$@" --to "$W/out" > "$W/$name.out" 2>&1 \
        || { echo "$name failed:"; cat "$W/$name.out"; exit 1; }
    echo "$(now) - $t0" | bc >> "$W/$name.t"
}
same=yes
for _ in $(seq "$RUNS"); do
    timed plain restore u "$(basename "$base")"
    timed at restore u --at "$at"
    grep -q "within the followed window" "$W/at.out" || { echo "restore --at did not replay:"; cat "$W/at.out"; exit 1; }
    got=$(sqlite3 "$W/out/live.db" "select count(*), sum(length(body)), max(body) from bulk" | sha256sum | cut -c1-16)
    [ "$got" = "$expected" ] || same=NO
done
p=$(median < "$W/plain.t"); a=$(median < "$W/at.t")
echo "store ${MB} MiB; ${commits} commits (${RATE}/s for ${SECONDS_} s, 4 rows each) on top of the base, in ${segments} segments; ${RUNS} rounds, alternated (median)"
echo "the store restored --at holds exactly what the owner committed: $same"
printf "%-40s %8.2f s  peak RSS %s KiB\n" "restore of the base archive" "$p" "$(cat "$W/plain.m")"
printf "%-40s %8.2f s  peak RSS %s KiB\n" "restore --at (base + replay)" "$a" "$(cat "$W/at.m")"
echo "ratio restore --at / plain restore: $(echo "scale=2; $a / $p" | bc)x (target <= 1.5x)"
[ "$same" = yes ]
