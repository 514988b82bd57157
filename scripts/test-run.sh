#!/usr/bin/env bash
# test-run.sh: the body of `make test-run` (make test provides the
# servers). Two lines of work run side by side (docs/development.md, "How
# the suite is scheduled"):
#   - the packages of $PKGS, with go test's default of GOMAXPROCS packages
#     at a time;
#   - beside them, the real-cluster fault suite (internal/faults/realkafka),
#     whose faults last tens of seconds each on one shared three-broker
#     cluster, with its fault durations scaled by OUTBOX_FAULTS_REAL_SCALE
#     (default 0.5 here: 30 s instead of 60 s of NOT_ENOUGH_REPLICAS, for
#     instance; 1 runs them as the issue states); then $COMPAT_PKGS again
#     against Kafka 3.9.1 when with-kafka.sh started it;
#   - beside both, the tooling module's packages ($BENCH_PKGS in bench/,
#     which has its own go.mod: the benchmark harness, the image builder,
#     the deployment checks), when BENCH_PKGS is not empty.
# Both mostly wait on faults and brokers. Exits non-zero if any run failed.
#
# Each test binary runs under internal/cmd/testtime, which records its wall
# time, CPU and peak memory; the table and the load average seen during the
# run are printed at the end (docs/development.md, "How the suite is
# scheduled").
set -uo pipefail

GO=${GO:-go}
# The package timeout is a hang guard, not a verdict: internal/faults
# takes 530-630 s beside the others on 2 cores (CI runs, 2026-12-04).
read -r -a flags <<<"-race -count=1 -timeout ${TEST_TIMEOUT:-16m} ${TEST_FLAGS:-}"
# The real-cluster suite is one package of many faults, each tens of
# seconds long, one after the other on the shared cluster: it gets a
# timeout of its own (about 15 minutes beside the others on 2 cores).
read -r -a realflags <<<"-race -count=1 -timeout ${REAL_TEST_TIMEOUT:-25m} ${TEST_FLAGS:-}"
read -r -a pkgs <<<"${PKGS:-./...}"
read -r -a compat <<<"${COMPAT_PKGS:-}"
read -r -a benchpkgs <<<"${BENCH_PKGS:-}"

listed=$("$GO" list "${pkgs[@]}") || exit 1
real=$(grep '/internal/faults/realkafka$' <<<"$listed" || true)
rest=$(grep -v '/internal/faults/realkafka$' <<<"$listed" || true)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-run.XXXXXX")
sampler=""
trap '[[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null; rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/testtime" ./internal/cmd/testtime || exit 1
flags+=(-exec "$tmp/testtime")
realflags+=(-exec "$tmp/testtime")
export OUTBOX_TEST_TIMES="$tmp/times"
# The 1-minute load average every 5 s, for the summary.
(while :; do cut -d' ' -f1 /proc/loadavg 2>/dev/null >>"$tmp/load"; sleep 5; done) &
sampler=$!
t0=$SECONDS

# beside: the real-cluster suite, then the 3.9.1 pass; exits non-zero if
# either failed.
beside() {
	local brc=0
	if [[ -n "$real" ]]; then
		echo "== beside the others: $real (OUTBOX_FAULTS_REAL_SCALE=${OUTBOX_FAULTS_REAL_SCALE:-0.5})"
		OUTBOX_FAULTS_REAL_SCALE=${OUTBOX_FAULTS_REAL_SCALE:-0.5} "$GO" test "${realflags[@]}" $real || brc=1
		echo "== real-cluster suite done at $((SECONDS - t0)) s"
	fi
	if [[ -n "${OUTBOX_TEST_KAFKA_BROKERS_3_9_1:-}" && ${#compat[@]} -gt 0 ]]; then
		echo "== again against Kafka 3.9.1: ${compat[*]}"
		OUTBOX_TEST_KAFKA_BROKERS=$OUTBOX_TEST_KAFKA_BROKERS_3_9_1 OUTBOX_TEST_KAFKA_VERSION=3.9.1 \
			"$GO" test "${flags[@]}" "${compat[@]}" || brc=1
		echo "== Kafka 3.9.1 pass done at $((SECONDS - t0)) s"
	fi
	return $brc
}

rc=0
beside &
beside_pid=$!
tooling_pid=""
if [[ ${#benchpkgs[@]} -gt 0 ]]; then
	(
		echo "== beside the others: the tooling module bench/: ${benchpkgs[*]}"
		trc=0
		"$GO" -C bench test -p 1 "${flags[@]}" "${benchpkgs[@]}" || trc=1
		echo "== tooling module done at $((SECONDS - t0)) s"
		exit $trc
	) &
	tooling_pid=$!
fi
if [[ -n "$rest" ]]; then
	# shellcheck disable=SC2086 # one package per word
	"$GO" test "${flags[@]}" $rest || rc=1
	echo "== packages done at $((SECONDS - t0)) s"
fi
wait "$beside_pid" || rc=1
if [[ -n "$tooling_pid" ]]; then
	wait "$tooling_pid" || rc=1
fi

module=$("$GO" list -m)
echo "== what each test binary cost (wall, CPU with its children, peak RSS), slowest first"
if [[ -s "$tmp/times" ]]; then
	sed "s|^$PWD/\\{0,1\\}|./|" "$tmp/times" | sort -t= -k2 -rn | awk '{ printf "%-34s %-12s %-11s %-11s %s\n", $1, $2, $3, $4, $5 }'
fi
if [[ -s "$tmp/load" ]]; then
	awk '{ s += $1; if ($1 > m) m = $1 } END { printf "== load average (1 min) during the tests: mean %.1f, max %.1f over %d samples; %d CPUs\n", s / NR, m, NR, '"$(nproc)"' }' "$tmp/load"
fi
echo "== tests took $((SECONDS - t0)) s ($module)"
exit $rc
