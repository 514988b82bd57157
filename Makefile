# Developer entry points. `make test` needs Go, the PostgreSQL server
# binaries (or DATABASE_URL), and Java 17+ with Maven for the real
# Apache Kafka brokers (without them the tests use the in-process kfake
# broker, except under CI=true).

GO            ?= go
TEST_TIMEOUT  ?= 16m
TEST_FLAGS    ?=
PKGS          ?= ./...
# The tooling module (bench/: the benchmark, the soak, the image builder,
# the deployment checks) has its own go.mod; its packages are tested with
# the library's unless PKGS names packages.
BENCH_PKGS    ?= $(if $(filter ./...,$(PKGS)),./...,)

.PHONY: all build test vet tidy-check run bench bench-real bench-deployed soak image helm check-deploy

all: build

# Builds every package of both modules and puts the commands in bin/
# (outbox-relay, outbox-dev; outbox-bench, outbox-soak from bench/).
build:
	$(GO) build ./...
	$(GO) build -o bin/ ./cmd/...
	$(GO) -C bench build ./...
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench ./cmd/outbox-soak

vet:
	$(GO) vet $(PKGS)
	$(if $(BENCH_PKGS),$(GO) -C bench vet $(BENCH_PKGS))

# go.mod and go.sum, and bench/'s, must be what `go mod tidy` makes them.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@$(GO) -C bench mod tidy -diff || { echo "bench/go.mod/go.sum are not tidy: run go -C bench mod tidy"; exit 1; }

# One throwaway PostgreSQL cluster is shared by the whole run unless
# DATABASE_URL is already set (see scripts/with-postgres.sh); each test gets
# its own schema in it (internal/testenv). Real Apache Kafka brokers, 4.4.0
# and 3.9.1, are started for the run (scripts/with-kafka.sh): every package
# runs against 4.4.0, then COMPAT_PKGS (the Kafka client and the command)
# against 3.9.1. The real-cluster fault suite (internal/faults/realkafka)
# starts its own three-broker cluster and runs beside the other packages,
# its faults scaled by OUTBOX_FAULTS_REAL_SCALE (default 0.5; 1 for the
# full durations). See scripts/test-run.sh.
COMPAT_PKGS ?= ./internal/produce/... ./cmd/outbox-relay/...
test: vet tidy-check
	./scripts/with-postgres.sh ./scripts/with-kafka.sh $(MAKE) --no-print-directory test-run

# The tests proper, for `make test` (which provides the servers).
.PHONY: test-run
test-run:
	GO='$(GO)' TEST_TIMEOUT='$(TEST_TIMEOUT)' TEST_FLAGS='$(TEST_FLAGS)' PKGS='$(PKGS)' COMPAT_PKGS='$(COMPAT_PKGS)' BENCH_PKGS='$(BENCH_PKGS)' \
		./scripts/test-run.sh

# A flake hunt (internal/cmd/teststress): runs each package of STRESS_PKGS
# STRESS_COUNT times, one package at a time, with STRESS_BUSY CPUs kept busy
# (stress-ng --cpu N if installed, else spinning goroutines), against one
# throwaway PostgreSQL and one Kafka 4.4.0 broker for the whole hunt, and
# prints each failed test with its output and how often each failed. Every
# run's output is kept in STRESS_OUT. Exits non-zero if any run failed.
# make test-stress STRESS_PKGS=./internal/faults STRESS_RUN='TestProc' STRESS_COUNT=10
STRESS_PKGS  ?= ./...
STRESS_COUNT ?= 5
STRESS_BUSY  ?= 1
STRESS_RUN   ?=
STRESS_OUT   ?= bin/test-stress
.PHONY: test-stress
test-stress:
	$(GO) build -o bin/teststress ./internal/cmd/teststress
	KAFKA_TEST_VERSIONS=4.4.0 ./scripts/with-postgres.sh ./scripts/with-kafka.sh \
		./bin/teststress -count $(STRESS_COUNT) -busy $(STRESS_BUSY) -run '$(STRESS_RUN)' -out $(STRESS_OUT) $(STRESS_PKGS)

