#!/usr/bin/env bash
# make demo-restore: a restore into a running owner, step by step.
# Starts granary-demo-owner on alice's two stores (it commits a row every 5 ms), takes an
# archive, lets the owner write more, restores, and shows the owner's log around the pause.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$(swift build --show-bin-path)}
DEMO=${DEMO:-$PWD/demo}
G() { "$BIN/granary" "$1" --root "$DEMO/root" --repo "$DEMO/repo" "${@:2}"; }
user=alice@example.com
rm -rf "$DEMO"; "$BIN/granary-sample" "$DEMO/root"
G init "$DEMO/repo"
log="$DEMO/owner.log"
"$BIN/granary-demo-owner" --log "$log" "$DEMO/root/$user/Local.sqlite" "$DEMO/root/$user/Cloud.sqlite" & owner=$!
trap 'kill $owner 2>/dev/null || true' EXIT
until grep -q READY "$log" 2>/dev/null; do sleep 0.05; done
echo "== granary-demo-owner (pid $owner) is writing to $user's stores"
sleep 0.5
G backup "$user"
echo "== archived at ack $(grep -c '^ACK' "$log"); the owner goes on writing"
sleep 1.2
echo "== granary restore $user --dry-run"; G restore "$user" --dry-run
echo "== granary restore $user";           G restore "$user"
sleep 0.3
echo "== the owner's log around the pause (pid $owner still running: $(kill -0 $owner && echo yes))"
grep -n -B2 -A3 -E '^(PAUSED|REOPENED)' "$log" | grep -v '^.*READ ' | head -20
