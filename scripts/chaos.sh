#!/usr/bin/env bash
# make chaos / make chaos-short: Conveyor's chaos suite (internal/chaos;
# docs/chaos.md). Builds the suite and the clock shim (scripts/chaos/
# skewclock.c, with cc), then runs every scenario on the list and stream
# drivers. Each scenario starts its own redis-server(s) on free loopback
# ports and stops only those; no other Redis is touched.
#
#   CHAOS_RUNS    runs of each scenario on each driver (default 3)
#   CHAOS_SHORT   set: the short form, one run of each (well under 2 minutes)
#   CHAOS_FLAGS   more flags for the suite, split on spaces
#                 (e.g. '-scenarios kill-workers,acl -drivers stream -keep')
#   CONVEYOR_NO_INSTALL=1   never install redis-server or gcc
#
# Prints one verdict line per scenario, driver and run; exits non-zero when
# any run fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME=chaos
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=$PATH:/usr/local/go/bin
fi

# ensure_cc: a C compiler for the clock shim, installing Debian's gcc when
# missing and allowed (root or passwordless sudo, CONVEYOR_NO_INSTALL unset).
ensure_cc() {
	command -v cc >/dev/null 2>&1 && return 0
	local sudo=()
	if [[ -z ${CONVEYOR_NO_INSTALL:-} ]] && command -v apt-get >/dev/null 2>&1; then
		if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		fi
		if [[ $(id -u) -eq 0 || ${#sudo[@]} -gt 0 ]]; then
			rl_log "cc not found: installing Debian's gcc package"
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev >&2 ||
				{ "${sudo[@]}" apt-get update -q >&2 &&
					"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev >&2; } || true
			hash -r
			command -v cc >/dev/null 2>&1 && return 0
		fi
	fi
	rl_log "no C compiler (cc) for the clock shim; install gcc (sudo apt-get install gcc) and try again"
	return 1
}

rl_ensure_server || exit 1
ensure_cc || exit 1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/conveyor-chaos.XXXXXX")
read -r -a flags <<<"${CHAOS_FLAGS:-}"
keep=
[[ " ${flags[*]} " == *" -keep "* ]] && keep=1
pid=
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [[ -n $keep ]]; then
		rl_log "kept the runs' files (worker and Redis logs) in $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

cc -shared -fPIC -O2 -Wall -o "$tmp/skewclock.so" scripts/chaos/skewclock.c
go build -o "$tmp/chaos" ./internal/chaos

args=(-redis-server "$(command -v "$CONVEYOR_REDIS_SERVER")" -skew-lib "$tmp/skewclock.so" -dir "$tmp")
if [[ -n ${CHAOS_SHORT:-} ]]; then
	args+=(-short -runs 1)
else
	args+=(-runs "${CHAOS_RUNS:-3}")
fi

# The suite runs in the background so that a signal to this script reaches
# it at once: it stops its servers and workers (they also die with it).
"$tmp/chaos" "${args[@]}" "${flags[@]}" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' HUP INT TERM
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do
	rc=0
	wait "$pid" || rc=$?
done
pid=
exit "$rc"