# The container image, built without a Docker daemon and without pulling a
# base image (bench/cmd/imagebuild): FROM scratch, a static
# outbox-relay stamped with VERSION and REVISION, user 65532, entrypoint
# /outbox-relay, command run, port 9090. Writes the OCI layout bin/image
# and the tarball bin/outbox-relay-image.tar (docker load -i ...). Every
# timestamp is the last commit's (SOURCE_DATE_EPOCH).
VERSION           ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-dev)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
image:
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/imagebuild
	SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' ./bin/imagebuild --oci bin/image --tar bin/outbox-relay-image.tar \
		--version '$(VERSION)' --revision '$(REVISION)'

# helm, for the chart's checks (deploy/deploy_test.go), built from the Go
# module proxy into a cache directory outside the repository, once per
# version (about 4 minutes on 2 cores). Exported so that `make test` finds
# it; without it the chart's test is skipped (it fails under CI).
HELM_VERSION ?= v3.22.0
CACHE_DIR    ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pgoutbox
HELM         ?= $(CACHE_DIR)/helm-$(HELM_VERSION)/helm
export HELM
helm: $(HELM)
$(HELM):
	GOBIN=$(dir $(HELM)) GOFLAGS= $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# The deployment files' checks, verbose: promtool check/test rules,
# helm lint and helm template of the chart, systemd-analyze verify and
# security of the unit (deploy/), and the metric names of the rules and
# the dashboard against the relay's registry (cmd/outbox-relay). promtool
# comes from Debian's prometheus package (.ci/run installs it).
check-deploy: $(HELM)
	OUTBOX_DEPLOY_CHECKS= CI=$${CI:-true} $(GO) test -count=1 -v ./deploy/
	$(GO) -C bench test -count=1 -v ./deploycheck/

# Runs the development stack (cmd/outbox-dev): throwaway PostgreSQL, an
# embedded Kafka-protocol broker on localhost:9092, the relay and sample
# events. Pass flags with ARGS, e.g. make run ARGS='--rate 10 --broker-port 19092';
# a real Apache Kafka broker instead of the embedded one (java and mvn):
# make run ARGS='--kafka 4.4.0'. The command is built into bin/ and run
# from there (not with go run, whose exit status after Ctrl-C is 1 even
# when outbox-dev stopped cleanly, which make reported as an error), with
# bin/outbox-relay beside it for the status command it prints.
run:
	$(GO) build -o bin/ ./cmd/outbox-dev ./cmd/outbox-relay
	./bin/outbox-dev $(ARGS)

# A benchmark suite (about 17 minutes) on a throwaway Postgres (fsync
# on) and an in-process kfake broker, unless DATABASE_URL / OUTBOX_BROKERS
# are set. Writes bench/results/latest.json, latest.png (latency CDF) and
# latest-cost.png (latency against DB CPU per event), and prints the tables
# and the goals (PASS/FAIL). Scenarios: burst (60 s idle: the idle cost;
# then 100,000 events in one transaction, drained after 60 s and after 1 s
# of idling), latency at 1,000 events/s per mode and at 10,000 and 10
# events/s for the product relay (a process with its defaults), each with
# what it cost the database and the relay against a writers-only baseline,
# drain, a 1,000,000-event backlog, 2,000 events of 900 KB (the relay's
# peak RSS), scale (drains and bursts with 1, 2 and 3 relay processes at
# 100, 1,000 and 100,000 aggregates, and 2,000 events/s of steady
# traffic), writers, what waking the relay costs the writers at 10, 1,000
# and 10,000 commits/s (notify-cost), broker-down. Every latency run also
# measures the broker's own floor beside it (a probe producing 200
# records/s to a topic of its own). Extra flags:
# make bench BENCH_FLAGS='--rate 2000'. See `./bin/outbox-bench --help`.
# The harness is in the tooling module bench/ (its own go.mod); the
# commands are built into bin/ and run from here.
# On a real Apache Kafka broker instead of kfake: make bench-real, or
# make bench BENCH_FLAGS='--kafka 4.4.0'.
BENCH_FLAGS ?=
bench:
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay \
		--scenario burst,latency,drain,backlog,large-payloads,scale,writers,notify-cost,broker-down --mode notify,poll,naive,floor,notify-proc \
		--rate 1000 --extra-rates 10000,10 --min-events 200 --duration 10s --baseline-duration 6s \
		--grace 5s --idle-window 1s --poll-interval 500ms \
		--idle 60s --burst-events 100000 --backlog-events 1000000 \
		--events 100000 --relays 1,2 --outage 15s \
		--connections 16,32,64 --writers-duration 6s \
		--json bench/results/latest.json --plot bench/results/latest.png \
		--cost-plot bench/results/latest-cost.png $(BENCH_FLAGS)
	$(MAKE) bench-formats

