#!/usr/bin/env bash
# make soak: granary under load for SOAK_SECONDS (default 120), then a full audit.
#
# granary-demo-owner owns alice's two stores and dave's store (one owner process per user,
# each committing a row every 2 ms into its first store and acknowledging it in its log).
# Beside them, two processes outside the reopen protocol write with plain SQLite
# (granary-ledger-writer, each logging every acknowledged commit to its own ledger): one opens,
# writes and closes dave's store every 10 ms (a command-line tool beside the owner), one keeps a
# connection to carol's rollback-journal store open for the whole run and writes through it.
# Meanwhile granary loops over random operations: backup (half of them `backup --delta`, so chains of
# delta archives grow, and a restore with no archive named often rebuilds one), verify, restore with no archive named
# (swap into the running owner), restore --undo, reset (alice's two stores under one owner),
# prune (--keep-within 1d, or --keep-last 1, which merges chains of deltas: what an owner
# acknowledged and a restore or reset replaced stays in the safety archives), list, check, a restore,
# backup or prune killed with SIGKILL at a random moment followed by `granary recover`, and a spell in
# which the repository is read-only (a read-only bind mount: backups and restores must refuse,
# changing nothing). After every operation alice's two stores must be both reset or both not
# (a user's stores are one unit). At the end:
#   - every store passes integrity_check;
#   - every write an owner acknowledged is in its live store or in one of the user's archives
#     (restore and reset keep what they replace in -pre-restore / -pre-reset archives); a delta
#     archive is read by restoring it (`restore USER DELTA --to DIR`: its chain rebuilt and checked);
#   - every archive, deltas with their chains, passes `verify --chain`;
#   - every write a third-process writer acknowledged is in its live store or in one of the safety
#     archives (-pre-restore / -pre-reset, or their -delta forms, restored with their chains) of
#     that user, all written while it ran;
#   - no temporary file, staging folder, journal or held lock is left;
#   - the owners' pids never changed (they were never restarted).
# Prints its counts; exits 1 on any violation.
set -uo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-${SOAK_SECONDS:-120}}
BIN=${BIN:-$(swift build --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-soak.XXXXXX)
# Deltas up to every page changed: the owners' writes rewrite much of these small stores between
# two backups, and the soak is about chains, not the policy's share.
G() { "$BIN/granary" "$1" --root "$W/root" --repo "$W/repo" --config "$W/granary.toml" "${@:2}" >>"$W/granary.log" 2>&1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; [ "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
"$BIN/granary-sample" "$W/root" >/dev/null
echo "delta_max_changed_percent = 100" > "$W/granary.toml"
"$BIN/granary" init "$W/repo" >/dev/null
declare -A first=([alice@example.com]="Local.sqlite" [dave@example.com]="Data/App.sqlite")
declare -A owner
for user in alice@example.com dave@example.com; do
  stores=("$W/root/$user/${first[$user]}")
  [ "$user" = alice@example.com ] && stores+=("$W/root/$user/Cloud.sqlite")
  "$BIN/granary-demo-owner" --interval-ms 2 --log "$W/$user.log" "${stores[@]}" & owner[$user]=$!; pids+=($!)
  until grep -q READY "$W/$user.log" 2>/dev/null; do sleep 0.05; done
done
# The third processes (outside the protocol), each with its own ledger: store, connection.
declare -A third_store=([dave@example.com]="Data/App.sqlite" [carol@example.com]="Legacy.db")
declare -A third_mode=([dave@example.com]="per-write" [carol@example.com]="keep")
declare -A third
for user in "${!third_store[@]}"; do
  "$BIN/granary-ledger-writer" --ledger "$W/$user.ledger" --name "third-$user" --interval-ms 10 \
    --connection "${third_mode[$user]}" "$W/root/$user/${third_store[$user]}" 2>>"$W/third.log" & third[$user]=$!; pids+=($!)
  until [ -s "$W/$user.ledger" ]; do sleep 0.05; done
done
users=(alice@example.com dave@example.com bob@example.com carol@example.com)
declare -A count=()
bump() { count[$1]=$(( ${count[$1]:-0} + 1 )); }
unexpected=0
expect() { # expect "what" status allowed...
  local what=$1 status=$2; shift 2
  for ok in "$@"; do [ "$status" = "$ok" ] && return; done
  echo "soak: $what exited $status: $(tail -2 "$W/granary.log" | tr "\n" " ")"; unexpected=$((unexpected + 1))
}
G backup --all; expect "first backup" $? 0
# alice's stores are one unit: after any operation, both have rows in items or neither has.
split=0
one_unit() {
  local a b
  [ -e "$W/root/.granary/restore/alice@example.com/journal" ] && return  # an interrupted run: recover decides
  a=$(sqlite3 -readonly "$W/root/alice@example.com/Local.sqlite" 'select count(*) > 0 from items' 2>/dev/null)
  b=$(sqlite3 -readonly "$W/root/alice@example.com/Cloud.sqlite" 'select count(*) > 0 from items' 2>/dev/null)
  [ "$a" = "$b" ] || { echo "soak: alice's stores split after $1: Local has rows: $a, Cloud has rows: $b"; split=$((split + 1)); }
}
readonly_spells=0
read_only_spell() { # the repository turns read-only for a while: nothing may half-happen
  mount --bind "$W/repo" "$W/repo" 2>/dev/null || return
  mount -o remount,bind,ro "$W/repo" || { umount "$W/repo"; return; }
  G backup "$1"; expect "backup $1 (read-only repository)" $? 73 74
  G restore "$1" --owner-timeout 5; expect "restore $1 (read-only repository)" $? 73 66 75
  umount "$W/repo"; readonly_spells=$((readonly_spells + 1))
}
# A restore, undo or reset of a store that both an owner and a third process write: the third process may
# write the new store between the switch and RESUME, which granary cannot tell from the paused owner
# writing it (granary-reopen(7)): it exits 65 naming the store, the restore committed and nothing is
# moved (the ledger audit below proves no write is lost). Any other 65 is unexpected.
written_while_paused() { tail -6 "$W/granary.log" | grep -q 'was opened or written while its owner was paused'; }
end=$(( $(date +%s) + DURATION ))
while [ "$(date +%s)" -lt "$end" ]; do
  user=${users[RANDOM % ${#users[@]}]}
  case $((RANDOM % 10)) in
    0|1|2) if [ $((RANDOM % 2)) = 0 ]; then G backup "$user" --delta; expect "backup --delta $user" $? 0; bump delta
       else G backup "$user"; expect "backup $user" $? 0; fi; bump backup ;;
    3) G verify --user "$user" --latest; expect "verify $user" $? 0; bump verify ;;
    4) G restore "$user" --owner-timeout 5; status=$?
       if [ $status = 65 ] && [ -n "${third[$user]:-}" ] && written_while_paused; then status=0; fi
       expect "restore $user" $status 0 75; bump restore ;;
    5) if [ $((RANDOM % 2)) = 0 ]; then G restore "$user" --undo --owner-timeout 5; status=$?
         # An undo is a restore into the running owner: the same third-process writes, the same 65.
         if [ $status = 65 ] && [ -n "${third[$user]:-}" ] && written_while_paused; then status=0; fi
         expect "restore --undo $user" $status 0 66 75; bump undo
       else read_only_spell "$user"; fi ;;
    6) G reset "$user" --yes --owner-timeout 5; status=$?
       if [ $status = 65 ] && [ -n "${third[$user]:-}" ] && written_while_paused; then status=0; fi
       expect "reset $user" $status 0 75; bump reset ;;
    7) # Half the prunes keep the last backup alone: chains of deltas are merged under load (what an
       # owner acknowledged and a restore or reset replaced is in the safety archives, kept a week).
       # Two delta backups first: the newest is then a delta whose base is a delta kept by nothing
       # else (a verify in between would keep it as the newest verified), so the prune has a run to
       # merge; with the random operations alone a user's newest two archives were seldom both deltas.
       if [ $((RANDOM % 2)) = 0 ]; then G prune "$user" --keep-within 1d >/dev/null
       else
         G backup "$user" --delta; expect "backup --delta $user (before a merging prune)" $? 0
         G backup "$user" --delta; expect "backup --delta $user (before a merging prune)" $? 0
         bump delta; bump delta; bump backup; bump backup
         G prune "$user" --keep-last 1 --json
       fi
       expect "prune $user" $? 0; G list >/dev/null; G check --max-age 1d >/dev/null; bump prune ;;
    8|9) # a run killed at a random moment, then recover
      case $((RANDOM % 4)) in 0) op=(restore "$user" --owner-timeout 5) ;; 1) op=(backup "$user") ;;
        2) op=(backup "$user" --delta) ;; *) op=(prune "$user" --keep-last 1) ;; esac
      G "${op[@]}" >/dev/null 2>&1 & victim=$!
      sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
      kill -9 "$victim" 2>/dev/null && bump kill; wait "$victim" 2>/dev/null
      G recover "$user" >/dev/null; expect "recover $user" $? 0; bump recover ;;
  esac
  one_unit "$user's operation"
