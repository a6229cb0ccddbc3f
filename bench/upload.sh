#!/usr/bin/env bash
# make bench: granary backup with an S3 mirror vs `sqlite3 .backup && tar --zstd && rclone copyto`,
# on the same store and the same S3 server (moto on loopback, from .build-tools: make moto), and
# granary's upload against `rclone copyto` of the very same archive file.
# BENCH_UPLOAD_MB=256 (default) sizes the store; BENCH_UPLOAD_RUNS=5 rounds, the median is reported,
# after a warm-up round that is not timed (it also makes the mirror: in cron the mirror exists).
set -euo pipefail
MB=${BENCH_UPLOAD_MB:-256}
RUNS=${BENCH_UPLOAD_RUNS:-5}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
MOTO=${MOTO:-.build-tools/moto/bin/moto_server}
if [ ! -x "$MOTO" ] || ! command -v rclone >/dev/null; then
  echo "upload bench skipped: it needs moto ($MOTO, make moto) and rclone"; exit 0
fi
W=$(mktemp -d /var/tmp/granary-upload.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$MOTO" -H 127.0.0.1 -p "$PORT" > "$W/moto.log" 2>&1 & moto=$!
trap 'kill $moto 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
# What granary reads for s3: locations; the pipeline's rclone gets the same server as a remote
# defined in its environment (no rclone.conf either).
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"
unset AWS_CA_BUNDLE
export RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other RCLONE_CONFIG_BENCH_ENV_AUTH=true \
  RCLONE_CONFIG_BENCH_ENDPOINT="$AWS_ENDPOINT_URL" RCLONE_CONFIG_BENCH_NO_HEAD=true
rclone -q mkdir bench:bench
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# moto is a Python server on the same 2 cores: after an upload it keeps a core busy for a while
# (storing the object). granary's compression yields the CPU to every other program (SCHED_IDLE)
# and would wait for it, the pipeline would not: each timed step starts once the machine is idle
# again (BENCH_SETTLE seconds, default 3, after syncing).
settle() { sync; sleep "${BENCH_SETTLE:-3}"; }
mkdir -p "$W/root/u"; "$BIN/granary-sample" big "$W/root/u/live.db" "$MB"
echo "store: $MB MiB; S3 server: moto on 127.0.0.1:$PORT; $RUNS rounds after a warm-up, medians reported"
"$BIN/granary" init "$W/warm" s3:bench/granary > /dev/null
"$BIN/granary" backup u --root "$W/root" --repo "$W/warm" --mirror s3:bench/granary > /dev/null
for round in $(seq "$RUNS"); do
  rm -rf "$W/repo" "$W/x.db" "$W/x.tar.zst"; "$BIN/granary" init "$W/repo" > /dev/null; settle
  t0=$(now)
  "$BIN/granary" backup u --root "$W/root" --repo "$W/repo" --mirror s3:bench/granary --json > "$W/backup.json" \
    || { cat "$W/backup.json"; exit 1; }
  t1=$(now)
  g=$(echo "$t1 - $t0" | bc)
  gu=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["users"][0]["mirrors"][0]["seconds"])' "$W/backup.json")
  archive=$(ls "$W"/repo/u/*.tar.zst)
  # rclone copyto of the very same archive file: the floor for granary's upload.
  settle; t0=$(now); rclone -q copyto --no-check-dest "$archive" "bench:bench/copy-$round.tar.zst"; t1=$(now)
  c=$(echo "$t1 - $t0" | bc)
  settle; t0=$(now)
  sqlite3 "$W/root/u/live.db" ".backup $W/x.db" && tar --zstd -cf "$W/x.tar.zst" -C "$W" x.db \
    && rclone -q copyto --no-check-dest "$W/x.tar.zst" "bench:bench/pipeline-$round.tar.zst"
  t1=$(now)
  p=$(echo "$t1 - $t0" | bc)
  printf "round %d: granary backup + mirror %.2f s (upload %.2f s); pipeline %.2f s; rclone copyto of granary's archive %.2f s\n" \
    "$round" "$g" "$gu" "$p" "$c"
  echo "$g" >> "$W/g"; echo "$gu" >> "$W/gu"; echo "$p" >> "$W/p"; echo "$c" >> "$W/c"
done
g=$(median < "$W/g"); gu=$(median < "$W/gu"); p=$(median < "$W/p"); c=$(median < "$W/c")
printf "medians: granary %.2f s, pipeline %.2f s (%.2fx); upload %.2f s vs rclone copyto %.2f s (%+.1f%%)\n" \
  "$g" "$p" "$(echo "$g / $p" | bc -l)" "$gu" "$c" "$(echo "($gu / $c - 1) * 100" | bc -l)"
yes() { if [ "$1" = 1 ]; then echo met; else echo missed; fi; }
echo "issue 19 targets:"
echo "  granary's total no slower than the pipeline's: $(yes "$(echo "$g <= $p" | bc -l)")"
echo "  upload within 10% of rclone copyto:            $(yes "$(echo "$gu <= $c * 1.10" | bc -l)")"
