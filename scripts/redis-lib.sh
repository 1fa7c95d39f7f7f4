# shellcheck shell=bash
# Helpers shared by test.sh, bench.sh and cluster.sh: find or install
# redis-server, PING a Redis URL, start and stop a throwaway server.
# Source it; it defines functions and sets nothing else.
#
# Knobs (environment):
#   CONVEYOR_NO_INSTALL=1   never install redis-server, fail with how-to instead
#   CONVEYOR_REDIS_SERVER   server binary to use (default redis-server)
#   CONVEYOR_REDIS_CLI      client binary to use (default redis-cli; without it
#                           PING goes over bash's /dev/tcp)
#   CONVEYOR_REDIS_WAIT     seconds to wait for a started server (default 20)

: "${CONVEYOR_REDIS_SERVER:=redis-server}"
: "${CONVEYOR_REDIS_CLI:=redis-cli}"
: "${CONVEYOR_REDIS_WAIT:=20}"

rl_log() { printf '%s: %s\n' "${RL_NAME:-redis}" "$*" >&2; }

# rl_parse_url URL: sets RL_HOST RL_PORT RL_USER RL_PASS, or fails.
rl_parse_url() {
	local re='^rediss?://(([^:@/]*)(:([^@/]*))?@)?(\[[^]]+\]|[^:/?]+)?(:([0-9]+))?(/([0-9]*))?([?].*)?$'
	if [[ ! $1 =~ $re ]]; then
		return 1
	fi
	RL_USER=${BASH_REMATCH[2]}
	RL_PASS=${BASH_REMATCH[4]}
	RL_HOST=${BASH_REMATCH[5]:-127.0.0.1}
	RL_HOST=${RL_HOST#[}
	RL_HOST=${RL_HOST%]}
	RL_PORT=${BASH_REMATCH[7]:-6379}
}

# rl_ping_tcp HOST PORT [PASS [USER]]: PING over bash's /dev/tcp, for machines
# without redis-cli. Bounded by timeout(1) because a connect can hang.
rl_ping_tcp() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 3 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		if [[ -n $3 ]]; then
			if [[ -n $4 ]]; then
				printf "*3\r\n\$4\r\nAUTH\r\n\$%d\r\n%s\r\n\$%d\r\n%s\r\n" "${#4}" "$4" "${#3}" "$3" >&3
			else
				printf "*2\r\n\$4\r\nAUTH\r\n\$%d\r\n%s\r\n" "${#3}" "$3" >&3
			fi
			IFS= read -r line <&3 || exit 1
			[[ $line == +OK* ]] || exit 1
		fi
		printf "*1\r\n\$4\r\nPING\r\n" >&3
		IFS= read -r line <&3 || exit 1
		[[ $line == +PONG* ]]
	' rl_ping_tcp "$@" 2>/dev/null
}

# rl_ping URL: true when a Redis answers PING at URL.
rl_ping() {
	local url=$1 args
	rl_parse_url "$url" || return 1
	if [[ $url == rediss:* ]] || ! command -v "$CONVEYOR_REDIS_CLI" >/dev/null 2>&1; then
		if [[ $url == rediss:* ]]; then
			# TLS: only redis-cli can speak it.
			[[ $(timeout 5 "$CONVEYOR_REDIS_CLI" -u "$url" --tls --no-auth-warning ping 2>/dev/null) == PONG ]]
			return
		fi
		rl_ping_tcp "$RL_HOST" "$RL_PORT" "$RL_PASS" "$RL_USER"
		return
	fi
	# Not -u: redis-cli 7.0 sends AUTH "" <pass> for redis://:pass@host.
	args=(-h "$RL_HOST" -p "$RL_PORT")
	[[ -n $RL_PASS ]] && args+=(-a "$RL_PASS" --no-auth-warning)
	[[ -n $RL_USER ]] && args+=(--user "$RL_USER")
	[[ $(timeout 5 "$CONVEYOR_REDIS_CLI" "${args[@]}" ping 2>/dev/null) == PONG ]]
}