done
# The closing chain: two backups with --delta of each audited user while its owner writes (after a
# restore or a reset the first is a full), so that the audit restores at least one delta each.
for user in alice@example.com dave@example.com; do
  G backup "$user" --delta; expect "closing backup --delta $user" $? 0; sleep 1.1
  G backup "$user" --delta; expect "closing backup --delta $user" $? 0; bump delta; bump backup
done
for user in "${!third[@]}"; do kill -0 "${third[$user]}" 2>/dev/null || { echo "soak: $user's third-process writer died early"; unexpected=$((unexpected + 1)); }; done
for user in alice@example.com dave@example.com; do kill "${owner[$user]}"; done
for user in "${!third[@]}"; do kill "${third[$user]}"; done; wait 2>/dev/null; pids=()
G recover >/dev/null; expect "final recover" $? 0

# The audit.
lost=0; checked=0; bytes=0; acked_total=0; deltas_read=0
G verify --all --chain; expect "verify --all --chain" $? 0
for store in $(find "$W/root" -path "$W/root/.granary" -prune -o -type f \( -name '*.sqlite' -o -name '*.db' \) -print); do
  [ "$(sqlite3 "$store" 'pragma integrity_check')" = ok ] || { echo "soak: $store fails integrity_check"; unexpected=$((unexpected + 1)); }
  checked=$((checked + 1)); bytes=$((bytes + $(stat -c %s "$store")))
