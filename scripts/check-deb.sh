#!/usr/bin/env bash
# make check-deb: installs the .deb into a scratch root and runs what it installed there, with the
# Swift toolchain hidden (scripts/check-installed.sh does the checks).
#
# The scratch root is this machine's / seen through an overlay whose writes go to a tmpfs, in a
# private mount namespace: `dpkg -i` runs for real there (Depends checked against this host's
# packages, maintainer scripts run, the conffile registered) and everything it did is gone when
# the namespace ends. An empty tmpfs is mounted over the toolchain's folder inside it, so a
# binary that needed libswiftCore.so would fail to start.
#   Usage: bash scripts/check-deb.sh DEB SAMPLE_BIN   (SAMPLE_BIN: where granary-sample is)
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(readlink -f "$1")
sample_bin=$(cd "$2" && pwd)
[ "$(id -u)" = 0 ] || { echo "check-deb needs root (a mount namespace and dpkg -i in a scratch root)" >&2; exit 77; }

# The toolchain's folder, as `swift` on PATH finds it (/opt/swift/usr here).
toolchain=$(dirname "$(dirname "$(readlink -f "$(command -v "${SWIFT:-swift}")")")")
version=$(dpkg-deb --field "$deb" Version)

work=$(mktemp -d /tmp/granary-check-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The sample users, made with the build's granary-sample (a demo tool, not in the package).
mkdir -p "$work/data"
"$sample_bin/granary-sample" "$work/data/root" > /dev/null
mkdir -p "$work/data/repo"
cp "$deb" "$work/data/granary.deb"
cp scripts/check-installed.sh "$work/data/"

unshare --mount --propagation private bash -euo pipefail -c '
    work=$1 toolchain=$2 version=$3
    scratch=$work/scratch
    mkdir -p "$scratch"
    mount -t tmpfs -o size=2g granary-scratch "$scratch"
    mkdir -p "$scratch/upper" "$scratch/work" "$scratch/root"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root"
    root=$scratch/root
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t sysfs sysfs "$root/sys"
    mount -t tmpfs tmpfs "$root/run"
    mount -t tmpfs tmpfs "$root/tmp"
    mkdir -p "$root/srv/granary-check"
    mount --bind "$work/data" "$root/srv/granary-check"
    # The toolchain hidden: an empty folder where it was.
    mkdir -p "$root$toolchain"
    mount -t tmpfs -o ro,size=1m no-toolchain "$root$toolchain"
    chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        bash /srv/granary-check/check-installed.sh /srv/granary-check "$toolchain" "$version"
' check-deb "$work" "$toolchain" "$version"