# rl_ensure_server: makes $CONVEYOR_REDIS_SERVER runnable, installing Debian's
# redis-server when allowed (root or passwordless sudo, CONVEYOR_NO_INSTALL
# unset), else fails saying how to get it.
rl_ensure_server() {
	command -v "$CONVEYOR_REDIS_SERVER" >/dev/null 2>&1 && return 0
	local sudo=()
	if [[ -n ${CONVEYOR_NO_INSTALL:-} ]]; then
		rl_log "$CONVEYOR_REDIS_SERVER not found and CONVEYOR_NO_INSTALL is set, so not installing it."
	elif ! command -v apt-get >/dev/null 2>&1; then
		rl_log "$CONVEYOR_REDIS_SERVER not found and there is no apt-get to install it with."
	elif [[ $(id -u) -ne 0 ]] && ! { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
		rl_log "$CONVEYOR_REDIS_SERVER not found; installing it needs root or passwordless sudo."
	else
		[[ $(id -u) -ne 0 ]] && sudo=(sudo -n)
		rl_log "$CONVEYOR_REDIS_SERVER not found: installing Debian's redis-server package"
		# A stale package list makes install fail; update once and retry then.
		if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server >&2; then
			"${sudo[@]}" apt-get update -q >&2 &&
				"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server >&2
		fi
		hash -r
		command -v "$CONVEYOR_REDIS_SERVER" >/dev/null 2>&1 && return 0
		rl_log "installing redis-server did not give a runnable $CONVEYOR_REDIS_SERVER."
	fi
	rl_log "install Redis 7+ and try again, e.g.:"
	rl_log "    sudo apt-get install redis-server      (Debian/Ubuntu)"
	rl_log "    brew install redis                     (macOS)"
	rl_log "or point CONVEYOR_TEST_REDIS_URL at a Redis you own (tests never flush it)."
	return 1
}

# rl_port_free PORT: true when nothing accepts connections on 127.0.0.1:PORT.
rl_port_free() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	! timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' rl_port_free "$1" 2>/dev/null
}

