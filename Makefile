# granary — the words a newcomer would guess.
#   make demo     set up, build, make sample data and run granary on it
#   make test     set up, build and run every test
#   make bench    compare granary with the pipeline a user would otherwise write
#   make install  PREFIX=/usr/local

SWIFT     ?= swift
PREFIX    ?= /usr/local
DEMO      ?= $(CURDIR)/demo
DEPS      := libarchive-dev libsqlite3-dev zlib1g-dev
# Tools the tests and the demo use besides the libraries.
TOOLS     := sqlite3 zstd xz-utils tar
BIN        = $(shell $(SWIFT) build --show-bin-path)

.PHONY: all deps build release test demo bench install uninstall clean

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

release: deps
	$(SWIFT) build -c release

test: build
	$(SWIFT) test

demo: build
	@rm -rf "$(DEMO)"
	@$(BIN)/granary-sample "$(DEMO)/root"
	@echo "== sample data in $(DEMO)/root; archives go to $(DEMO)/repo"
	@echo "== granary users"
	@$(BIN)/granary users --root "$(DEMO)/root" --repo "$(DEMO)/repo"
	@echo "== granary backup --all while a writer commits to alice's Local.sqlite"
	@$(BIN)/granary-sample write "$(DEMO)/root/alice@example.com/Local.sqlite" --interval-ms 5 >/dev/null & \
	 writer=$$!; sleep 1; \
	 $(BIN)/granary backup --all --root "$(DEMO)/root" --repo "$(DEMO)/repo"; status=$$?; \
	 kill $$writer; wait $$writer 2>/dev/null; \
	 ls -lR "$(DEMO)/repo"; exit $$status

bench: release
	bash bench/run.sh

install: release
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 "$$($(SWIFT) build -c release --show-bin-path)/granary" "$(DESTDIR)$(PREFIX)/bin/granary"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/granary"

clean:
	rm -rf .build "$(DEMO)" bench/work
