#!/usr/bin/env bash
# with-postgres.sh CMD [ARGS...]
#
# Runs CMD with DATABASE_URL pointing at a PostgreSQL database. If
# DATABASE_URL is already set, CMD simply runs. Otherwise one throwaway
# cluster is started with ./internal/cmd/pgtemp (extra pgtemp flags can be
# given in PGTEMP_FLAGS, e.g. PGTEMP_FLAGS=-fsync), DATABASE_URL is exported
# from its first output line, CMD runs, and the cluster is always stopped
# and removed afterwards. The exit status is CMD's.
#
# pgtemp also stops by itself when this script dies without cleaning up:
# its stdin is a FIFO that only this script holds open.
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
fi

if [[ -n "${DATABASE_URL:-}" ]]; then
	exec "$@"
fi

cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/with-postgres.XXXXXX")
pid=""

cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP PIPE
	{ exec 3>&-; } 2>/dev/null || true
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

go build -o "$tmp/pgtemp" ./internal/cmd/pgtemp
mkfifo "$tmp/stdin"
# shellcheck disable=SC2086 # PGTEMP_FLAGS is a list of flags
"$tmp/pgtemp" ${PGTEMP_FLAGS:-} <"$tmp/stdin" >"$tmp/out" &
pid=$!
exec 3>"$tmp/stdin"

url=""
for _ in $(seq 1 1200); do # up to 120s
	if line=$(head -n 1 "$tmp/out" 2>/dev/null) && [[ "$line" == DATABASE_URL=* ]]; then
		url=${line#DATABASE_URL=}
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "with-postgres: pgtemp exited before printing DATABASE_URL" >&2
		exit 1
	fi
	sleep 0.1
done
if [[ -z "$url" ]]; then
	echo "with-postgres: timed out waiting for pgtemp" >&2
	exit 1
fi
export DATABASE_URL="$url"
echo "with-postgres: DATABASE_URL=$DATABASE_URL" >&2

set +e
"$@" 3>&-
rc=$?
set -e
exit "$rc"
