#!/usr/bin/env python3
"""Checks which folders of Sources/GranaryKit use which (docs/ARCHITECTURE.md, "Layers").

A folder uses another when one of its files names a type declared at the top level of a file
in the other (comments and string literals left out). Each folder may use the folders of its
own layer and of the layers below; a use of a folder above is allowed only when it is listed
in UPWARD with the reason, by file and type. A new use that breaks the layering fails
`make lint`, naming the file and the type; so does an entry of UPWARD nothing needs any more.
Delta/ has rules of its own (DELTA_USES, DELTA_USERS, DELTA_IMPORTS: what it may use of the
folders beside it, who may use it, which modules it may import, and that it alone imports
CPageHash), and every invariant of docs/delta-invariants.md must be cited by the code that keeps
it (`// Invariant D3 (docs/delta-invariants.md)`), every citation naming one listed there. It
also refuses an unsafe pointer in GranaryKit's public interface (a `public` declaration naming an `Unsafe…Pointer`, `OpaquePointer` or `dirent`): embedders get safe types.
Usage: check-layers.py [Sources/GranaryKit]
"""
import os
import re
import sys

LAYERS = [
    # 1. Foundations: granary's own files, the trust boundary, SQLite, the archive format.
    {"Support", "Users", "SQLite", "Archive", "Samples"},
    # 2. Where archives live, and reading them; delta archives' chains (issue 35: written by
    # backup, rebuilt by restore, read by verify, prune and inspect).
    {"Repository", "Catalogue", "Delta"},
    # 3. The operations that change a user's folder or the repository.
    {"Backup", "FastPath", "Isolation", "Restore", "Lifecycle", "Follow"},
]

# Uses of a folder above, each with its reason: (file, type) -> why.
UPWARD = {
    ("Support/SHA256Hex.swift", "MappedReader"): "hashing reads through the fast path's mapped reader",
    ("Archive/ArchiveWriter.swift", "MappedReader"): "the archive writer reads through the mapped reader",
    ("Repository/LocalRepository.swift", "StaleTemporaries"): "a repository removes the temporaries of dead backups",
    ("Repository/RcloneRepository.swift", "StaleTemporaries"): "as above, remotely",
    ("Repository/MirrorSync.swift", "UnexpectedError"): "sync reports a user's unexpected failure as backup does",
    ("Repository/Hosts.swift", "UnexpectedError"): "adopt reports a user's unexpected failure as backup does",
    ("Archive/Manifest.swift", "DeltaInfo"): "the manifest of a delta archive (format 3) says what it is built on",
    ("Catalogue/ArchiveRemoval.swift", "Retirement"): "prune keeps a retired user's final archive (its rule)",
    ("Catalogue/Freshness.swift", "Retirement"): "check counts a retired user's final archive",
    ("Catalogue/Freshness.swift", "Recovery"): "check reports users with an unfinished restore or retire",
    ("Catalogue/Inventory.swift", "Retirement"): "users lists retired users",
    ("Catalogue/FollowedRetention.swift", "FollowStatus"):
        "prune keeps the base of the generation a follower says it follows (its state file)",
    ("Repository/ArchiveBuilder.swift", "BackupError"):
        "a failed check is the backup's checkFailed, whichever archive is built (its exit status and hint)",
}

# Within the operations layer, who may use whom (the rest of a layer uses itself freely).
OPERATIONS = {
    "Backup": {"FastPath", "Isolation"},
    "FastPath": {"Backup"},
    "Isolation": {"Backup"},
    "Restore": set(),
    "Lifecycle": {"Backup", "FastPath", "Restore"},
    # follow starts each generation with a backup and restore --at replays onto a restore.
    "Follow": {"Backup", "FastPath", "Isolation", "Restore"},
}
# Operations' uses against that order, each with its reason.
SIDEWAYS = {
    ("Backup/BackupOperation.swift", "Recovery"):
        "every operation first finishes what stopped (Recovery: a restore's or a retire's journal)",
    ("Restore/Recovery.swift", "Retirement"): "recovery finishes a retire that stopped (Retirement.recover)",
}

# Delta/ (delta archives, issue 35) within the middle layer. It builds on where archives live
# (every type of Repository) and on verify's member checks, nothing else of Catalogue: a delta's
# members are checked as any archive's are (its chains are then read by verify, prune and inspect
# through Delta's own entry points).
DELTA_USES = {
    "Repository": None,  # all of it
    "Catalogue": {"ArchiveVerifier", "MemberSink", "OverlappedSink", "VerificationFailure", "VerificationRecord"},
}
# Who may use Delta: the operations that write and rebuild chains (backup, restore: not the fast
# path, which writes nothing different, nor retire or follow, whose archives are plain fulls and
# whose backups go through BackupOperation), the catalogue that reads them,
# and of the repository folder only sync (chains go to a mirror whole), the repository's
# interface and its one manifest reader, ArchiveHead (a name its manifest contradicts is refused
# in DeltaRestore.impostor's words). The foundations use it only
# through UPWARD (the manifest's DeltaInfo).
DELTA_USERS = {"Backup", "Restore", "Catalogue", "Follow/FollowedPages.swift",
               "Repository/MirrorSync.swift", "Repository/Repository.swift", "Repository/ArchiveHead.swift"}
