#!/usr/bin/env bash
# make demo: the main job on the built-in sample data, end to end.
#   sample users → granary users → backup --all while an owner writes → verify → list → inspect
#   → restore into the running owner (its pid unchanged) → the owner's log around the pause.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$(swift build --show-bin-path)}
DEMO=${DEMO:-$PWD/demo}
G() { "$BIN/granary" "$1" --root "$DEMO/root" --repo "$DEMO/repo" "${@:2}"; }
user=alice@example.com

rm -rf "$DEMO"
"$BIN/granary-sample" "$DEMO/root" >/dev/null
echo "== sample data in $DEMO/root; archives go to $DEMO/repo"
echo "== granary users"
G users

# An app server owning alice's two stores: a writer commits a row every 5 ms, readers read.
log="$DEMO/owner.log"
"$BIN/granary-demo-owner" --log "$log" "$DEMO/root/$user/Local.sqlite" "$DEMO/root/$user/Cloud.sqlite" & owner=$!
trap 'kill $owner 2>/dev/null || true' EXIT
until grep -q READY "$log" 2>/dev/null; do sleep 0.05; done
sleep 0.5
echo
echo "== granary backup --all   (granary-demo-owner, pid $owner, keeps writing to $user's stores)"
G backup --all --label demo -v 2>&1 || true
acked=$(grep -c '^ACK' "$log")
echo "   $acked writes acknowledged by the owner so far"
echo; echo "== granary verify --all --latest -v   (every member against the manifest, then integrity_check)"
G verify --all --latest -v
echo; echo "== granary list"
G list
echo; echo "== granary inspect bob's Core Data store"
G inspect "$DEMO/root/bob@example.com/Notes.sqlite"

sleep 1
echo
echo "== granary restore $user --dry-run"
G restore "$user" --dry-run
echo
echo "== granary restore $user   (the owner pauses for milliseconds, then reopens on the restored stores)"
G restore "$user"
sleep 0.3
echo
echo "== the owner's log around the pause (pid $owner still running: $(kill -0 $owner 2>/dev/null && echo yes || echo NO))"
grep -E '^(PAUSE|PAUSED|REOPENED|RESUMED|EVENT)' "$log" | head -8 || true
echo; echo "== granary list $user   (the replaced content is kept as a pre-restore archive)"
G list "$user"
echo
echo "== done: try 'granary --root $DEMO/root --repo $DEMO/repo <command>' (see granary --help)"
