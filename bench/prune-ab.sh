#!/usr/bin/env bash
# Prune A/B on one faked week (issue 49): SAVED is what `WEEK_SAVE=SAVED bench/week.sh` kept
# before its prunes; A and B are two folders of release binaries (before and after a change).
# Each round prunes a fresh copy of the saved repository with A and with B (in alternating
# order), and a fresh copy of restic's with `restic forget --keep-hourly 24 --keep-daily 7
# --prune`, each at the week's end (faked clock), and prints the times, space and archives
# left; then the medians. ROUNDS (default 3).
#
# A copy (cp -a) is another file for every archive: its verification records, which hold the
# archive's device, inode and change time, would no longer apply, and the chains would count as
# changed. Each copy's records are given the copy's identity first, which is what they would
# hold had the copy been the original: the runs prune what the week left.
set -euo pipefail
SAVED=$1; A=$2; B=$3; ROUNDS=${ROUNDS:-3}
export TZ=UTC NO_FAKE_STAT=1 RESTIC_PASSWORD=granary-bench
source "$SAVED/end"
T=$(mktemp -d /var/tmp/granary-prune-ab.XXXXXX); trap 'rm -rf "$T"' EXIT
export RESTIC_CACHE_DIR="$T/restic-cache"
now() { date +%s.%N; }
identities() { python3 - "$1" <<'PY'
import os, re, sys
for folder, _, files in os.walk(sys.argv[1]):
    for name in files:
        if not (name.startswith('.') and name.endswith('.verify.json')):
            continue
        archive = os.path.join(folder, name[1:-len('.verify.json')])
        if not os.path.exists(archive):
            continue
        info = os.stat(archive)
        path = os.path.join(folder, name)
        text = open(path).read()
        fixed = re.sub(r'"archiveIdentity" : "[^"]*"',
                       f'"archiveIdentity" : "{info.st_dev}:{info.st_ino}:{info.st_ctime_ns}"', text)
        if fixed != text:
            open(path, 'w').write(fixed)
PY
}
granary() { # LABEL BIN
    rm -rf "$T/repo"; cp -a "$SAVED/repo" "$T/repo"; identities "$T/repo"; sync; sleep 1
    local t0 t1; t0=$(now)
    faketime "$end" "$2/granary" --root "$SAVED/root" --repo "$T/repo" prune --all --keep-hourly 24 --keep-daily 7 -q
    t1=$(now)
    echo "$1 $(echo "$t1 - $t0" | bc) $(du -sb "$T/repo" | cut -f1) $(find "$T/repo" -name '*.tar.zst' | wc -l)" | tee -a "$T/times"
}
restic_() {
    rm -rf "$T/restic"; cp -a "$SAVED/restic" "$T/restic"; sync; sleep 1
    local t0 t1; t0=$(now)
    RESTIC_REPOSITORY="$T/restic" faketime "$end" restic forget -q --keep-hourly 24 --keep-daily 7 --prune > /dev/null
    t1=$(now)
    echo "restic $(echo "$t1 - $t0" | bc) $(du -sb "$T/restic" | cut -f1)" | tee -a "$T/times"
}
echo "label seconds bytes archives"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then granary A "$A"; granary B "$B"; else granary B "$B"; granary A "$A"; fi
    restic_
done
# Every archive B left restores (its chain whole).
if [ $((ROUNDS % 2)) = 0 ]; then granary B "$B" > /dev/null; sed -i '$d' "$T/times"; fi
faketime "$end" "$B/granary" --root "$SAVED/root" --repo "$T/repo" verify --all --chain -q > /dev/null \
    || { echo "verify --chain after B's prune FAILED"; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
a=$(awk '$1 == "A" {print $2}' "$T/times" | median); b=$(awk '$1 == "B" {print $2}' "$T/times" | median)
r=$(awk '$1 == "restic" {print $2}' "$T/times" | median)
printf "medians of %d rounds: A %.2f s (%.2fx restic), B %.2f s (%.2fx restic), restic %.2f s; B/A %.2f\n" \
    "$ROUNDS" "$a" "$(echo "$a / $r" | bc -l)" "$b" "$(echo "$b / $r" | bc -l)" "$r" "$(echo "$b / $a" | bc -l)"
