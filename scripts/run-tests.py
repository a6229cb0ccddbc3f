#!/usr/bin/env python3
"""Runs the package's tests (already built) in several test processes at once: `make test`.

Most of the suite waits: on granary, owners and helpers it starts, on locks and leases. Swift
Testing runs a process's tests on Swift's cooperative pool, one thread per core, and a test that
waits for a child process keeps its thread; on two cores, one process left the machine idle half
of the time. So the suites are handed out, largest first, to TEST_JOBS test processes running at
once (default 6). A suite stays whole in one process, with its traits (`.serialized` included);
a suite made only of nested suites (the attack suite) is handed out by its nested suites, each
of which stays whole.

Each suite's output goes to .build/test-logs/<suite>.log. A line per suite says how it ended; a
failing suite's log is printed whole at the end. The run fails if any suite failed, crashed or
ran fewer tests than it lists.

Usage: scripts/run-tests.py BINARY [FILTER]   (FILTER: a regular expression over suite names)
"""

import concurrent.futures
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Seconds each suite took alone in a run of this script (written by it, committed): the longest
# start first, so that the run does not end waiting for one long suite started last.
TIMES = os.path.join(HERE, "test-times.txt")


def list_tests(binary):
    out = subprocess.run(
        [binary, "--testing-library", "swift-testing", "--list-tests"],
        check=True, capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def units_of(tests):
    """The suite (all of a test's ID but its function) each test belongs to, and its count."""
    units = {}
    for test in tests:
        unit = test.rsplit("/", 1)[0]
        units[unit] = units.get(unit, 0) + 1
    return units


def known_times():
    times = {}
    if os.path.exists(TIMES):
        for line in open(TIMES, encoding="utf-8"):
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#"):
                times[parts[1]] = float(parts[0])
    return times


def run_unit(binary, unit, logs):
    log = os.path.join(logs, unit.replace("/", "_") + ".log")
    pattern = "^" + re.escape(unit) + "/"
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        status = subprocess.run(
            [binary, "--testing-library", "swift-testing", "--filter", pattern],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    seconds = time.monotonic() - started
    text = open(log, encoding="utf-8", errors="replace").read()
    ran = re.search(r"Test run with (\d+) tests?", text)
    skipped = len(re.findall(r"^\S* ?Test .* skipped", text, re.MULTILINE))
    return unit, status, seconds, int(ran.group(1)) if ran else 0, skipped, log


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    only = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
    jobs = int(os.environ.get("TEST_JOBS", "6"))
    tests = list_tests(binary)
    units = units_of(tests)
    if only:
        units = {unit: count for unit, count in units.items() if only.search(unit)}
    times = known_times()
    order = sorted(units, key=lambda unit: (-times.get(unit, 30.0), unit))
    logs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))), "test-logs")
    os.makedirs(logs, exist_ok=True)
    total = sum(units.values())
    print(f"{total} tests in {len(units)} suites, {jobs} test processes at once (logs: {logs})", flush=True)
    started = time.monotonic()
    failed = []
    measured = {}
    skips = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_unit, binary, unit, logs) for unit in order]
        for future in concurrent.futures.as_completed(futures):
            unit, status, seconds, ran, skipped, log = future.result()
            measured[unit] = seconds
            skips += skipped
            ok = status == 0 and ran == units[unit]
            mark = "ok  " if ok else "FAIL"
            why = "" if ok else f" (exit status {status}, {ran} of {units[unit]} tests ran)"
            said = f", {skipped} skipped (the log says why)" if skipped else ""
            print(f"{mark} {unit}: {units[unit]} tests{said}, {seconds:.0f} s{why}", flush=True)
            if not ok:
                failed.append((unit, log))
    elapsed = time.monotonic() - started
    if os.environ.get("TEST_TIMES_WRITE") == "1":
        with open(TIMES, "w", encoding="utf-8") as out:
            out.write("# seconds each suite took in scripts/run-tests.py (TEST_TIMES_WRITE=1 rewrites it)\n")
            for unit in sorted(measured, key=lambda unit: -measured[unit]):
                out.write(f"{measured[unit]:.0f} {unit}\n")
    for unit, log in failed:
        print(f"\n===== {unit} ({log}) =====", flush=True)
        sys.stdout.write(open(log, encoding="utf-8", errors="replace").read())
    if failed:
        print(f"\n{len(failed)} of {len(units)} suites failed: {', '.join(unit for unit, _ in failed)}")
        sys.exit(1)
    said = f" ({skips} skipped: their logs say why)" if skips else ""
    print(f"all {total} tests in {len(units)} suites passed in {elapsed:.0f} s{said}")


if __name__ == "__main__":
    main()
