# Orbit: build, run and test. `make run` and `make test` are the two commands a
# newcomer needs; see README.md.

GO        ?= go
BIN       := bin/orbit
PKGS      := ./...
SDK_DIR   := sdk/go
# Go modules of the repository, each vetted and tested on its own.
MODULES   := . $(SDK_DIR) examples/result-inbox bench
TEST_FLAGS ?= -race -count=1 -timeout 12m
# VERSION and REVISION are stamped into the binary (`orbit version`). Without
# git they are empty and the binary falls back to Go's build information.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
# Without git, the go command cannot stamp VCS information either.
BUILDVCS  := $(if $(shell command -v git 2>/dev/null),,-buildvcs=false)
LDFLAGS   := -X github.com/orbitrun/orbit/cmd/orbit/cli.version=$(VERSION) -X github.com/orbitrun/orbit/cmd/orbit/cli.revision=$(REVISION)

.PHONY: build run test test-galera integration vet race bench fuzz chaos soak lint clean db-server galera browser nats-server

build:
	$(GO) build $(BUILDVCS) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/orbit

# db-server makes sure a MySQL-compatible server binary exists for the local
# database and the test harness: on Debian/Ubuntu as root it installs
# mariadb-server; elsewhere it says what to install. With ORBIT_MYSQL_DSN (make
# run) or ORBIT_TEST_MYSQL_DSN (make test) set, no local binary is needed.
db-server:
	@if [ -n "$$ORBIT_MYSQL_DSN$$ORBIT_TEST_MYSQL_DSN" ] || command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1 \
	    || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing mariadb-server (no MySQL-compatible server found)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null; \
	else \
	    echo "no mariadbd or mysqld found: install mariadb-server (Debian/Ubuntu: sudo apt-get install -y mariadb-server) or MySQL 8.4+"; exit 1; \
	fi

# browser makes sure a Chromium exists for the console's end-to-end tests
# (tests/console, O-10): on Debian/Ubuntu as root it installs chromium;
# elsewhere it says what to install. The tests fail, never skip, without it.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
	    || command -v google-chrome >/dev/null 2>&1 || command -v headless-shell >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (no Chromium found; the console tests need it)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	    echo "no Chromium found: install it (Debian/Ubuntu: sudo apt-get install -y chromium) for the console tests (tests/console)"; exit 1; \
	fi

# run brings up a local database (unless ORBIT_MYSQL_DSN is set), migrates,
# writes dev credentials to .local/ and serves on 127.0.0.1:8080.
run: db-server build
	./$(BIN) dev

# test runs vet and every test of every Go module, with the race detector,
# against a throwaway database server the harness starts itself.
test: db-server browser vet
	@set -e; for m in $(MODULES); do echo "== go test $$m"; (cd $$m && GOWORK=off $(GO) test $(TEST_FLAGS) ./...); done

# galera makes sure a 3-node MariaDB Galera cluster can be started for
# test-galera: the Galera 4 provider (galera-4) and rsync, which the nodes'
# state transfers use. On Debian/Ubuntu as root it installs what is missing;
# elsewhere it says what to install.
GALERA_PROVIDER := $(firstword $(wildcard /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so /usr/lib64/galera-4/libgalera_smm.so /usr/lib64/galera/libgalera_smm.so))
galera: db-server
	@missing=""; [ -n "$(GALERA_PROVIDER)" ] || missing="galera-4"; \
	command -v rsync >/dev/null 2>&1 || missing="$$missing rsync"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (for the Galera cluster of make test-galera)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
	    echo "missing$$missing: install it (Debian/Ubuntu: sudo apt-get install -y galera-4 rsync)"; exit 1; \
	fi

# test-galera (N-6) starts a 3-node MariaDB Galera cluster on loopback (own
# data directories and ports, node 0 bootstrapping, nodes 1 and 2 joining by
# rsync state transfer), runs the tests marked for Galera against node 0 only
# (the documented deployment writes through one node), stops the cluster and
# prints a summary: results, wall time, and each node's certification
# failures and brute-force aborts. The tests get the cluster through
# ORBIT_TEST_MYSQL_DSN (node 0) and ORBIT_TEST_GALERA (every node's DSN).
# Marked for Galera: every test named after a T-, S-, E- or K- rule
# (GALERA_RUN: Test<letter><number>_...) in GALERA_PKGS, the module packages
# that hold them, and the N-7 tests (Galera's errors, the migration lease),
# without -race (make test has it), minus GALERA_SKIP: five tests of volume
# or input validation rather than concurrency. tests/sdk and tests/acceptance,
# which drive the same modules through the SDK and a whole scenario, are left
# out too: with them the run takes over 6 minutes on 2 cores, since every
# test database costs some 25 DDL statements, which Galera runs on every node
# one at a time. All of them passed on Galera; docs/reliability.md has the
# findings. About 5 minutes on 2 cores. Widen the set with GALERA_PKGS=...
# or GALERA_SKIP=. Then, last and alone on the same cluster (it kills node 0,
# which would break every other test; a cluster of its own would cost
# another 20 s to a minute to start), the N-8 failover test
# (GALERA_KILL_RUN in GALERA_KILL_PKGS): orbit serve under load moves from
# node 0 to node 1 by itself; the summary prints its figures. About 50 s
# more, its compilation included: 7 minutes in all on 2 cores under load.
GALERA_RUN  := ^Test(T|S|E|K)[0-9]+_|^TestN7_
GALERA_SKIP := ^(TestK7_BulkRetryOfTenThousandDeadLetters|TestE4_CapacityAcrossConnections|TestS4_CreateFields|TestS10_AtMost64SubscriptionsPerNamespace|TestS24_AttemptBudgetStartsAtMaxAttempts)$$
GALERA_PKGS := ./modules/tasks ./modules/workers ./modules/subscriptions ./modules/events ./internal/wsx \
	./tests/integration ./internal/db ./internal/migrate
