#!/usr/bin/env bash
# A throwaway Redis Sentinel set-up on loopback ports, for the Sentinel and
# fail-over tests: a master, one replica of it, and three sentinels that
# watch the master under the name "conveyor" and promote the replica about
# 2 s after the master stops answering.
#
#   scripts/sentinel.sh start        start it (no-op when it already runs); prints the sentinels
#   scripts/sentinel.sh stop         stop it and remove its files
#   scripts/sentinel.sh status       show each process and the master the sentinels name
#   scripts/sentinel.sh addrs        print the sentinels as host:port,host:port,host:port
#   scripts/sentinel.sh run -- CMD   start it, run CMD with CONVEYOR_TEST_REDIS_SENTINEL
#                                    (the sentinels) and CONVEYOR_TEST_REDIS_MASTER
#                                    (conveyor) set, stop it afterwards (also on failure
#                                    or signal); a set-up that was already running is
#                                    used and left running. Exits with CMD's code.
#
#   CONVEYOR_SENTINEL_PORT   first port (default 7301): the master takes it, the replica
#                            the next, the sentinels the three after that
#   CONVEYOR_SENTINEL_DIR    state directory (default ${TMPDIR:-/tmp}/conveyor-sentinel-<port>)
#   CONVEYOR_SENTINEL_WAIT   seconds to wait for the set-up to be ready (default 30)
#
# The servers keep nothing on disk (no RDB, no AOF); only the sentinels'
# config files (which they rewrite), the pid files and logs live in the
# state directory. To see a fail-over: kill -9 "$(cat <dir>/<first port>/pid)",
# then ask a sentinel: redis-cli -p <first port + 2> sentinel get-master-addr-by-name conveyor
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME=sentinel
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

base=${CONVEYOR_SENTINEL_PORT:-7301}
if [[ ! $base =~ ^[0-9]+$ ]] || ((base < 1024 || base > 65531)); then
	rl_log "CONVEYOR_SENTINEL_PORT=$base is not a port in 1024-65531"
	exit 2
fi
name=conveyor
master=$base
replica=$((base + 1))
sentinels=($((base + 2)) $((base + 3)) $((base + 4)))
ports=("$master" "$replica" "${sentinels[@]}")
dir=${CONVEYOR_SENTINEL_DIR:-${TMPDIR:-/tmp}/conveyor-sentinel-$base}
wait_s=${CONVEYOR_SENTINEL_WAIT:-30}
addrs=$(printf '127.0.0.1:%s,' "${sentinels[@]}")
addrs=${addrs%,}

