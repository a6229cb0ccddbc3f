#!/usr/bin/env bash
# Run by scripts/check-deb.sh inside the scratch root (a chroot with the toolchain hidden):
# installs the .deb with dpkg, then checks what it installed, as an admin would use it.
#   Usage: check-installed.sh DATA TOOLCHAIN VERSION
#   DATA holds granary.deb, the sample users (root/) and an empty repository (repo/).
set -euo pipefail
data=$1 toolchain=$2 version=$3
checks=0 failed=0
pass() { checks=$((checks + 1)); echo "ok   $1"; }
fail() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $1" >&2; }
check() { # check DESCRIPTION COMMAND...: passes when the command exits 0
    local what=$1; shift
    if "$@" > /tmp/out 2>&1; then pass "$what"; else fail "$what: $(head -c 600 /tmp/out)"; fi
}

# The toolchain is hidden: granary must not need it.
if [ -e "$toolchain/lib/swift" ] || [ -n "$(ls -A "$toolchain")" ] || command -v swift > /dev/null; then
    echo "the toolchain at $toolchain is still visible: the check would prove nothing" >&2
    exit 1
fi
pass "the toolchain ($toolchain) is hidden"

export DEBIAN_FRONTEND=noninteractive
check "dpkg -i granary.deb (Depends met by this host's packages, maintainer scripts run)" \
    dpkg -i "$data/granary.deb"

# Binaries: start without Swift's libraries.
for tool in granary granary-reopen-check; do
    if ldd "/usr/bin/$tool" | grep -qi swift; then
        fail "ldd /usr/bin/$tool names a Swift library: $(ldd "/usr/bin/$tool" | grep -i swift | tr '\n' ' ')"
    else
        pass "ldd /usr/bin/$tool: $(ldd "/usr/bin/$tool" | awk '{print $1}' | tr '\n' ' ')"
    fi
done
check "granary --version prints $version" bash -c "[ \"\$(granary --version)\" = '$version' ]"
check "granary --help" bash -c 'granary --help | grep -q "USAGE: granary"'
check "granary-reopen-check --help" bash -c 'granary-reopen-check --help | grep -qi usage'

