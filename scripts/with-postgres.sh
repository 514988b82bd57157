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
# its stdin is a FIFO that only this script holds open (scripts/service.sh).
set -euo pipefail

if [[ $# -eq 0 ]]; then
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
fi

if [[ -n "${DATABASE_URL:-}" ]]; then
	exec "$@"
fi

# CMD runs in the caller's directory (a module of the caller's own, say);
# only the helper is built in this repository.
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/service.sh
source "$repo/scripts/service.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/with-postgres.XXXXXX")

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

(cd "$repo" && go build -o "$tmp/pgtemp" ./internal/cmd/pgtemp)
# shellcheck disable=SC2086 # PGTEMP_FLAGS is a list of flags
start_service pgtemp "$tmp/pgtemp" DATABASE_URL ${PGTEMP_FLAGS:-}
export DATABASE_URL="$SERVICE_VALUE"
echo "with-postgres: DATABASE_URL=$DATABASE_URL" >&2

set +e
run_without_fifos "$@"
rc=$?
set -e
exit "$rc"
