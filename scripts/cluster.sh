#!/usr/bin/env bash
# A throwaway 3-master Redis Cluster on loopback ports, for the cluster tests;
# optionally with replicas, for fail-over tests.
#
#   scripts/cluster.sh start        start it (no-op when it already runs); prints the seeds
#   scripts/cluster.sh stop         stop it and remove its files
#   scripts/cluster.sh status       show each node and the cluster state
#   scripts/cluster.sh seeds        print host:port,host:port,host:port (the first 3 ports)
#   scripts/cluster.sh run -- CMD   start it, run CMD with CONVEYOR_TEST_REDIS_CLUSTER
#                                   set, stop it afterwards (also on failure or
#                                   signal); a cluster that was already running is
#                                   used and left running. Exits with CMD's code.
#
#   CONVEYOR_CLUSTER_PORT   first port (default 7101); the nodes take it and the ports after
#                           it, 3 in all without replicas, 6 with one replica per master;
#                           each node's cluster bus port is its port + 10000
#   CONVEYOR_CLUSTER_REPLICAS  replicas per master (default 0); with 1, the first 3
#                           nodes start as masters and the next 3 as their replicas
#   CONVEYOR_CLUSTER_DIR    state directory (default ${TMPDIR:-/tmp}/conveyor-cluster-<port>)
#   CONVEYOR_CLUSTER_WAIT   seconds to wait for cluster_state:ok (default 30)
#
# The nodes keep nothing on disk (no RDB, no AOF); only nodes.conf, the pid
# files and logs live in the state directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME=cluster
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

base=${CONVEYOR_CLUSTER_PORT:-7101}
if [[ ! $base =~ ^[0-9]+$ ]] || ((base < 1024 || base > 65533)); then
	rl_log "CONVEYOR_CLUSTER_PORT=$base is not a port in 1024-65533"
	exit 2
fi
replicas=${CONVEYOR_CLUSTER_REPLICAS:-0}
if [[ ! $replicas =~ ^[0-9]$ ]]; then
	rl_log "CONVEYOR_CLUSTER_REPLICAS=$replicas is not a count of replicas per master in 0-9"
	exit 2
fi
count=$((3 * (1 + replicas)))
if ((base + count - 1 + 10000 > 65535)); then
	rl_log "CONVEYOR_CLUSTER_PORT=$base leaves no room for $count nodes and their bus ports (port + 10000); use at most $((65535 - 10000 - count + 1))"
	exit 2
fi
ports=()
for ((i = 0; i < count; i++)); do ports+=($((base + i))); done
dir=${CONVEYOR_CLUSTER_DIR:-${TMPDIR:-/tmp}/conveyor-cluster-$base}
wait_s=${CONVEYOR_CLUSTER_WAIT:-30}
seeds=$(printf '127.0.0.1:%s,' "${ports[@]:0:3}")
seeds=${seeds%,}

