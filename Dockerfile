# syntax=docker/dockerfile:1
#
# outbox-relay as a static binary on distroless, running as non-root, for
# machines with Docker. Without a Docker daemon, `make image` builds the
# same image FROM scratch (bench/cmd/imagebuild: the binary at
# /outbox-relay, user 65532, entrypoint and command as here, port 9090, the
# OCI labels), checked by `make test`; this Dockerfile is not built in CI.
#
#   docker build --build-arg VCS_REVISION=$(git rev-parse HEAD) --build-arg VERSION=v0.1.0 -t outbox-relay .
#   docker run --rm -p 9090:9090 -e DATABASE_URL=postgres://... \
#       -e OUTBOX_BROKERS=kafka:9092 -e OUTBOX_TOPIC=events outbox-relay
#   docker run --rm -e DATABASE_URL=postgres://... outbox-relay migrate
#
# Every flag is also read from OUTBOX_<FLAG>; see `outbox-relay run --help`.
# Port 9090 serves /metrics, /healthz (liveness) and /readyz (readiness).
#
# The default command must stay `run`: the binary without arguments only
# lists its commands. Arguments that are flags only (`docker run ... image
# --brokers kafka:9092`, or a Kubernetes `args:` list) replace CMD and still
# run the relay, since flags without a command mean run.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so source changes do not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# .git is not in the build context (.dockerignore), so Go cannot stamp the
# revision itself (-buildvcs=false); `outbox-relay version` reports this
# one instead, when given.
ARG VCS_REVISION=
# The version `outbox-relay version` reports (e.g. v0.1.0); empty: (devel).
ARG VERSION=
# CGO off: a static binary that needs no libc in the runtime image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
        -ldflags="-s -w -X main.vcsRevision=${VCS_REVISION} -X main.version=${VERSION}" -o /out/outbox-relay ./cmd/outbox-relay

# distroless/static: CA certificates (Kafka TLS, sslmode=verify-full),
# tzdata and /etc/passwd with the nonroot user (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VCS_REVISION=
ARG VERSION=
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/pgoutbox/outbox" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${VCS_REVISION}"
COPY --from=build /out/outbox-relay /outbox-relay
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/outbox-relay"]
CMD ["run"]
