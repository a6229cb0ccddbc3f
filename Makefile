# granary — the words a newcomer would guess.
#   make demo     set up, build, make sample data and run granary on it
#   make test     set up, build and run every test
#   make test-slow the slow proofs (delta archives over 1 GiB, more seeds); make soak: granary under load
#   make bench    compare granary with the pipeline a user would otherwise write
#   make tsan     the thread sanitizer over the concurrent parts (CI runs it)
#   make install  PREFIX=/usr/local (DESTDIR supported); make uninstall
#                 (granary, granary-reopen-check, the man pages and completions)
#   make deb      a Debian package (.build-deb/granary_*.deb: apt install ./granary_*.deb)
#   make generate regenerate completions/ and man/ from the command declarations
#   make lint     check the sources against .swift-format (make format rewrites them so)

SWIFT     ?= swift
PREFIX    ?= /usr/local
DEMO      ?= $(CURDIR)/demo
DEPS      := libarchive-dev libsqlite3-dev zlib1g-dev libzstd-dev
# Tools the tests and the demo use besides the libraries.
TOOLS     := sqlite3 zstd xz-utils tar binutils python3 python3-venv python3-jsonschema bash-completion zsh fish man-db mandoc groff-base sudo rclone
# The S3 server the remote-repository tests start on loopback (moto, from PyPI), in a virtual
# environment of its own: git-ignored, made once.
MOTO      := .build-tools/moto/bin/moto_server
BIN        = $(shell $(SWIFT) build --show-bin-path)

.PHONY: all deps build build-tests release check-release test test-slow tsan tsan-build fuzz-build demo demo-restore bench install install-files uninstall clean generate check-generated fuzz soak moto prometheus lint format

all: build

