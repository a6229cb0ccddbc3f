#!/usr/bin/env bash
# make demo: the main job on the built-in sample data, end to end.
#   sample users → granary init → granary users → backup --all while an owner writes → verify → list → inspect
#   → restore into the running owner (its pid unchanged) → the owner's log around the pause
#   → alice moves to another host: retire on this root, restore --create on a second one, the app
#     started there.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$(swift build --show-bin-path)}
DEMO=${DEMO:-$PWD/demo}
G() { "$BIN/granary" "$1" --root "$DEMO/root" --repo "$DEMO/repo" "${@:2}"; }
user=alice@example.com

rm -rf "$DEMO"
"$BIN/granary-sample" "$DEMO/root" >/dev/null
echo "== sample data in $DEMO/root; archives go to $DEMO/repo"
echo "== granary init $DEMO/repo   (the one command that makes a repository)"
G init "$DEMO/repo"
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

# Alice moves to another host. "Host B" is a second root; both hosts share the repository (it
# could as well be an S3 mirror: --repo s3:BUCKET/PREFIX).
GB() { "$BIN/granary" "$1" --root "$DEMO/hostB" --repo "$DEMO/repo" "${@:2}"; }
mkdir -p "$DEMO/hostB" && chmod 755 "$DEMO/hostB"
echo
echo "== host A: granary retire $user --yes   (refused while the app still has her stores open)"
G retire "$user" --yes 2>&1 || true
kill $owner 2>/dev/null || true
wait $owner 2>/dev/null || true
echo
echo "== host A: the app stopped; granary retire $user --yes   (a final archive, verified, then her folder goes)"
G retire "$user" --yes -v
echo
echo "== host A: granary users   (alice is retired: archives only, no folder)"
G users
echo
echo "== host B: granary restore $user   (no such user here: the hint is the command to run)"
GB restore "$user" 2>&1 || true
echo
echo "== host B: granary restore $user --create   (her folder made, owned and moded as recorded)"
GB restore "$user" --create
ls -ld "$DEMO/hostB/$user"
logB="$DEMO/owner-hostB.log"
# The app carries on from the last row it wrote on host A.
next=$(( $(sqlite3 "$DEMO/hostB/$user/Local.sqlite" 'SELECT coalesce(max(id), 0) FROM demo_writes') + 1 ))
"$BIN/granary-demo-owner" --log "$logB" --start-id "$next" "$DEMO/hostB/$user/Local.sqlite" "$DEMO/hostB/$user/Cloud.sqlite" & owner=$!
for _ in $(seq 200); do grep -q '^ACK' "$logB" 2>/dev/null && break; sleep 0.05; done
grep -q '^ACK' "$logB" || { echo "the app did not start writing on host B:"; tail -3 "$logB"; exit 1; }
sleep 0.5
echo
echo "== host B: the app runs on the restored stores (pid $owner): $(grep -c '^ACK' "$logB") writes acknowledged so far"
GB users "$user"
echo
echo "== done: try 'granary --root $DEMO/root --repo $DEMO/repo <command>' (see granary --help)"
