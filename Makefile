# Developer entry points. `make test` needs only Go and the PostgreSQL server
# binaries (or DATABASE_URL, or Docker); Kafka is faked in-process (kfake)
# unless OUTBOX_TEST_KAFKA_BROKERS is set.

GO            ?= go
TEST_TIMEOUT  ?= 12m
TEST_FLAGS    ?=
PKGS          ?= ./...

.PHONY: all build test vet run bench soak

all: build

build:
	$(GO) build ./...

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

bench:
	@echo "bench: not yet"

soak:
	@echo "soak: not yet"