done
for user in alice@example.com dave@example.com; do
  grep -o '^ACK [0-9]*' "$W/$user.log" | cut -d' ' -f2 | sort -u > "$W/acked"
  acked_total=$((acked_total + $(wc -l < "$W/acked")))
  { sqlite3 "$W/root/$user/${first[$user]}" 'select id from demo_writes' 2>/dev/null
    for archive in "$W/repo/$user"/*.tar.zst; do
      x=$(mktemp -d "$W/x.XXXX")
      case $archive in
        *-delta.*tar.zst) # a delta holds pages, not stores: restore it (its chain rebuilt, its state digest checked)
          if "$BIN/granary" restore "$user" "$(basename "$archive")" --to "$x" --root "$W/root" --repo "$W/repo" \
            >>"$W/granary.log" 2>&1; then
            sqlite3 "$x/${first[$user]}" 'select id from demo_writes' 2>/dev/null; deltas_read=$((deltas_read + 1))
          else echo "soak: $user's delta $(basename "$archive") does not restore" >&2; unexpected=$((unexpected + 1)); fi ;;
        *) tar --zstd -xf "$archive" -C "$x" "stores/${first[$user]}" 2>/dev/null \
            && sqlite3 "$x/stores/${first[$user]}" 'select id from demo_writes' 2>/dev/null ;;
      esac
      rm -rf "$x"
    done; } > "$W/kept.raw"  # (not a pipe: the counters above must survive)
  sort -u "$W/kept.raw" > "$W/kept"
  missing=$(comm -23 "$W/acked" "$W/kept" | wc -l)
  [ "$missing" = 0 ] || echo "soak: $missing writes acknowledged by $user's owner are nowhere: $(comm -23 "$W/acked" "$W/kept" | head -5 | tr '\n' ' ')"
  lost=$((lost + missing))
  restarts=$(grep -c '^READY' "$W/$user.log"); [ "$restarts" = 1 ] || { echo "soak: $user's owner started $restarts times"; unexpected=$((unexpected + 1)); }
done
# The third processes: their ledgers against the live store and the user's safety archives.
third_lost=0; third_total=0
for user in "${!third_store[@]}"; do
  name=${third_store[$user]}
  sort -u "$W/$user.ledger" > "$W/acked"
  third_total=$((third_total + $(wc -l < "$W/acked")))
  { sqlite3 "$W/root/$user/$name" 'select seq from ledger_writes' 2>/dev/null
    for archive in "$W/repo/$user"/*-pre-restore.*tar.zst "$W/repo/$user"/*-pre-reset.*tar.zst \
      "$W/repo/$user"/*-pre-restore-delta.*tar.zst "$W/repo/$user"/*-pre-reset-delta.*tar.zst; do
      [ -e "$archive" ] || continue
      x=$(mktemp -d "$W/x.XXXX")
      case $archive in
        *-delta.*tar.zst) # a safety archive that is a delta on the newest backup: restored with its chain
          if "$BIN/granary" restore "$user" "$(basename "$archive")" --to "$x" --root "$W/root" --repo "$W/repo" \
            >>"$W/granary.log" 2>&1; then
            sqlite3 "$x/$name" 'select seq from ledger_writes' 2>/dev/null
          else echo "soak: $user's safety delta $(basename "$archive") does not restore" >&2; fi ;;
        *) tar --zstd -xf "$archive" -C "$x" "stores/$name" 2>/dev/null \
            && sqlite3 "$x/stores/$name" 'select seq from ledger_writes' 2>/dev/null ;;
      esac
      rm -rf "$x"
    done; } | sort -u > "$W/kept"
  missing=$(comm -23 "$W/acked" "$W/kept" | wc -l)
  [ "$missing" = 0 ] || echo "soak: $missing writes acknowledged by the third process on $user/$name (${third_mode[$user]}) are nowhere: $(comm -23 "$W/acked" "$W/kept" | head -5 | tr '\n' ' ')"
  third_lost=$((third_lost + missing))
done
[ "$deltas_read" -ge 2 ] || { echo "soak: the audit restored $deltas_read delta archives (at least 2 expected: the closing chain)"; unexpected=$((unexpected + 1)); }
leftovers=$(find "$W/root" "$W/repo" -name '*.tmp-*' -o -path '*/.granary/restore/*' -o -path '*/.granary/safety-pending/*' | wc -l)
[ "$leftovers" = 0 ] || { echo "soak: leftovers:"; find "$W/root" "$W/repo" -name '*.tmp-*' -o -path '*/.granary/restore/*' -o -path '*/.granary/safety-pending/*' | head; }
held=0; for lock in "$W"/root/.granary/locks/*.lock; do [ -e "$lock" ] && ! flock -n "$lock" true && held=$((held + 1)); done
echo "soak: ${DURATION}s; backups ${count[backup]:-0} (${count[delta]:-0} with --delta; $deltas_read delta archives restored for the audit), verifies ${count[verify]:-0}, restores ${count[restore]:-0}, undos ${count[undo]:-0}, resets ${count[reset]:-0}, prunes ${count[prune]:-0}, kill -9 ${count[kill]:-0}, recovers ${count[recover]:-0}, read-only spells $readonly_spells"
merges=$(grep -c '"merged" :' "$W/granary.log")
echo "soak: prune merged chains of deltas $merges times (each merged archive written, proven, then what it replaced removed)"
echo "soak: third-process writers (outside the protocol): $third_total acknowledged writes, $third_lost lost"
echo "soak: $acked_total acknowledged writes, $lost lost; $checked stores ($bytes bytes) pass integrity_check; $leftovers leftovers, $held locks held; $unexpected unexpected exits; alice's stores split $split times"
[ "$lost" = 0 ] && [ "$third_lost" = 0 ] && [ "$leftovers" = 0 ] && [ "$held" = 0 ] && [ "$unexpected" = 0 ] && [ "$split" = 0 ]