# node_pid PORT: prints the pid of our node on PORT when it runs. The command
# line check guards against a recycled pid.
node_pid() {
	local f=$dir/$1/pid pid cmd
	[[ -r $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] && rl_alive "$pid" || return 1
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || cmd=
	[[ -z $cmd || $cmd == *redis*"$1"* ]] || return 1
	echo "$pid"
}

cli() { timeout 10 "$CONVEYOR_REDIS_CLI" -h 127.0.0.1 "$@"; }

# healthy: every node runs and says cluster_state:ok with all slots and nodes.
# With replicas, also: every node sees them as replicas, and each replica's
# link to its master is up, so that killing a master fails over.
healthy() {
	local p info n
	for p in "${ports[@]}"; do
		node_pid "$p" >/dev/null || return 1
		info=$(cli -p "$p" cluster info 2>/dev/null) || return 1
		[[ $info == *cluster_state:ok* && $info == *cluster_slots_assigned:16384* &&
			$info == *"cluster_known_nodes:${#ports[@]}"* ]] || return 1
		((replicas == 0)) && continue
		n=$(cli -p "$p" cluster nodes 2>/dev/null | awk '$3 ~ /(^|,)slave(,|$)/ && $3 !~ /fail/' | wc -l) || return 1
		((n == count - 3)) || return 1
		if [[ $(cli -p "$p" role 2>/dev/null | head -n 1) == slave ]]; then
			[[ $(cli -p "$p" info replication 2>/dev/null) == *master_link_status:up* ]] || return 1
		fi
	done
}

# cmd_stop stops every node with a pid file in the state directory, also
# those of an earlier cluster with another CONVEYOR_CLUSTER_REPLICAS.
cmd_stop() {
	local d p pid stopped=()
	for d in "$dir"/*/; do
		p=$(basename "$d")
		[[ $p =~ ^[0-9]+$ ]] || continue
		if pid=$(node_pid "$p"); then
			rl_stop_pid "$pid"
			stopped+=("$p")
		fi
	done
	rm -rf "$dir"
	rl_log "stopped ${#stopped[@]} node(s)${stopped[*]:+ on ports ${stopped[*]}}"
}

cmd_start() {
	local p pid end
	if healthy; then
		rl_log "already running at $seeds"
		echo "$seeds"
		return 0
	fi
	for p in "${ports[@]}"; do
		if node_pid "$p" >/dev/null; then
			rl_log "a node of an unhealthy earlier cluster runs; restarting all"
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
			rl_log "port $p is taken by something else; pick other ports with CONVEYOR_CLUSTER_PORT=<first port>"
			return 1
		fi
	done
	rm -rf "$dir"
	for p in "${ports[@]}"; do
		mkdir -p "$dir/$p"
		"$CONVEYOR_REDIS_SERVER" --port "$p" --bind 127.0.0.1 --daemonize no \
			--save '' --appendonly no --dir "$dir/$p" --logfile "$dir/$p/redis.log" \
			--cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" \
			--cluster-node-timeout 5000 --repl-diskless-sync-delay 0 \
			</dev/null >>"$dir/$p/out" 2>&1 &
		echo $! >"$dir/$p/pid"
	done
	for p in "${ports[@]}"; do
		if ! rl_wait_ping "$p" "$(<"$dir/$p/pid")" "$CONVEYOR_REDIS_WAIT" "$dir/$p/redis.log"; then
			rl_log "node on port $p did not answer PING; its log:"
			tail -n 20 "$dir/$p/redis.log" "$dir/$p/out" >&2 2>/dev/null || true
			cmd_stop
			return 1
		fi
	done
	local addrs=()
	for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
	if ! timeout 60 "$CONVEYOR_REDIS_CLI" --cluster create "${addrs[@]}" \
		--cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1; then
		rl_log "redis-cli --cluster create failed:"
		cat "$dir/create.log" >&2
		cmd_stop
		return 1
	fi
	end=$((SECONDS + wait_s))
	until healthy; do
		if ((SECONDS >= end)); then
			rl_log "cluster not ok within ${wait_s}s:"
			for p in "${ports[@]}"; do cli -p "$p" cluster info 2>&1 | head -n 3 >&2 || true; done
			cmd_stop
			return 1
		fi
		sleep 0.1
	done
	local what="3 masters"
	((replicas == 0)) || what+=" and $((count - 3)) replicas"
	rl_log "$what up, cluster_state:ok at $seeds (state in $dir)"
	echo "$seeds"
}

cmd_status() {
	local p pid info role rc=0
	for p in "${ports[@]}"; do
		if pid=$(node_pid "$p"); then
			info=$(cli -p "$p" cluster info 2>/dev/null | tr -d '\r' | grep -E '^cluster_(state|known_nodes|slots_assigned):' | tr '\n' ' ') || info=
			role=$(cli -p "$p" role 2>/dev/null | head -n 1) || role=
			echo "127.0.0.1:$p pid $pid ${role:-?} $info"
		else
			echo "127.0.0.1:$p not running"
			rc=1
		fi
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
		rl_log "using the cluster already running at $seeds (left running)"
	else
		trap cmd_stop EXIT
		trap 'exit 129' HUP
		trap 'exit 130' INT
		trap 'exit 143' TERM
		cmd_start >/dev/null
	fi
	local rc=0
	CONVEYOR_TEST_REDIS_CLUSTER=$seeds "$@" || rc=$?
	return "$rc"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
seeds) echo "$seeds" ;;
run)
	shift
	cmd_run "$@"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
