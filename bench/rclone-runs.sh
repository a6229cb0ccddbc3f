#!/usr/bin/env bash
# The rclone runs each command makes against an S3 repository on loopback (moto from
# `make moto`): a backup, two deltas, check, list, verify, a prune that merges, check again.
# Counts, not time (each run is a process start and a round trip): a debug build, whose test
# switch GRANARY_TEST_RCLONE_FOLDER puts a counting wrapper in front of rclone (a release build
# run as root takes rclone from the system's folders only). Usage: bench/rclone-runs.sh [BIN]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$(cd "$HERE/.." && swift build --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-rclone-runs.XXXXXX)
moto=
trap '[ -n "$moto" ] && kill $moto 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/wrap"
cat > "$W/wrap/rclone" <<WRAP
#!/bin/sh
echo "\$*" >> "$W/calls"
exec $(command -v rclone) "\$@"
WRAP
chmod +x "$W/wrap/rclone"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$HERE/../.build-tools/moto/bin/moto_server" -H 127.0.0.1 -p "$port" > "$W/moto.log" 2>&1 & moto=$!
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_CA_BUNDLE= RCLONE_CONFIG_MOTO_TYPE=s3 RCLONE_CONFIG_MOTO_PROVIDER=Other RCLONE_CONFIG_MOTO_ENV_AUTH=true
export RCLONE_CONFIG_MOTO_ENDPOINT="$AWS_ENDPOINT_URL"
until rclone -q mkdir moto:bench 2>/dev/null; do sleep 0.2; done
mkdir -p "$W/root/alice"
store="$W/root/alice/Local.sqlite"
sqlite3 "$store" "PRAGMA journal_mode=WAL; CREATE TABLE t(x);
  WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2000) INSERT INTO t SELECT randomblob(500) FROM c;" > /dev/null
export GRANARY_ROOT="$W/root" GRANARY_REPO=s3:bench/repo
"$BIN/granary" init > /dev/null
change() { sqlite3 "$store" "UPDATE t SET x=randomblob(500) WHERE rowid<20;"; }
total=0
count() {
  : > "$W/calls"
  GRANARY_TEST_RCLONE_FOLDER="$W/wrap" "$BIN/granary" "$@" > "$W/out" 2>&1 || { echo "granary $*: failed"; cat "$W/out"; exit 1; }
  local runs listings reads
  runs=$(wc -l < "$W/calls"); listings=$(grep -c '^.* lsjson ' "$W/calls"); reads=$(grep -c '^.* cat ' "$W/calls")
  total=$((total + runs))
  printf '%-34s %3d rclone runs (%2d listings, %2d reads)\n' "granary $*" "$runs" "$listings" "$reads"
}
count backup alice
change; count backup --delta alice
change; count backup --delta alice
count check
count list
count verify --all
change; count backup --delta alice
count prune --keep-last 1 alice
count check
echo "in all: $total rclone runs"