# A backup and a restore of the sample users, with the installed binary.
G() { granary "$1" --root "$data/root" --repo "$data/repo" "${@:2}"; }
user=alice@example.com
store=$data/root/$user/Local.sqlite
dump() { sqlite3 "$1" .dump | sha256sum; }
before=$(dump "$store")
check "granary init makes the repository" granary init "$data/repo"
check "granary backup --all of the sample users" G backup --all
check "granary verify --all --latest" G verify --all --latest
sqlite3 "$store" "PRAGMA journal_mode" > /dev/null
tables=$(sqlite3 "$store" "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
for table in $tables; do sqlite3 "$store" "DELETE FROM \"$table\""; done
[ "$(dump "$store")" != "$before" ] || fail "emptying $user's store changed nothing: the restore below would prove nothing"
check "granary restore $user" G restore "$user"
check "the restored store holds what was backed up" bash -c "[ \"\$(sqlite3 '$store' .dump | sha256sum)\" = '$before' ]"

# Man pages, as man reads them.
check "man -l granary.1" bash -c 'MANPAGER=cat MANWIDTH=80 man -l /usr/share/man/man1/granary.1.gz | grep -q "EXIT STATUS"'
check "man granary-backup finds the installed page" bash -c 'MANPAGER=cat man granary-backup | grep -q "granary backup"'
check "man 5 granary.toml" bash -c 'MANPAGER=cat man 5 granary.toml | grep -q keep_within'
check "man 7 granary-reopen" bash -c 'MANPAGER=cat man 7 granary-reopen | grep -qi reopen'

# Every path of a granary binary that the installed pages name (man pages, README, docs, the
# units) is one the package installed: a cron line copied from them must not exit 127. A
# /usr/local/bin path is allowed only within three lines of `make install`, which puts it there.
stray=/tmp/stray-paths
: > "$stray"
for page in $(dpkg -L granary | grep -E '^/usr/share/(man|doc/granary)/|/systemd/system/granary-' | sort); do
    [ -f "$page" ] || continue
    zcat -f "$page" | awk -v page="$page" '
        { line[NR] = $0 }
        END {
            for (i = 1; i <= NR; i++) {
                rest = line[i]
                while (match(rest, /\/usr\/(local\/)?s?bin\/granary[a-z-]*/)) {
                    path = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
                    if (system("test -e " path) == 0) continue
                    near = ""
                    for (j = i - 3; j <= i + 3; j++) if (j in line) near = near " " line[j]
                    if (path ~ /^\/usr\/local\/bin\// && near ~ /make install/) continue
                    printf "%s:%d: %s\n", page, i, path
                }
            }
        }' >> "$stray"
done
if [ ! -s "$stray" ]; then pass "every granary path in the installed pages and units is installed (/usr/local/bin only beside make install)"
else fail "the installed pages name paths the package does not install: $(tr '\n' ' ' < "$stray")"; fi

# Completions, from the installed files, where each shell looks by itself.
check "bash completes 'granary ba' to backup (installed bash-completion file)" bash -c '
    source /usr/share/bash-completion/completions/granary
    COMP_WORDS=(granary ba); COMP_CWORD=1; COMP_LINE="granary ba"; COMP_POINT=${#COMP_LINE}
    _granary granary ba granary
    printf "%s\n" "${COMPREPLY[@]}" | grep -qx backup'
check "bash completes 'granary restore al' to $user (the installed binary asked)" bash -c "
    source /usr/share/bash-completion/completions/granary
    export GRANARY_ROOT='$data/root' GRANARY_REPO='$data/repo'
    COMP_WORDS=(granary restore al); COMP_CWORD=2; COMP_LINE='granary restore al'; COMP_POINT=\${#COMP_LINE}
    _granary granary al restore
    printf '%s\n' \"\${COMPREPLY[@]}\" | grep -qx '$user'"
if command -v fish > /dev/null; then
    check "fish finds the installed completion by itself" bash -c \
        'HOME=$(mktemp -d) fish -c "complete -C \"granary ba\"" | grep -q "^backup"'
fi
if command -v zsh > /dev/null; then
    check "zsh's own fpath holds the installed _granary" bash -c \
        'zsh -fc '"'"'for d in $fpath; do [[ -f $d/_granary ]] && exit 0; done; exit 1'"'"
fi

# The configuration file: a conffile, commented, and every setting in it valid when uncommented.
check "/etc/granary/config.toml is a conffile" bash -c 'dpkg-query -W -f="\${Conffiles}" granary | grep -q /etc/granary/config.toml'
check "granary config reads the installed /etc/granary/config.toml" \
    granary config --config /etc/granary/config.toml
sed 's/^#\([^ #!]\)/\1/' /etc/granary/config.toml | grep -v '^#' > /tmp/uncommented.toml
check "every commented setting of config.toml is valid when uncommented" \
    granary config --config /tmp/uncommented.toml

# systemd units: installed, disabled, valid.
units=$(dpkg -L granary | grep -E '/systemd/system/granary-[a-z]+\.(service|timer)$' | sort)
[ "$(echo "$units" | wc -l)" = 11 ] && pass "eleven units installed: $(echo $units | xargs -n1 basename | tr '\n' ' ')" \
    || fail "expected granary-{backup,prune,sync,verify,check}.{service,timer} and granary-follow.service, found: $units"
if ls /etc/systemd/system/*.wants/granary-* > /dev/null 2>&1; then
    fail "a granary unit is enabled after installing: $(ls /etc/systemd/system/*.wants/granary-*)"
else
    pass "no granary unit is enabled after installing"
fi
if command -v systemd-analyze > /dev/null; then
    # shellcheck disable=SC2086
    check "systemd-analyze verify the installed units" systemd-analyze verify $units
    # Every service sandboxed: exposure 3.0 or less by systemd's own measure (docs/security.md).
    for service in $(echo "$units" | grep '\.service$'); do
        score=$(systemd-analyze security --offline=yes "$service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }'; then pass "systemd-analyze security $(basename "$service"): $score"
        else fail "systemd-analyze security $(basename "$service"): exposure ${score:-unknown}, above 3.0"; fi
    done
fi

check "dpkg --purge granary removes it, the conffile too" bash -c \
    'dpkg --purge granary && [ ! -e /usr/bin/granary ] && [ ! -e /etc/granary/config.toml ]'

echo "$((checks - failed)) passed, $failed failed"
[ "$failed" = 0 ]