# Installs the Debian packages granary needs, only when one is missing (we run as root in CI).
deps:
	@missing=""; for p in $(DEPS) $(TOOLS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	$(SWIFT) build

# moto for the remote-repository tests. A machine where it cannot be installed still runs every
# other test: those tests are then skipped, saying so.
moto: deps
	@test -x $(MOTO) || { python3 -m venv .build-tools/moto && .build-tools/moto/bin/pip install -q 'moto[server]'; } \
		|| { rm -rf .build-tools/moto; echo "moto could not be installed: the remote-repository tests will be skipped"; }

# prometheus_client (PyPI) for the test that parses check --textfile with Prometheus' own parser;
# without it that test says it is skipped.
PROMETHEUS := .build-tools/prometheus/bin/python
prometheus: deps
	@$(PROMETHEUS) -c 'import prometheus_client' 2>/dev/null || { python3 -m venv .build-tools/prometheus && .build-tools/prometheus/bin/pip install -q prometheus-client; } \
		|| { rm -rf .build-tools/prometheus; echo "prometheus-client could not be installed: the --textfile parser test will be skipped"; }

# Release binaries link Swift's standard library, Foundation and Dispatch statically: they need
# only Debian's shared libraries (libsqlite3, libarchive, libzstd, zlib, libc), not the toolchain
# (docs/performance.md: size and start-up). make install, bench, check-release and deb use them.
RELEASE_FLAGS := -c release --static-swift-stdlib -Xlinker -z -Xlinker now

release: deps
	$(SWIFT) build $(RELEASE_FLAGS)

# The shipped binaries carry no test seam: the GRANARY_TEST_* switches (crash or stop at a restore
# step, short leases, a failing safety archive) are compiled into debug builds only. CI runs this.
check-release: release
	@bin="$$($(SWIFT) build -c release --show-bin-path)"; status=0; \
	for tool in granary granary-reopen-check; do \
		found="$$(strings -a "$$bin/$$tool" | grep -o 'GRANARY_TEST_[A-Z_]*' | sort -u)"; \
		if [ -n "$$found" ]; then echo "$$bin/$$tool (release) holds test hooks: $$found"; status=1; fi; \
	done; \
	[ $$status = 0 ] && echo "release binaries hold no GRANARY_TEST_ hook"; exit $$status

# The tests run in TEST_JOBS test processes at once (6), a suite whole in one of them
# (scripts/run-tests.py: most tests wait on processes they start, and one process left two cores
# idle half of the time; with 6, two cores stay busy throughout: 566 s against 874 s with 4).
# TEST_FILTER: a regular expression over suite names. `swift test` runs them in one process.
TEST_JOBS   ?= 6
TEST_FILTER ?=
# The products and the tests in one build: the test modules compile while the executables are
# still compiling and linking (two builds, `swift build` then `--build-tests`, ran them one after
# the other).
build-tests: deps
	$(SWIFT) build --build-tests

test: build-tests moto prometheus
	TEST_JOBS=$(TEST_JOBS) python3 scripts/run-tests.py "$(BIN)/granaryPackageTests.xctest" $(if $(TEST_FILTER),'$(TEST_FILTER)')

# The thread sanitizer over the concurrent parts, in a build of its own (.build-tsan): the fast
# path (overlapped pack, mapped reads, the CPU yield's monitor thread), a delta's copy without a
# file and its check beside it on a second connection, parallel backup in one
# process, the owner client (reopen protocol), SQLite's per-thread budgets, and end to end a run
# of several users in worker processes, a delta's page hashes taken on their own thread beside
# SQLite's copy (PageRecorderTests, with a concurrent writer), a worker's crash and SIGTERM (the instrumented granary
# exits 97 on a race, a code of none of its own). A race fails the run (halt_on_error);
# suppressions, each with its reason, are in .tsan-suppressions. handle_sigbus=0: a worker killed
# by SIGBUS (a -shm truncated under its mapping) must die of it, as without the sanitizer, not
# exit through the sanitizer's own report; SWIFT_BACKTRACE=enable=no: Swift's backtracer, attached
# to a crashed instrumented process, never finishes (and keeps the test's pipe open). CI runs it;
# the tests take a few minutes on two cores.
TSAN_FILTER := DeltaNoCopyTests|ParallelEachTests|FollowGroupWaitTests|FollowGroupStatusTests|LiveReadAheadTests|TeeJobsTests|PageRecorderTests|OverlappedPackTests|OverlappedSinkTests|DeltaRestoreStreamTests|MappedReaderTests|CPUYieldTests|ParallelBackupTests|ReopenProtocolTests|ContentLimitsTests|CrashIsolation
# The instrumented build alone. (Not started beside the tests in CI: SwiftPM runs the compiler at
# normal priority whatever its own nice value, and a build beside them made the debug build 3x slower.)
tsan-build: deps
	$(SWIFT) build --build-tests --sanitize=thread --build-path .build-tsan

tsan: tsan-build
	GRANARY_BIN_DIR="$(CURDIR)/.build-tsan/debug" SWIFT_BACKTRACE=enable=no \
	TSAN_OPTIONS="halt_on_error=1 exitcode=97 handle_sigbus=0 suppressions=$(CURDIR)/.tsan-suppressions" \
		$(SWIFT) test --sanitize=thread --build-path .build-tsan --filter '$(TSAN_FILTER)'

.PHONY: check-pins deb deb-deps check-deb

# Every package of the resolved dependency graph is pinned with exact: in Package.swift, at the
# version it resolved to, and nothing else is pinned (scripts/check-pins.py). CI runs this.
check-pins: deps
	@SWIFT="$(SWIFT)" bash scripts/check-pins.sh

# The Debian package, built by debhelper from the release binaries (debian/rules), then lintian.
# Writes .build-deb/granary_VERSION_ARCH.deb.
DEB_TOOLS := debhelper dpkg-dev lintian
deb-deps:
	@missing=""; for p in $(DEB_TOOLS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

deb: release deb-deps
	@SWIFT="$(SWIFT)" bash scripts/make-deb.sh "$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# Installs the .deb into a scratch root (an overlay of / in a private mount namespace) with the
# Swift toolchain hidden, and runs what it installed: --version, --help, a backup and restore of
# the sample users, man pages, completions, the conffile, systemd-analyze verify. CI runs this.
check-deb: deb
	@SWIFT="$(SWIFT)" bash scripts/check-deb.sh "$$(ls .build-deb/granary_*.deb)" \
		"$$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)"

# The committed .swift-format (120 columns) over every Swift source; CI runs `make lint`.
SWIFT_FORMAT = $(shell command -v swift-format >/dev/null && echo swift-format || echo "$(SWIFT) format")
lint:
	$(SWIFT_FORMAT) lint --strict --recursive --parallel Package.swift Sources Tests
	python3 scripts/check-layers.py
format:
	$(SWIFT_FORMAT) format --in-place --recursive --parallel Package.swift Sources Tests

demo: build
	@BIN="$(BIN)" DEMO="$(DEMO)" bash scripts/demo.sh

# A restore into a running granary-demo-owner, step by step.
demo-restore: build
	@bash scripts/demo-restore.sh

bench: release moto
	bash bench/run.sh
	bash bench/restore.sh
	bash bench/verify.sh
	bash bench/upload.sh
	bash bench/hostile.sh
	bash bench/delta.sh
	bash bench/week.sh
	bash bench/delta-restore.sh
	bash bench/follow.sh
	bash bench/phase2.sh
	bash bench/restore-at.sh

# Tests too slow for make test (over a GiB of I/O each: the lock-byte page of a store over 1 GiB,
# restored from a delta and hashed from a copy without a file; more seeds of the delta property
# tests; follow's whole ledger matrix: three users, every event, 50 random moments; and on S3), run on
# demand and before a release; CI runs them.
# One after the other, in one process: side by side (tried), the S3 matrix's follower fell so
# far behind on two cores that none of its moments was within a window.
test-slow: build
	GRANARY_SLOW_TESTS=1 $(SWIFT) test --filter 'DeltaPropertyTests|DeltaNoCopyTests/lockBytePage|FollowMatrixTests|FollowRemoteMatrixTests'

# granary under load (owners writing; backup, verify, restore, reset, prune, kill -9, recover), then an audit.
SOAK_SECONDS ?= 120
soak: build
	bash scripts/soak.sh $(SOAK_SECONDS)

# libFuzzer over the manifest parser, the archive verifier, the command line, names and paths (a separate
# instrumented build, optimized: ArgumentParser's debug-build self-checks cost 0.1 s a parse).
FUZZ_SECONDS ?= 60
fuzz-build: deps
	GRANARY_FUZZ=1 $(SWIFT) build -c release --build-path .build-fuzz --product granary-fuzz

fuzz: build fuzz-build
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

# Man pages and completion scripts are generated from the command declarations and committed;
# the date is pinned so that regenerating is reproducible (check-generated runs in CI).
MAN_DATE  := 2026-11-22
MANPAGES   = $(wildcard man/*.1) $(wildcard man/*.5) $(wildcard man/*.7)

generate: build
	rm -rf .build/plugins/GenerateManual/outputs/granary
	$(SWIFT) package plugin --allow-writing-to-package-directory generate-manual --configuration debug \
		--multi-page --date $(MAN_DATE) --authors "the granary authors"
	python3 scripts/generate-man.py .build/plugins/GenerateManual/outputs/granary man
	@# granary.toml(5): its template and the one list of configuration keys (ConfigKeys.swift).
	$(SWIFT) build --product granary-config-keys
	$(BIN)/granary-config-keys | python3 scripts/generate-config-man.py man/src/granary.toml.5 > man/granary.toml.5.new
	mv man/granary.toml.5.new man/granary.toml.5
	@mkdir -p completions
	@# Candidates are data, help <TAB> offers the commands: see scripts/patch-completions.py.
	$(BIN)/granary --generate-completion-script bash | python3 scripts/patch-completions.py bash > completions/granary.bash
	$(BIN)/granary --generate-completion-script zsh | python3 scripts/patch-completions.py zsh > completions/_granary
	$(BIN)/granary --generate-completion-script fish | python3 scripts/patch-completions.py fish > completions/granary.fish

check-generated: generate
	@git diff --exit-code -- man completions || { echo "man/ or completions/ is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- man completions)" || { git status --short -- man completions; echo "untracked generated files: run make generate and commit"; exit 1; }

install: release
	$(MAKE) install-files BINARY="$$($(SWIFT) build -c release --show-bin-path)/granary"

# fish (3.6, Debian 12) finds completions in /usr/share/fish/vendor_completions.d and in
# /etc/fish/completions, and under /usr/local only when XDG_DATA_DIRS names it (not on a server):
# a /usr/local install puts fish's completion in /etc/fish/completions.
FISHDIR   ?= $(if $(filter /usr/local,$(PREFIX)),/etc/fish/completions,$(PREFIX)/share/fish/vendor_completions.d)

# Copies an already built BINARY (and granary-reopen-check beside it), the man pages and
# completions under $(DESTDIR)$(PREFIX).
install-files:
	install -d "$(DESTDIR)$(PREFIX)/bin" "$(DESTDIR)$(PREFIX)/share/man/man1" "$(DESTDIR)$(PREFIX)/share/man/man5" \
		"$(DESTDIR)$(PREFIX)/share/man/man7" "$(DESTDIR)$(PREFIX)/share/bash-completion/completions" \
		"$(DESTDIR)$(PREFIX)/share/zsh/site-functions" "$(DESTDIR)$(FISHDIR)"
	install -m 0755 "$(BINARY)" "$(DESTDIR)$(PREFIX)/bin/granary"
	install -m 0755 "$(dir $(BINARY))granary-reopen-check" "$(DESTDIR)$(PREFIX)/bin/granary-reopen-check"
	for page in $(MANPAGES); do \
		install -m 0644 "$$page" "$(DESTDIR)$(PREFIX)/share/man/man$${page##*.}/"; done
	install -m 0644 completions/granary.bash "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/granary"
	install -m 0644 completions/_granary "$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_granary"
	install -m 0644 completions/granary.fish "$(DESTDIR)$(FISHDIR)/granary.fish"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/granary" "$(DESTDIR)$(PREFIX)/bin/granary-reopen-check"
	for page in $(notdir $(MANPAGES)); do \
		rm -f "$(DESTDIR)$(PREFIX)/share/man/man$${page##*.}/$$page"; done
	rm -f "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/granary" \
		"$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_granary" \
		"$(DESTDIR)$(FISHDIR)/granary.fish"

clean:
	rm -rf .build .build-fuzz .build-tools .build-deb "$(DEMO)" bench/work