# The modules Delta may import: no libarchive (archives are read through Archive/), no CBeneath
# (a user's folder only through Users/ and SQLite/). CPageHash is Delta's alone (PageHash).
DELTA_IMPORTS = {"Foundation", "Glibc", "Synchronization", "GranaryDigest", "CSQLite", "CSnapshotTee", "CPageHash", "CLinux"}
ONLY_DELTA_IMPORTS = {"CPageHash"}

base = sys.argv[1] if len(sys.argv) > 1 else "Sources/GranaryKit"
layer_of = {folder: index for index, layer in enumerate(LAYERS) for folder in layer}
declared = {}
texts = {}
for folder in sorted(os.listdir(base)):
    for name in sorted(os.listdir(os.path.join(base, folder))):
        path = os.path.join(base, folder, name)
        text = open(path).read()
        texts[folder + "/" + name] = text
        for m in re.finditer(r"^(?:public |internal |package )?(?:final )?(?:struct|enum|class|actor|protocol|typealias)\s+"
                             r"([A-Z]\w*)", text, re.M):
            declared.setdefault(m.group(1), folder)

problems = []
used_exceptions = set()
for file, text in sorted(texts.items()):
    folder = file.split("/")[0]
    if folder not in layer_of:
        problems.append(f"{file}: the folder {folder} has no layer in scripts/check-layers.py")
        continue
    code = re.sub(r"//.*", "", text)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', code)
    for type_name, other in sorted(declared.items()):
        if other == folder or not re.search(r"(?<![.\w])" + type_name + r"\b", code):
            continue
        key = (file, type_name)
        if layer_of[other] > layer_of[folder]:
            if key in UPWARD:
                used_exceptions.add(key)
            else:
                problems.append(f"{file} uses {type_name} ({other}), a layer above {folder}")
        elif layer_of[other] == layer_of[folder] == 2 and other not in OPERATIONS[folder]:
            if key in SIDEWAYS:
                used_exceptions.add(key)
            else:
                problems.append(f"{file} uses {type_name} ({other}): {folder} may use only {sorted(OPERATIONS[folder])}")
for file, text in sorted(texts.items()):
    folder = file.split("/")[0]
    code = re.sub(r"//.*", "", text)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', code)
    for type_name, other in sorted(declared.items()):
        if other == folder or "Delta" not in (folder, other) or folder not in layer_of:
            continue
        if layer_of[folder] < layer_of[other] or (folder == "Delta" and layer_of[other] < layer_of[folder]):
            continue  # the foundations (UPWARD) and what Delta uses below its layer
        if not re.search(r"(?<![.\w])" + type_name + r"\b", code):
            continue
        if folder == "Delta":
            allowed = DELTA_USES.get(other, set())
            if allowed is not None and type_name not in allowed:
                problems.append(f"{file} uses {type_name} ({other}): Delta may use only {sorted(DELTA_USES)} "
                                f"(of Catalogue: {sorted(DELTA_USES['Catalogue'])})")
        elif folder not in DELTA_USERS and file not in DELTA_USERS:
            problems.append(f"{file} uses {type_name} (Delta): only {sorted(DELTA_USERS)} may use Delta")
    for module in re.findall(r"^\s*import\s+(\w+)", code, re.M):
        if folder == "Delta" and module not in DELTA_IMPORTS:
            problems.append(f"{file} imports {module}: Delta imports only {sorted(DELTA_IMPORTS)}")
        if folder != "Delta" and module in ONLY_DELTA_IMPORTS:
            problems.append(f"{file} imports {module}, which only Delta imports")
for file, text in sorted(texts.items()):
    code = re.sub(r"//.*", "", text)
    for number, line in enumerate(code.split("\n"), 1):
        if re.search(r"\bpublic\b", line) and re.search(r"\bUnsafe\w*Pointer\b|\bOpaquePointer\b|\bdirent\b", line):
            problems.append(f"{file}:{number}: an unsafe pointer in GranaryKit's public interface: {line.strip()}")
# Every invariant of docs/delta-invariants.md is cited by the code that keeps it, and every
# citation names one that is there.
invariants_doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "delta-invariants.md")
if os.path.exists(invariants_doc):
    listed = set(re.findall(r"^\*\*(D\d+)\.", open(invariants_doc).read(), re.M))
    cited = {}
    for file, text in texts.items():
        for name in re.findall(r"//+ Invariant (D\d+) \(docs/delta-invariants\.md\)", text):
            cited.setdefault(name, file)
    for name in sorted(listed - set(cited)):
        problems.append(f"docs/delta-invariants.md: {name} is cited by no code (// Invariant {name} (docs/delta-invariants.md))")
    for name in sorted(set(cited) - listed):
        problems.append(f"{cited[name]}: cites Invariant {name}, which docs/delta-invariants.md does not list")
for key in sorted(set(UPWARD) | set(SIDEWAYS)):
    if key not in used_exceptions:
        problems.append(f"{key[0]} no longer uses {key[1]}: remove it from scripts/check-layers.py")
if problems:
    print("\n".join(problems))
    print("see docs/ARCHITECTURE.md, Layers")
    sys.exit(1)
