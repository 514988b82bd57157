#!/usr/bin/env bash
# with-kafka.sh CMD [ARGS...]
#
# Runs CMD with real Apache Kafka brokers: one single-broker cluster per
# version in KAFKA_TEST_VERSIONS (default "4.4.0 3.9.1"), started with
# ./internal/cmd/kafkatemp (jars from Maven Central, cached in
# $OUTBOX_KAFKA_CACHE or ~/.cache/pgoutbox/kafka). It exports
#
#   OUTBOX_TEST_KAFKA_BROKERS          the first version's broker
#   OUTBOX_TEST_KAFKA_VERSION          the first version
#   OUTBOX_TEST_KAFKA_BROKERS_<X_Y_Z>  each version's broker, e.g. _3_9_1
#
# and stops and removes the brokers afterwards. The exit status is CMD's.
# If OUTBOX_TEST_KAFKA_BROKERS is already set, CMD simply runs. Without
# java or mvn it says what to install and runs CMD without brokers (the
# tests then use the in-process kfake broker), except under CI=true, where
# it fails.
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
fi

if [[ -n "${OUTBOX_TEST_KAFKA_BROKERS:-}" ]]; then
	exec "$@"
fi

for tool in java mvn; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		msg="with-kafka: $tool not found: install it (Debian: apt-get install openjdk-17-jre-headless maven) to test against real Kafka"
		if [[ "${CI:-}" == "true" ]]; then
			echo "$msg" >&2
			exit 1
		fi
		echo "$msg; the tests use the in-process kfake broker instead" >&2
		exec "$@"
	fi
done

# CMD runs in the caller's directory (a module of the caller's own, say);
# only the helper is built in this repository.
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/service.sh
source "$repo/scripts/service.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/with-kafka.XXXXXX")

cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP PIPE
	stop_services
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

(cd "$repo" && go build -o "$tmp/kafkatemp" ./internal/cmd/kafkatemp)
first=""
versions=${KAFKA_TEST_VERSIONS:-4.4.0 3.9.1}
for v in $versions; do
	launch_service "kafka-$v" "$tmp/kafkatemp" -version "$v" -fast-start
done
for v in $versions; do
	wait_service "kafka-$v" KAFKA_BROKERS
	export "OUTBOX_TEST_KAFKA_BROKERS_${v//./_}=$SERVICE_VALUE"
	echo "with-kafka: Kafka $v at $SERVICE_VALUE" >&2
	if [[ -z "$first" ]]; then
		first=$v
		export OUTBOX_TEST_KAFKA_BROKERS="$SERVICE_VALUE" OUTBOX_TEST_KAFKA_VERSION="$v"
	fi
done

set +e
run_without_fifos "$@"
rc=$?
set -e
exit "$rc"
