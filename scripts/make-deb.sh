#!/usr/bin/env bash
# make deb: granary_VERSION_ARCH.deb from the release binaries in BIN (make release), built by
# debhelper (debian/rules) in a staging copy under .build-deb/, so that dpkg-buildpackage writes
# nothing beside the source tree. Then lintian, which must be clean.
#   Usage: bash scripts/make-deb.sh BIN   → prints the .deb's path on its last line
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "$1" && pwd)
out=$PWD/.build-deb

# The version is the tool's own: what `granary --version` prints (GranaryVersion.current).
version=$("$bin/granary" --version)
[[ $version =~ ^[0-9][0-9A-Za-z.+~]*$ ]] || { echo "granary --version printed '$version', not a Debian version" >&2; exit 1; }

stage=$out/granary-$version
rm -rf "$out" && mkdir -p "$stage"
cp -r debian man completions examples docs README.md CHANGELOG.md "$stage/"

# The licence texts of what the binaries link statically (debian/copyright lists them).
third=$stage/third-party
mkdir -p "$third"
swift_root=$(dirname "$(dirname "$(readlink -f "$(command -v "${SWIFT:-swift}")")")")
cp "$swift_root/share/swift/LICENSE.txt" "$third/swift-toolchain.LICENSE.txt"
for package in swift-argument-parser tomlkit; do
    checkout=$(find .build/checkouts -maxdepth 1 -iname "$package" | head -n 1)
    [ -n "$checkout" ] || { echo "no checkout of $package in .build/checkouts: run make release first" >&2; exit 1; }
    for file in "$checkout"/LICENSE* "$checkout"/NOTICE*; do
        [ -f "$file" ] && cp "$file" "$third/$package.$(basename "$file")"
    done
done
echo "third-party" >> "$stage/debian/granary.docs"

# debian/changelog: this version, dated by the commit it is built from (reproducible).
date=$(git log -1 --format=%cD 2>/dev/null || date -R)
cat > "$stage/debian/changelog" <<EOF
granary ($version) unstable; urgency=medium

  * granary $version; the changes are in /usr/share/doc/granary/changelog.gz.

 -- granary authors <granary@example.org>  $date
EOF

SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH GRANARY_BIN=$bin
(cd "$stage" && dpkg-buildpackage --build=binary --no-sign --no-pre-clean) > "$out/build.log" 2>&1 \
    || { tail -n 40 "$out/build.log" >&2; echo "dpkg-buildpackage failed: the whole log is $out/build.log" >&2; exit 1; }

deb=$(ls "$out"/granary_"$version"_*.deb)
# lintian: no error, no warning; what remains of lower severity is shown (see
# debian/granary.lintian-overrides for what is overridden and why).
lintian --fail-on error,warning --display-info --info "$deb" "$out"/*.changes || {
    echo "lintian found problems in $deb" >&2
    exit 1
}
echo "$deb"
