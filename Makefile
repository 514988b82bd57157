# Developer entry points. `make test` needs only Go and the PostgreSQL server
# binaries (or DATABASE_URL, or Docker); Kafka is faked in-process (kfake)
# unless OUTBOX_TEST_KAFKA_BROKERS is set.

GO            ?= go
TEST_TIMEOUT  ?= 12m
TEST_FLAGS    ?=
PKGS          ?= ./...

.PHONY: all build test vet run bench soak

all: build

# Builds every package and puts the commands in bin/ (outbox-relay,
# outbox-dev, outbox-bench, outbox-soak).
build:
	$(GO) build ./...
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

# One throwaway PostgreSQL cluster is shared by the whole run unless
# DATABASE_URL is already set (see scripts/with-postgres.sh); each test gets
# its own schema in it (internal/testenv).
test: vet
	./scripts/with-postgres.sh $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(PKGS)

# Runs the development stack (cmd/outbox-dev): throwaway PostgreSQL, an
# embedded Kafka-protocol broker on localhost:9092, the relay and sample
# events. Pass flags with ARGS, e.g. make run ARGS='--rate 10 --broker-port 19092'.
run:
	$(GO) run ./cmd/outbox-dev $(ARGS)

# A short benchmark suite (about 2-3 minutes) on a throwaway Postgres (fsync
# on) and an in-process kfake broker, unless DATABASE_URL / OUTBOX_BROKERS
# are set. Writes bench/results/latest.json and latest.png. Extra flags:
# make bench BENCH_FLAGS='--rate 2000'. See `go run ./cmd/outbox-bench --help`.
BENCH_FLAGS ?=
bench:
	$(GO) run ./cmd/outbox-bench \
		--scenario latency,drain,writers,broker-down --mode notify,poll,naive,floor,notify-proc \
		--rate 1000 --duration 15s --grace 5s --idle-window 2s --poll-interval 500ms \
		--events 200000 --relays 1,2 --outage 15s \
		--connections 16,32,64 --writers-duration 8s \
		--json bench/results/latest.json --plot bench/results/latest.png $(BENCH_FLAGS)

# The full suite (the issue's defaults: 30s runs, 200k-event drains, three
# poll intervals, a poll-interval x lease sweep); about 15 minutes.
.PHONY: bench-full
bench-full:
	$(GO) run ./cmd/outbox-bench \
		--scenario latency,drain,writers,sweep,broker-down --mode notify,poll,naive,floor,notify-proc \
		--rate 1000 --duration 30s --poll-interval 50ms,100ms,500ms --lease 5s,30s --outage 20s \
		--events 200000 --relays 1,2 --connections 16,32,64 \
		--json bench/results/full.json --plot bench/results/full.png $(BENCH_FLAGS)

# The soak (not in CI): 10 minutes at 2,000 events/s with a fault every 30 s
# (relay SIGKILL, broker refusing, broker blackholed, Postgres restart,
# listener backend terminated) on a throwaway Postgres (fsync on) and an
# in-process kfake broker, unless SOAK_FLAGS has --database-url / --brokers.
# Prints committed, delivered, lost, duplicates, latency and order
# violations; exits non-zero if anything was lost or reordered. Shorter run:
# make soak SOAK_FLAGS='--duration 2m'.
SOAK_FLAGS ?=
soak:
	$(GO) run ./cmd/outbox-soak --duration 10m --rate 2000 --fault-every 30s $(SOAK_FLAGS)
