#!/usr/bin/env bash
# make bench, hostile part (issue 24): `backup --all` of 50 honest users with one hostile user
# among them, whose 40 KiB store has an expression index that costs ~0.1 s and 40 MB per row to
# check (2,000 rows: over 3 minutes unbounded). With the default limits the hostile store stops at
# its time budget (30 s for a store that small) and the run goes on: the whole run must take no
# longer than the honest users alone plus that budget.
# The check is `full` (an expression index is evaluated by integrity_check, not quick_check).
# BENCH_USERS=50 honest users of BENCH_USER_MB=8 MiB each.
set -euo pipefail
USERS=${BENCH_USERS:-50}
USER_MB=${BENCH_USER_MB:-8}
BIN=${BIN:-$(swift build -c release --show-bin-path)}
W=$(mktemp -d /var/tmp/granary-bench-hostile.XXXXXX); trap 'rm -rf "$W"' EXIT
now() { date +%s.%N; }
mkdir -p "$W/honest" "$W/all"
"$BIN/granary-sample" big "$W/template.db" "$USER_MB" > /dev/null
for n in $(seq -w 1 "$USERS"); do
  mkdir -p "$W/honest/user$n@example.com"
  cp "$W/template.db" "$W/honest/user$n@example.com/Local.sqlite"
done
cp -a "$W/honest/." "$W/all/"
hostile="$W/all/mallory@example.com"
mkdir -p "$hostile"
# Written under a cheap expression of the same value, then the expensive one swapped in
# (writable_schema): the sound store an author could make, without the bench paying for its
# creation; a check that ran to its end would pass.
sqlite3 "$hostile/Slow.sqlite" "
  CREATE TABLE t(x INTEGER);
  CREATE INDEX slow ON t((2 * (20000000 + x)));
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT i FROM n;
  PRAGMA writable_schema=ON;
  UPDATE sqlite_schema SET sql = replace(sql, '(2 * (20000000 + x))', '(length(hex(zeroblob(20000000 + x))))');
  PRAGMA writable_schema=OFF;"
budget=$("$BIN/granary" config --root "$W/all" --json | python3 -c 'import json,sys
s={e["key"]: e.get("value") for e in json.load(sys.stdin)["settings"]}
t=s["limits.time"]; print(t)')
sync
"$BIN/granary" init "$W/repo-honest" "$W/repo-all" > /dev/null
t0=$(now); "$BIN/granary" backup --all --check full --root "$W/honest" --repo "$W/repo-honest"; t1=$(now)
honest=$(echo "$t1 - $t0" | bc)
sync
t0=$(now); set +e
"$BIN/granary" backup --all --check full --root "$W/all" --repo "$W/repo-all" 2> "$W/errors"; status=$?
set -e; t1=$(now)
all=$(echo "$t1 - $t0" | bc)
archived=$(find "$W/repo-all" -name '*.tar.zst' -not -path '*/.granary-tmp/*' | wc -l)
seconds=$(python3 -c "import re,sys; m=re.fullmatch(r'(?:(\d+)m)?(\d+)s', sys.argv[1]); print(int(m[1] or 0)*60+int(m[2]))" "$budget")
echo "backup --all --check full: $USERS honest users of $USER_MB MiB alone $(printf %.2f "$honest") s;"
echo "  with mallory (a 40 KiB store, expression index of ~0.1 s per row, 2000 rows) $(printf %.2f "$all") s, exit $status,"
echo "  $archived of $USERS honest users archived; mallory: $(sed -n 's/^granary: //p' "$W/errors" | head -1)"
echo "  hostile budget ([limits] time for a store that small) $budget; honest time + budget $(echo "$honest + $seconds" | bc) s"
echo "  target: the run within the hostile budget plus the honest users' own time: $(if [ "$(echo "$all <= $honest + $seconds" | bc)" = 1 ]; then echo met; else echo "missed by $(echo "$all - $honest - $seconds" | bc) s"; fi)"