# rl_free_port: prints a loopback port nothing listens on. Another process may
# take it before we bind it; rl_start_server retries on that.
rl_free_port() {
	local p i
	for ((i = 0; i < 50; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 30000))
		if rl_port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# rl_wait_ping PORT PID DEADLINE_SECONDS LOG: waits until the server we
# started answers PING; fails early (2) when it exits. PING alone could be
# answered by another server that took the port first, so the server's own
# log must say it listens before PING counts.
rl_wait_ping() {
	local port=$1 pid=$2 end=$((SECONDS + $3)) log=$4
	while ((SECONDS < end)); do
		if ! rl_alive "$pid"; then
			return 2
		fi
		if grep -q 'Ready to accept connections' "$log" 2>/dev/null &&
			rl_alive "$pid" && rl_ping "redis://127.0.0.1:$port/0"; then
			return 0
		fi
		sleep 0.05
	done
	return 1
}

# rl_start_server DIR [extra redis-server args...]: starts a throwaway
# redis-server on a free loopback port, keeping nothing on disk but its log in
# DIR. Sets RL_SERVER_PID (as soon as it runs) and RL_SERVER_PORT. The caller
# stops it with rl_stop_pid.
rl_start_server() {
	local dir=$1 try port pid rc
	shift
	for ((try = 1; try <= 5; try++)); do
		port=$(rl_free_port) || {
			rl_log "found no free loopback port"
			return 1
		}
		# </dev/null and the log redirect: the server must not hold our
		# stdout, or a pipe reading it (make | tee) would never see EOF.
		"$CONVEYOR_REDIS_SERVER" --port "$port" --bind 127.0.0.1 --daemonize no \
			--save '' --appendonly no --dir "$dir" --logfile "$dir/redis-$port.log" "$@" \
			</dev/null >>"$dir/redis-$port.out" 2>&1 &
		pid=$!
		# Recorded at once, so a signal arriving while we wait still stops it.
		RL_SERVER_PID=$pid
		rc=0
		rl_wait_ping "$port" "$pid" "$CONVEYOR_REDIS_WAIT" "$dir/redis-$port.log" || rc=$?
		if ((rc == 0)); then
			RL_SERVER_PORT=$port
			return 0
		fi
		RL_SERVER_PID=
		if ((rc == 2)) && grep -qi 'address already in use' "$dir/redis-$port.log" "$dir/redis-$port.out" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
			rl_log "port $port was taken meanwhile; trying another"
			continue
		fi
		rl_log "redis-server on port $port did not answer PING within ${CONVEYOR_REDIS_WAIT}s; its log:"
		tail -n 20 "$dir/redis-$port.log" "$dir/redis-$port.out" >&2 2>/dev/null || true
		rl_stop_pid "$pid"
		return 1
	done
	rl_log "gave up starting redis-server after $((try - 1)) tries"
	return 1
}

# rl_alive PID: true while PID runs. A zombie counts as gone: an orphaned
# server may wait long for a PID 1 that does not reap (containers).
rl_alive() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	if [[ -r /proc/$1/stat ]]; then
		stat=$(<"/proc/$1/stat") || return 1
		stat=${stat##*) }
		[[ ${stat%% *} != Z ]]
	fi
}

# rl_stop_pid PID: SIGTERM, wait up to 10s for it to exit, then SIGKILL.
rl_stop_pid() {
	local pid=$1 end=$((SECONDS + 10))
	kill -TERM "$pid" 2>/dev/null || return 0
	while rl_alive "$pid" && ((SECONDS < end)); do
		sleep 0.05
	done
	if rl_alive "$pid"; then
		rl_log "redis-server $pid ignored SIGTERM for 10s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# rl_redact URL: URL with its password replaced, for messages.
rl_redact() {
	sed -E 's#(://[^:/@]*:)[^@/]*@#\1***@#' <<<"$1"
}

# rl_use_test_redis: makes sure the tests have a Redis and exports
# CONVEYOR_TEST_REDIS_URL. Uses the one at CONVEYOR_TEST_REDIS_URL (default
# redis://127.0.0.1:6379/0) when it answers PING; else starts a throwaway
# server on a free loopback port and stops it when the calling script exits,
# on success, failure or signal. A Redis Cluster given in
# CONVEYOR_TEST_REDIS_CLUSTER is used as it is.
rl_use_test_redis() {
	if [[ -n ${CONVEYOR_TEST_REDIS_CLUSTER:-} ]]; then
		rl_log "using the Redis Cluster at $CONVEYOR_TEST_REDIS_CLUSTER"
		return 0
	fi
	local url=${CONVEYOR_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}
	if rl_ping "$url"; then
		rl_log "using the Redis at $(rl_redact "$url") (it answers PING)"
		export CONVEYOR_TEST_REDIS_URL=$url
		return 0
	fi
	rl_log "no Redis answers at $(rl_redact "$url"); starting a throwaway redis-server"
	rl_ensure_server || exit 1
	RL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-redis.XXXXXX")
	trap rl_cleanup EXIT
	# Turn signals into an exit so the EXIT trap stops the server.
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
	rl_start_server "$RL_TMP" || exit 1
	export CONVEYOR_TEST_REDIS_URL=redis://127.0.0.1:$RL_SERVER_PORT/0
	rl_log "started redis-server pid $RL_SERVER_PID at $CONVEYOR_TEST_REDIS_URL (in-memory, stopped on exit)"
}

# rl_cleanup: EXIT trap of rl_use_test_redis.
rl_cleanup() {
	if [[ -n ${RL_SERVER_PID:-} ]]; then
		rl_stop_pid "$RL_SERVER_PID"
		rl_log "stopped the throwaway redis-server (pid $RL_SERVER_PID)"
		RL_SERVER_PID=
	fi
	if [[ -n ${RL_TMP:-} ]]; then
		rm -rf "$RL_TMP"
		RL_TMP=
	fi
}