GALERA_KILL_RUN  := ^TestN8_
GALERA_KILL_PKGS := ./tests/acceptance
test-galera: galera
	$(GO) run ./internal/testkit/galerarun -run '$(GALERA_RUN)' -skip '$(GALERA_SKIP)' \
	    -kill-run '$(GALERA_KILL_RUN)' -kill-pkgs '$(GALERA_KILL_PKGS)' $(GALERA_PKGS)

# integration runs the tests that need a real database server, among them
# tests/integration (orbit_test and orbit_receiver_test on one temporary
# server, R-19), then vets, builds and race-tests the result-inbox example
# as its own module.
integration: db-server browser
	$(GO) test $(TEST_FLAGS) ./internal/... ./modules/... ./cmd/... ./tests/...
	cd examples/result-inbox && GOWORK=off $(GO) vet ./... && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) test $(TEST_FLAGS) ./...

# vet also checks the chaos and soak programs, which build only with their tags.
vet:
	@set -e; for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) vet -tags 'chaos soak' ./...); done

race: db-server browser
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) test -race -count=1 ./...); done

# bench is its own Go module; go.work lets `go run ./bench` resolve it from
# the repository root. Its JetStream row runs Debian's nats-server, which
# nats-server installs when missing (as root), as db-server does for
# mariadb-server.
bench: db-server nats-server
	$(GO) run ./bench -out docs/benchmarks.md

nats-server:
	@if command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing nats-server (for the JetStream row of make bench)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null; \
	else \
	    echo "no nats-server found: install it (Debian/Ubuntu: sudo apt-get install -y nats-server)"; exit 1; \
	fi

# fuzz runs every fuzz target (F-3) for FUZZTIME each and prints the table of
# executions and crashers kept in docs/reliability.md. A crasher stays in its
# package's testdata/fuzz/ as a regression seed that make test runs.
FUZZTIME ?= 60s
fuzz: db-server
	$(GO) run ./internal/testkit/fuzzrun -fuzztime $(FUZZTIME)

# chaos (F-1) builds the orbit binary and the result-inbox receiver, runs them
# with SDK worker and consumer processes at a steady load (CHAOS_RATE results/s,
# default 100) on a database server of its own, injects every fault of F-1
# several times and prints the table of docs/reliability.md: lost and applied
# twice must be 0. About 4 minutes on 2 cores; not part of `make test`. A
# 2-core machine completes about 125 tasks/s under these faults, so 300/s does
# not drain there; on a larger machine raise the rate (CHAOS_RATE=300). A run
# that does not drain within the drain bound fails as such.
# CHAOS_ARGS passes more knobs (go test -tags chaos ./tests/chaos -args -h).
CHAOS_RATE ?= 100
chaos: db-server
	$(GO) test -tags chaos -run '^TestF1_Chaos$$' -count=1 -v -timeout 15m ./tests/chaos -args -chaos.rate=$(CHAOS_RATE) $(CHAOS_ARGS)

# soak (F-5) keeps 128 SDK consumers connected to one server under a steady
# load for SOAK_DURATION (default 10m) and reports the process's goroutines and
# RSS after warm-up and at the end; both must stay within 10 %.
SOAK_DURATION ?= 10m
soak: db-server
	$(GO) test -tags soak -run '^TestF5_Soak' -count=1 -v -timeout 30m ./tests/soak -args -soak.duration=$(SOAK_DURATION)

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin
	@if [ -d .local ]; then \
	    if [ "$(FORCE)" = 1 ]; then rm -rf .local; \
	    else printf 'remove .local (local database and dev credentials)? [y/N] '; read a; [ "$$a" = y ] && rm -rf .local || echo "kept .local"; fi; \
	fi