# proc_pid PORT: prints the pid of our server or sentinel on PORT when it
# runs. The command line check guards against a recycled pid.
proc_pid() {
	local f=$dir/$1/pid pid cmd
	[[ -r $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] && rl_alive "$pid" || return 1
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=
	[[ -z $cmd || $cmd == *redis*"$1"* ]] || return 1
	echo "$pid"
}

cli() { timeout 10 "$CONVEYOR_REDIS_CLI" -h 127.0.0.1 "$@"; }

# fields: turns redis-cli's one-per-line key, value, key, value... into
# key=value lines.
fields() { awk 'NR % 2 == 1 { k = $0; next } { print k "=" $0 }'; }

# healthy: every process runs; every sentinel sees the master up, the other
# sentinels, and the replica with its link up; so killing the master fails
# over.
healthy() {
	local p m r
	for p in "${ports[@]}"; do
		proc_pid "$p" >/dev/null || return 1
	done
	for p in "${sentinels[@]}"; do
		# Between newlines, so that each pattern matches a whole line.
		m=$'\n'$(cli -p "$p" sentinel master "$name" 2>/dev/null | fields)$'\n' || return 1
		[[ $m == *$'\nflags=master\n'* && $m == *$'\nnum-slaves=1\n'* &&
			$m == *$'\nnum-other-sentinels=2\n'* ]] || return 1
		r=$'\n'$(cli -p "$p" sentinel replicas "$name" 2>/dev/null | fields)$'\n' || return 1
		[[ $r == *$'\nflags=slave\n'* && $r == *$'\nmaster-link-status=ok\n'* ]] || return 1
	done
}

cmd_stop() {
	local d p pid stopped=()
	for d in "$dir"/*/; do
		p=$(basename "$d")
		[[ $p =~ ^[0-9]+$ ]] || continue
		if pid=$(proc_pid "$p"); then
			rl_stop_pid "$pid"
			stopped+=("$p")
		fi
	done
	rm -rf "$dir"
	rl_log "stopped ${#stopped[@]} process(es)${stopped[*]:+ on ports ${stopped[*]}}"
}

# start_server PORT ARGS...: starts a master or replica on PORT.
start_server() {
	local p=$1
	shift
	mkdir -p "$dir/$p"
	# </dev/null and the log redirect: the server must not hold our stdout.
	"$CONVEYOR_REDIS_SERVER" --port "$p" --bind 127.0.0.1 --daemonize no \
		--save '' --appendonly no --dir "$dir/$p" --logfile "$dir/$p/redis.log" \
		--repl-diskless-sync-delay 0 "$@" \
		</dev/null >>"$dir/$p/out" 2>&1 &
	echo $! >"$dir/$p/pid"
}

# start_sentinel PORT: starts a sentinel on PORT watching the master. A
# sentinel needs a config file it can rewrite.
start_sentinel() {
	local p=$1
	mkdir -p "$dir/$p"
	cat >"$dir/$p/sentinel.conf" <<-EOF
		port $p
		bind 127.0.0.1
		daemonize no
		dir "$dir/$p"
		logfile "$dir/$p/redis.log"
		sentinel resolve-hostnames no
		sentinel monitor $name 127.0.0.1 $master 2
		sentinel down-after-milliseconds $name 1000
		sentinel failover-timeout $name 5000
		sentinel parallel-syncs $name 1
	EOF
	"$CONVEYOR_REDIS_SERVER" "$dir/$p/sentinel.conf" --sentinel \
		</dev/null >>"$dir/$p/out" 2>&1 &
	echo $! >"$dir/$p/pid"
}

# wait_sentinel PORT: waits until the sentinel we started on PORT answers
# PING; fails early when it exits. A sentinel does not log "Ready to accept
# connections", but logs its ID once it listens.
wait_sentinel() {
	local p=$1 pid end=$((SECONDS + CONVEYOR_REDIS_WAIT))
	pid=$(<"$dir/$p/pid")
	while ((SECONDS < end)); do
		rl_alive "$pid" || return 2
		if grep -q 'Sentinel ID is' "$dir/$p/redis.log" 2>/dev/null && rl_ping "redis://127.0.0.1:$p/0"; then
			return 0
		fi
		sleep 0.05
	done
	return 1
}

# fail PORT MESSAGE: logs MESSAGE and the end of PORT's log, stops everything.
fail() {
	rl_log "$2; its log:"
	tail -n 20 "$dir/$1/redis.log" "$dir/$1/out" >&2 2>/dev/null || true
	cmd_stop
	return 1
}

# wait_until WHAT CHECK...: runs CHECK every 0.1 s until it succeeds, for
# at most CONVEYOR_SENTINEL_WAIT seconds.
wait_until() {
	local what=$1 end=$((SECONDS + wait_s))
	shift
	until "$@"; do
		if ((SECONDS >= end)); then
			rl_log "$what not within ${wait_s}s"
			return 1
		fi
		sleep 0.1
	done
}

replica_in_sync() {
	[[ $(cli -p "$replica" info replication 2>/dev/null) == *master_link_status:up* ]]
}

cmd_start() {
	local p
	if healthy; then
		rl_log "already running: sentinels at $addrs"
		echo "$addrs"
		return 0
	fi
	for p in "${ports[@]}"; do
		if proc_pid "$p" >/dev/null; then
			rl_log "a process of an unhealthy earlier set-up runs; restarting all"
			cmd_stop
			break
		fi
	done
	rl_ensure_server || return 1
	if ! command -v "$CONVEYOR_REDIS_CLI" >/dev/null 2>&1; then
		rl_log "$CONVEYOR_REDIS_CLI not found; it comes with Debian's redis-tools (apt-get install redis-tools)"
		return 1
	fi
	for p in "${ports[@]}"; do
		if ! rl_port_free "$p"; then
			rl_log "port $p is taken by something else; pick other ports with CONVEYOR_SENTINEL_PORT=<first port>"
			return 1
		fi
	done
	rm -rf "$dir"
	start_server "$master"
	start_server "$replica" --replicaof 127.0.0.1 "$master"
	for p in "$master" "$replica"; do
		rl_wait_ping "$p" "$(<"$dir/$p/pid")" "$CONVEYOR_REDIS_WAIT" "$dir/$p/redis.log" ||
			{ fail "$p" "redis-server on port $p did not answer PING"; return 1; }
	done
	# In sync before the sentinels start: a sentinel learns the replicas
	# from the master's INFO, which it reads at once and then every 10 s.
	wait_until "replica on port $replica in sync" replica_in_sync ||
		{ fail "$replica" "the replica did not sync"; return 1; }
	for p in "${sentinels[@]}"; do start_sentinel "$p"; done
	for p in "${sentinels[@]}"; do
		wait_sentinel "$p" || { fail "$p" "sentinel on port $p did not answer PING"; return 1; }
	done
	# The sentinels find each other through the master, every 2 s.
	if ! wait_until "sentinels ready" healthy; then
		for p in "${sentinels[@]}"; do
			cli -p "$p" sentinel master "$name" 2>&1 | fields | grep -E '^(flags|num-slaves|num-other-sentinels)=' | tr '\n' ' ' >&2 || true
			echo >&2
		done
		cmd_stop
		return 1
	fi
	rl_log "master 127.0.0.1:$master, replica 127.0.0.1:$replica, sentinels at $addrs (master name $name, state in $dir)"
	echo "$addrs"
}

cmd_status() {
	local p pid role rc=0 named
	for p in "${ports[@]}"; do
		if pid=$(proc_pid "$p"); then
			role=$(cli -p "$p" role 2>/dev/null | head -n 1) || role=
			echo "127.0.0.1:$p pid $pid ${role:-?}"
		else
			echo "127.0.0.1:$p not running"
			rc=1
		fi
	done
	for p in "${sentinels[@]}"; do
		proc_pid "$p" >/dev/null || continue
		named=$(cli -p "$p" sentinel get-master-addr-by-name "$name" 2>/dev/null | paste -sd: -) || named=
		echo "sentinel 127.0.0.1:$p names master ${named:-?}"
	done
	return "$rc"
}

cmd_run() {
	[[ ${1:-} == -- ]] && shift
	if (($# == 0)); then
		rl_log "usage: $0 run -- CMD [ARGS...]"
		return 2
	fi
	if healthy; then
		rl_log "using the set-up already running with sentinels at $addrs (left running)"
	else
		trap cmd_stop EXIT
		trap 'exit 129' HUP
		trap 'exit 130' INT
		trap 'exit 143' TERM
		cmd_start >/dev/null
	fi
	local rc=0
	CONVEYOR_TEST_REDIS_SENTINEL=$addrs CONVEYOR_TEST_REDIS_MASTER=$name "$@" || rc=$?
	return "$rc"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
addrs) echo "$addrs" ;;
run)
	shift
	cmd_run "$@"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