# The Schema Registry formats against JSON, about 3 minutes (part of make
# bench): the relay process at 1,000 events/s (3 rounds, interleaved) and
# in a drain of 100,000 events, A with --value-format json (its default),
# B the same binary with --value-format avro against an in-process registry
# (franz-go's srfake) holding the payload's schema. Writes
# bench/results/formats.json; the goal (docs/benchmarks.md): B's p50 within
# A's + 0.3 ms, its drain at least 0.8x A's.
.PHONY: bench-formats
bench-formats:
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay --value-format-b avro \
		--scenario latency,drain --mode notify-proc,notify-proc-b --rate 1000 --latency-rounds 3 \
		--duration 10s --baseline-duration 6s --grace 5s --idle-window 1s --events 100000 \
		--json bench/results/formats.json $(BENCH_FLAGS)

# The latency scenario on a real Apache Kafka 4.4.0 broker (internal/kafkatemp:
# java and mvn; G1 and the full JIT as in production, warmed up for 10 s before
# the first run, stopped at the end), about 6 minutes: 6 partitions, 200
# aggregates, writers committing one event per transaction, 1,000, 500 and 200
# events/s in that order, modes notify-proc (the relay process, its defaults)
# with both writer kinds interleaved (go: outbox.Add, debounced wake-ups;
# plain-sql: the README's INSERT and pg_notify in every transaction) and
# floor, each run with the broker's own floor and CPU per event beside the
# relay's, and the goal at 500/s: relay p50 <= floor p50 + 2 ms, p99 <= 3 x
# floor p99. 500/s is not the first run: the broker burns about half again the
# CPU in the first run after its warm-up, whatever that run's rate
# (docs/benchmarks.md, "What sets the gap"). Writes
# bench/results/latest-real.json. With the broker pinned to CPU 1:
# make bench-real BENCH_FLAGS='--kafka-cpus 1 --json bench/results/latest-real-pinned.json'
.PHONY: bench-real
bench-real:
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay --kafka 4.4.0 --partitions 6 --aggregates 200 --events-per-tx 1 \
		--scenario latency --mode notify-proc,floor --latency-writers go,plain-sql --rate 1000,500,200 \
		--duration 20s --baseline-duration 10s --grace 10s --idle-window 1s \
		--json bench/results/latest-real.json $(BENCH_FLAGS)

# The shape users deploy against the lab's (issue 29, goals 1 and 2),
# about 5 minutes on kfake: plain-SQL writers (INSERT and pg_notify in
# every transaction, one event each, 200 aggregates) at 500 and 1,000
# events/s with 1 and 3 relay processes (their defaults, each its own
# --relay-id), two rounds interleaved (1 3, 3 1), 10 s each, after a
# writers-only baseline per rate; after the 500/s runs, 3 relays at 500/s
# restarted one by one (SIGTERM, a replacement with the same --relay-id,
# 8 s apart); 1 and 3 idle relays (database CPU per second over 30 s: a
# 1-relay idle window is a few 10 ms clock ticks of database CPU). Prints the 3/1 ratios
# (the relays' DB CPU per event, total CPU per event, p50 difference, p99,
# idle DB CPU) and the rolling restart (p99 against one relay's, max,
# lost, order) with the goals as PASS/FAIL and the spread over the rounds.
# Writes bench/results/deployed.json (BENCH_DEPLOYED_JSON). More rounds:
# make bench-deployed BENCH_FLAGS='--latency-rounds 4'; on a real broker:
# BENCH_FLAGS='--kafka 4.4.0'.
BENCH_DEPLOYED_JSON ?= bench/results/deployed.json
.PHONY: bench-deployed
bench-deployed:
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay --partitions 6 \
		--scenario deployed --deployed-rates 500,1000 --deployed-relays 3 --deployed-aggregates 200 \
		--latency-rounds 2 --duration 10s --baseline-duration 6s --grace 5s \
		--deployed-idle 30s --restart-rate 500 --restart-interval 8s \
		--json $(BENCH_DEPLOYED_JSON) $(BENCH_FLAGS)

