#!/usr/bin/env python3
"""Derives a broken or hostile archive from a good granary archive, for tests and the corpus.

Usage: tamper-archive.py GOOD_ARCHIVE OUTPUT FAULT

GOOD_ARCHIVE is a .tar.zst (or .tar) written by `granary backup`. OUTPUT is written as a
zstd-compressed tar unless it ends in .tar. FAULT is one of the names in FAULTS below; each
produces exactly one defect, so a reader that rejects it must name that defect.
Only the standard library and the `zstd` command are used.
"""
import hashlib
import io
import json
import subprocess
import sys
import tarfile


def read_members(path):
    raw = open(path, "rb").read()
    if not path.endswith(".tar"):
        raw = subprocess.run(["zstd", "-dc", "-q"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    members = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isfile() else None
            members.append((info, data))
    return members


def write_members(path, members):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buffer.getvalue()
    if not path.endswith(".tar"):
        raw = subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout
    open(path, "wb").write(raw)


def regular(name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    return (info, data)


def manifest_of(members):
    return json.loads(members[0][1])


def encode_manifest(manifest):
    """The manifest as granary writes it: its checksum is the SHA-256 of these bytes with the
    checksum's value left empty, so a tampered manifest here is still well-formed and the one
    fault injected is the one a reader must report."""
    manifest = dict(manifest, checksum="")
    text = json.dumps(manifest, indent=2, sort_keys=True, separators=(",", " : ")) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    return text.replace('"checksum" : ""', '"checksum" : "%s"' % digest, 1).encode()


def with_manifest(members, manifest):
    info, _ = members[0]
    return [(info, encode_manifest(manifest))] + members[1:]


def first_store(members):
    for index, (info, data) in enumerate(members):
        if info.isfile() and info.name.startswith("stores/") and data[:16] == b"SQLite format 3\x00":
            return index
    raise SystemExit("no store in the archive")


def flip_store(members):
    index = first_store(members)
    info, data = members[index]
    data = bytearray(data)
    data[len(data) // 2] ^= 0x01
    members[index] = (info, bytes(data))
    return members


def lie_sha(members):
    manifest = manifest_of(members)
    manifest["files"][0]["sha256"] = hashlib.sha256(b"not the content").hexdigest()
    return with_manifest(members, manifest)


def drop_member(members):
    index = first_store(members)
    return members[:index] + members[index + 1:]


def extra_member(members):
    return members + [regular("stores/extra.txt", b"not in the manifest\n")]


def listed(members, name, data):
    """Adds `name` to the manifest as if it were a good file, so only its name or type is wrong."""
    manifest = manifest_of(members)
    manifest["files"].append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "kind": "external"})
    return with_manifest(members, manifest)


def dotdot(members):
    data = b"escaped\n"
    return listed(members, "stores/../../x", data) + [regular("stores/../../x", data)]


def absolute(members):
    data = b"escaped\n"
    return listed(members, "/tmp/granary-escape-x", data) + [regular("/tmp/granary-escape-x", data)]


def symlink(members):
    info = tarfile.TarInfo("stores/link")
    info.type = tarfile.SYMTYPE
    info.linkname = "/etc/passwd"
    return members + [(info, None)]


def hardlink(members):
    info = tarfile.TarInfo("stores/hard")
    info.type = tarfile.LNKTYPE
    info.linkname = "/etc/passwd"
    return members + [(info, None)]


def fifo(members):
    info = tarfile.TarInfo("stores/fifo")
    info.type = tarfile.FIFOTYPE
    return members + [(info, None)]


def device(members):
    info = tarfile.TarInfo("stores/null")
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    return members + [(info, None)]


def duplicate(members):
    index = first_store(members)
    return members + [members[index]]


def bigger_than_manifest(members):
    index = first_store(members)
    info, data = members[index]
    members[index] = (info, data + b"\0" * (1 << 20))
    return members


def bomb(members):
    """A tiny compressed archive whose one extra store member inflates to 256 MiB of zeros."""
    index = first_store(members)
    info, data = members[index]
    manifest = manifest_of(members)
    members[index] = (info, data + b"\0" * (256 << 20))
    return with_manifest(members, manifest)


def manifest_not_json(members):
    info, _ = members[0]
    return [(info, b"{ this is not json")] + members[1:]


def manifest_newer(members):
    manifest = manifest_of(members)
    manifest["format"] = 99
    return with_manifest(members, manifest)


def manifest_format_0(members):
    manifest = manifest_of(members)
    manifest["format"] = 0
    return with_manifest(members, manifest)


def other_user(members):
    manifest = manifest_of(members)
    manifest["user"] = "mallory@example.com"
    return with_manifest(members, manifest)


def corrupt_db(members):
    """A store whose page 2 is garbage, with the manifest's size and SHA-256 made to match:
    only SQLite's integrity check can find it."""
    index = first_store(members)
    info, data = members[index]
    page = int.from_bytes(data[16:18], "big") or 65536
    data = data[:page] + b"\xa5" * page + data[2 * page:]
    members[index] = (info, data)
    manifest = manifest_of(members)
    for entry in manifest["files"]:
        if entry["path"] == info.name:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
            entry["size"] = len(data)
    return with_manifest(members, manifest)


def dotdot_unlisted(members):
    return members + [regular("stores/../../x", b"escaped\n")]


def manifest_not_first(members):
    return members[1:] + members[:1]


FAULTS = {
    "flip-store": flip_store, "lie-sha": lie_sha, "drop-member": drop_member, "extra-member": extra_member,
    "dotdot": dotdot, "absolute": absolute, "symlink": symlink, "hardlink": hardlink, "fifo": fifo,
    "device": device, "duplicate": duplicate, "bigger-than-manifest": bigger_than_manifest, "bomb": bomb,
    "manifest-not-json": manifest_not_json, "manifest-newer": manifest_newer,
    "manifest-format-0": manifest_format_0, "other-user": other_user,
    "manifest-not-first": manifest_not_first, "corrupt-db": corrupt_db, "dotdot-unlisted": dotdot_unlisted,
}


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in FAULTS:
        raise SystemExit(__doc__ + "\nfaults: " + " ".join(sorted(FAULTS)))
    source, output, fault = sys.argv[1:]
    write_members(output, FAULTS[fault](read_members(source)))


if __name__ == "__main__":
    main()
