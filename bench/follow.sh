#!/usr/bin/env bash
# make bench: `granary follow`'s targets (docs/follow.md, "Measured"), side by side.
#   RPO: p99 from a commit's acknowledgement to its segment durable in a local repository,
#        at 1,000 commits/s spread over 100 users (target <= 1 s);
#   owner impact: the owners' p99 commit latency with follow on vs off (target within 10 %),
#        and their largest -wal (target at most twice);
#   follower cost: CPU per 1,000 commits/s (target <= 5 % of a core), and resident memory with
#        10,000 stores followed, 1,000 of them busy (target <= 64 MiB).
# BENCH_FOLLOW_USERS (1000) users of BENCH_FOLLOW_STORES (10) stores each; BENCH_FOLLOW_SECONDS (20)
# per phase; BENCH_FOLLOW_RATE (1000) commits/s; BENCH_FOLLOW_TABLES (1) tables in each store (40: the
# schema of a small Core Data model, which SQLite parses at each open).
# BENCH_FOLLOW_REPO=s3 follows into an S3 repository on loopback instead (moto from `make moto`,
# rclone; target RPO p99 <= 5 s): a segment is durable when its upload completed, taken from the
# object's LastModified, which moto gives to the second: rounded up, so the RPO is still an upper
# bound (and at most 1 s above it). Each user's first generation is a backup uploaded there: start
# with fewer users (BENCH_FOLLOW_USERS=100 BENCH_FOLLOW_STORES=1).
# BENCH_FOLLOW_DIR (/var/tmp) holds the users' root and the local repository (its file system
# decides what making a segment durable costs).
set -euo pipefail
KIND=${BENCH_FOLLOW_REPO:-local}
USERS=${BENCH_FOLLOW_USERS:-1000}
PER=${BENCH_FOLLOW_STORES:-10}
SECONDS_=${BENCH_FOLLOW_SECONDS:-20}
RATE=${BENCH_FOLLOW_RATE:-1000}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
HERE=$(cd "$(dirname "$0")" && pwd)
follow=
holder=
moto=
W=$(mktemp -d "${BENCH_FOLLOW_DIR:-/var/tmp}/granary-bench-follow.XXXXXX")
# BENCH_FOLLOW_LOG=FILE keeps follow's journal.
trap '[ -n "$follow" ] && kill -9 $follow 2>/dev/null; [ -n "$holder" ] && kill $holder 2>/dev/null; [ -n "$moto" ] && kill $moto 2>/dev/null; [ -n "${BENCH_FOLLOW_LOG:-}" ] && cp "$W/follow.log" "$BENCH_FOLLOW_LOG"; rm -rf "$W"' EXIT
mkdir -p "$W/root"; chmod 755 "$W/root"
REPO="$W/repo"
if [ "$KIND" = s3 ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$HERE/../.build-tools/moto/bin/moto_server" -H 127.0.0.1 -p "$port" > "$W/moto.log" 2>&1 & moto=$!
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  export AWS_CA_BUNDLE= RCLONE_CONFIG_MOTO_TYPE=s3 RCLONE_CONFIG_MOTO_PROVIDER=Other RCLONE_CONFIG_MOTO_ENV_AUTH=true
  export RCLONE_CONFIG_MOTO_ENDPOINT="$AWS_ENDPOINT_URL" RCLONE_CONFIG_MOTO_NO_HEAD=true
  until rclone -q mkdir moto:bench 2>/dev/null; do sleep 0.2; done
  REPO=s3:bench/repo
fi
"$BIN/granary" init "$REPO" > /dev/null
# The segments in the repository, one a line: USER FIRST DURABLE (microseconds; durable: a local
# segment's ctime, renamed into place; an S3 object's LastModified, rounded up to the second).
segments() {
  if [ "$KIND" = s3 ]; then
    rclone lsjson -R -q --files-only --no-mimetype --use-server-modtime moto:bench/repo > "$W/listing"
    python3 - "$W/listing" <<'EOF'
import json, sys, datetime
for item in json.load(open(sys.argv[1])):
    parts = item["Path"].split("/")
    if len(parts) != 5 or parts[1] != "follow" or not parts[4].endswith(".seg"): continue
    f = datetime.datetime.strptime(parts[4][:-4].split("-")[1], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    t = datetime.datetime.strptime(item["ModTime"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    print(parts[0], int(f.timestamp()) * 1000000 + f.microsecond, (int(t.timestamp()) + 1) * 1000000)
EOF
  else
    python3 - "$W/repo" <<'EOF'
import os, sys, datetime
repo = sys.argv[1]
for user in os.listdir(repo):
    for dirpath, _, files in os.walk(os.path.join(repo, user, "follow")):
        for f in files:
            if not f.endswith(".seg"): continue
            d = datetime.datetime.strptime(f[:-4].split("-")[1], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=datetime.timezone.utc)
            print(user, int(d.timestamp()) * 1000000 + d.microsecond, os.stat(os.path.join(dirpath, f)).st_ctime_ns // 1000)
EOF
  fi
}
echo "follow: $USERS users x $PER stores ($((USERS * PER)) stores), $RATE commits/s, $SECONDS_ s a phase, a $KIND repository"
python3 "$HERE/follow-writer.py" make "$W/root" "$USERS" "$PER"
p99() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; print a[i]}'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
HOT=$((USERS < 100 ? USERS : 100))
busy=$((USERS < 1000 ? USERS : 1000))
# The owners keep their stores open throughout, as apps do (see follow-writer.py hold).
python3 "$HERE/follow-writer.py" hold "$W/root" "$USERS" "$busy" > "$W/held" & holder=$!
while ! grep -q held "$W/held"; do sleep 0.2; done

# 1. The owners alone: 100 users' (HOT) busy store each, RATE commits/s in all.
python3 "$HERE/follow-writer.py" write "$W/root" $HOT $HOT "$RATE" "$SECONDS_" "$W/off.log"
off_p99=$(grep -v wal-max "$W/off.log" | awk '{print $3}' | p99)
off_wal=$(awk '/wal-max/ {print $2}' "$W/off.log")
off_rate=$(grep -vc wal-max "$W/off.log")

# 2. follow starts: every user's first generation (a backup each), then quiet.
"$BIN/granary" follow --root "$W/root" --repo "$REPO" 2> "$W/follow.log" & follow=$!
t0=$(date +%s)
while [ "$(grep -c "new generation" "$W/follow.log")" -lt "$USERS" ]; do sleep 1; done
echo "first generation of $USERS users: $(($(date +%s) - t0)) s"
gen0=$(grep -c "new generation" "$W/follow.log")
sleep 3
idle0=$(ticks $follow); sleep 10; idle1=$(ticks $follow)
idle_cpu=$(echo "scale=2; 100 * ($idle1 - $idle0) / $hz / 10" | bc)
idle_rss=$(awk '/VmRSS/ {print $2}' "/proc/$follow/status")

# 3. The same owners with follow on: latency, -wal, RPO, CPU.
c0=$(ticks $follow); s0=$(date +%s.%N)
python3 "$HERE/follow-writer.py" write "$W/root" $HOT $HOT "$RATE" "$SECONDS_" "$W/on.log"
sleep 2
c1=$(ticks $follow); s1=$(date +%s.%N)
on_p99=$(grep -v wal-max "$W/on.log" | awk '{print $3}' | p99)
on_wal=$(awk '/wal-max/ {print $2}' "$W/on.log")
on_rate=$(echo "scale=1; $(grep -vc wal-max "$W/on.log") / $SECONDS_" | bc)
cpu=$(echo "scale=2; 100 * ($c1 - $c0) / $hz / ($s1 - $s0)" | bc)
cpu_per=$(echo "scale=2; $cpu * 1000 / $on_rate" | bc)
# RPO, an upper bound: a commit acknowledged at A is in the first segment of its user whose read
# began at or after A (or an earlier one), durable when that segment was in the repository (see
# segments above).
segments > "$W/segments"
python3 - "$W/segments" "$W/on.log" > "$W/rpo" <<'EOF'
import sys, bisect, collections
segments, log = sys.argv[1], sys.argv[2]
acks = collections.defaultdict(list)
for line in open(log):
    parts = line.split()
    if parts[0] == "wal-max": continue
    acks[int(parts[0])].append(int(parts[1]))
byuser = collections.defaultdict(list)
for line in open(segments):
    user, first, durable = line.split()
    byuser[user].append((int(first), int(durable)))
rpo, missing = [], 0
for user, times in acks.items():
    segs = sorted(byuser["u%04d" % user])
    firsts = [s[0] for s in segs]
    for t in times:
        i = bisect.bisect_left(firsts, t)
        if i == len(segs): missing += 1
        else: rpo.append(segs[i][1] - t)
rpo.sort()
p = lambda q: rpo[min(len(rpo) - 1, int(len(rpo) * q))] / 1e6 if rpo else float("nan")
print("%.3f %.3f %.3f %d %d" % (p(0.5), p(0.99), rpo[-1] / 1e6 if rpo else float("nan"), len(rpo), missing))
EOF
read -r rpo50 rpo99 rpomax shipped unshipped < "$W/rpo"

# 4. 10,000 stores, 1,000 busy (1 in 10), RATE commits/s: resident memory and CPU.
c0=$(ticks $follow); s0=$(date +%s.%N)
python3 "$HERE/follow-writer.py" write "$W/root" "$USERS" "$busy" "$RATE" "$SECONDS_" "$W/big.log" &
writer=$!
peak=0
while kill -0 $writer 2>/dev/null; do
  r=$(awk '/VmRSS/ {print $2}' "/proc/$follow/status"); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.5
done
wait $writer
sleep 2
c1=$(ticks $follow); s1=$(date +%s.%N)
big_cpu=$(echo "scale=2; 100 * ($c1 - $c0) / $hz / ($s1 - $s0)" | bc)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$follow/status")
fds=$(ls "/proc/$follow/fd" | wc -l)
watches=$(grep -c '^inotify' "/proc/$follow/fdinfo/"* 2>/dev/null | awk -F: '{s+=$2} END {print s}')

# 5. SIGTERM: how long until it has shipped what it held and exited.
python3 "$HERE/follow-writer.py" write "$W/root" $HOT $HOT "$RATE" 2 "$W/last.log"
t0=$(date +%s.%N); kill -TERM $follow; wait $follow || true; t1=$(date +%s.%N); follow=
stop=$(echo "$t1 - $t0" | bc)
restarts=$(($(grep -c "new generation" "$W/follow.log") - gen0))

yes() { if [ "$1" = 1 ]; then echo met; else echo missed; fi; }
echo "owners alone:        p99 commit $((off_p99)) us, largest -wal $off_wal bytes, $((off_rate / SECONDS_)) commits/s"
echo "owners, follow on:   p99 commit $((on_p99)) us, largest -wal $on_wal bytes, $on_rate commits/s"
echo "RPO (upper bound):   p50 $rpo50 s, p99 $rpo99 s, max $rpomax s over $shipped commits ($unshipped not shipped at the end)"
echo "follower, 100 busy:  $cpu % of a core ($cpu_per % per 1,000 commits/s); idle $idle_cpu %, RSS idle $idle_rss KiB"
echo "follower, $((USERS * PER)) stores, $busy busy: $big_cpu % of a core; RSS peak $peak KiB (VmHWM $hwm KiB); $fds descriptors open; $watches inotify watches"
echo "SIGTERM to exit:     $stop s; generations started after the first ones: $restarts"
echo "issue 51 targets:"
target=1; [ "$KIND" = s3 ] && target=5
echo "  RPO p99 <= $target s ($KIND):               $(yes "$(echo "$rpo99 <= $target" | bc -l)") ($rpo99 s)"
echo "  owner p99 within 10 % of follow off:   $(yes "$(echo "$on_p99 <= $off_p99 * 1.1" | bc -l)") ($off_p99 -> $on_p99 us)"
echo "  owner -wal at most 2x:                 $(yes "$(echo "$on_wal <= 2 * $off_wal" | bc -l)") ($off_wal -> $on_wal bytes)"
echo "  <= 5 % of a core per 1,000 commits/s:  $(yes "$(echo "$cpu_per <= 5" | bc -l)") ($cpu_per %)"
echo "  <= 64 MiB resident, 10,000 stores:     $(yes "$(echo "$hwm <= 65536" | bc -l)") ($hwm KiB)"
echo "  SIGTERM: stopped within 1 s:           $(yes "$(echo "$stop <= 1" | bc -l)") ($stop s)"