# An A/B of two relay builds in one run (issue 28: make bench and
# bench-real before and after, interleaved, no figure worse by more than
# the spread of repeated runs): the latency scenario with modes
# notify-proc (A: bin/outbox-relay, built from this tree) and
# notify-proc-b (B: the binary BENCH_B names, e.g. the build before a
# change), the same relay process with its defaults, the same flags, cost
# accounting and broker floor probe, at make bench's rates (1,000, 10,000
# and 10 events/s), three rounds at each rate interleaved (A B, B A, A B),
# on a throwaway Postgres and kfake; about 8 minutes. The tables end with
# an A/B table: per rate and figure each binary's median and range over
# its rounds, and which one is worse by more than the spread. Writes
# bench/results/ab.json (BENCH_AB_JSON), which records both binaries'
# paths, `outbox-relay version` output and SHA-256. Build B with e.g.
#   git worktree add /tmp/before <commit> && go -C /tmp/before build -o /tmp/relay-before ./cmd/outbox-relay
#   make bench-ab BENCH_B=/tmp/relay-before
# On a real Apache Kafka 4.4.0 broker (java and mvn):
#   make bench-ab BENCH_B=/tmp/relay-before BENCH_FLAGS='--kafka 4.4.0'
# (add --partitions 6 --aggregates 200 --rate 1000,500,200 --duration 20s
# --baseline-duration 10s --grace 10s to BENCH_FLAGS for bench-real's shape).
BENCH_B       ?=
BENCH_AB_JSON ?= bench/results/ab.json
.PHONY: bench-ab
bench-ab:
	$(if $(BENCH_B),,$(error bench-ab: set BENCH_B to the relay binary B, e.g. make bench-ab BENCH_B=/tmp/relay-before))
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay --relay-bin-b $(BENCH_B) \
		--scenario latency --mode notify-proc,notify-proc-b --rate 1000,10000,10 --latency-rounds 3 \
		--min-events 200 --duration 10s --baseline-duration 6s --grace 5s --idle-window 1s --poll-interval 500ms \
		--json $(BENCH_AB_JSON) $(BENCH_FLAGS)

# The full suite (30s runs, 200k-event drains, three poll intervals, a
# poll-interval x lease sweep, besides make bench's scenarios); about 20
# minutes.
.PHONY: bench-full
bench-full:
	$(GO) build -o bin/ ./cmd/outbox-relay
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-bench
	./bin/outbox-bench --relay-bin bin/outbox-relay \
		--scenario burst,latency,drain,backlog,large-payloads,writers,notify-cost,sweep,broker-down --mode notify,poll,naive,floor,notify-proc \
		--rate 1000 --extra-rates 10000,10 --min-events 300 --duration 30s \
		--poll-interval 50ms,100ms,500ms --lease 5s,30s --outage 20s \
		--idle 60s --burst-events 100000 --backlog-events 1000000 \
		--events 200000 --relays 1,2 --connections 16,32,64 \
		--json bench/results/full.json --plot bench/results/full.png \
		--cost-plot bench/results/full-cost.png $(BENCH_FLAGS)

# The soak (not in CI): 10 minutes at 2,000 events/s with a fault every 30 s
# (relay SIGKILL, broker refusing, broker blackholed, Postgres restart,
# listener backend terminated) on a throwaway Postgres (fsync on) and an
# in-process kfake broker, unless SOAK_FLAGS has --database-url / --brokers.
# Prints committed, delivered, lost, duplicates, latency and order
# violations; exits non-zero if anything was lost or reordered. Shorter run:
# make soak SOAK_FLAGS='--duration 2m'.
SOAK_FLAGS ?=
soak:
	$(GO) -C bench build -o $(CURDIR)/bin/ ./cmd/outbox-soak
	./bin/outbox-soak --duration 10m --rate 2000 --fault-every 30s $(SOAK_FLAGS)
