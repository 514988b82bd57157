# shellcheck shell=bash
# service.sh: sourced by with-postgres.sh and with-kafka.sh.
#
# launch_service NAME BINARY [ARGS...] runs BINARY ARGS in the background
# with its stdin a FIFO that only this shell holds open (so the service
# stops by itself when this shell dies without cleaning up).
# wait_service NAME PREFIX waits up to 10 minutes for the service's first
# stdout line starting with PREFIX= and sets SERVICE_VALUE to what follows.
# start_service NAME BINARY PREFIX [ARGS...] does both. stop_services (run
# on EXIT) closes the FIFOs and waits for every service started. Needs
# $tmp, a directory this shell owns.

service_pids=()
declare -A service_pid
service_fd=3

launch_service() {
	local name=$1 bin=$2
	shift 2
	local fifo="$tmp/$name.stdin"
	mkfifo "$fifo"
	"$bin" "$@" <"$fifo" >"$tmp/$name.out" &
	service_pid[$name]=$!
	service_pids+=("$!")
	eval "exec $service_fd>\"\$fifo\""
	service_fd=$((service_fd + 1))
}

wait_service() {
	local name=$1 prefix=$2 line
	local out="$tmp/$name.out" pid=${service_pid[$1]}
	SERVICE_VALUE=""
	for _ in $(seq 1 6000); do # up to 600s: the first run resolves jars
		if line=$(head -n 1 "$out" 2>/dev/null) && [[ "$line" == "$prefix="* ]]; then
			SERVICE_VALUE=${line#"$prefix="}
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$name: exited before printing $prefix" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "$name: timed out waiting for $prefix" >&2
	return 1
}

start_service() {
	local name=$1 bin=$2 prefix=$3
	shift 3
	launch_service "$name" "$bin" "$@"
	wait_service "$name" "$prefix"
}

stop_services() {
	local fd pid
	for ((fd = 3; fd < service_fd; fd++)); do
		eval "exec $fd>&-" 2>/dev/null || true
	done
	for pid in "${service_pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
	done
}

# run_without_fifos CMD... runs CMD in a subshell without the FIFO
# descriptors, so that a child that outlives CMD does not keep the
# services alive, and returns its status.
run_without_fifos() {
	(
		for ((fd = 3; fd < service_fd; fd++)); do
			eval "exec $fd>&-" 2>/dev/null || true
		done
		exec "$@"
	)
}
