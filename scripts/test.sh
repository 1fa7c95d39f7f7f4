#!/usr/bin/env bash
# make test: go vet and go test -race against a real Redis.
#
# Uses the Redis at CONVEYOR_TEST_REDIS_URL (default redis://127.0.0.1:6379/0)
# when it answers PING; otherwise starts a throwaway in-memory redis-server on
# a free loopback port (installing Debian's redis-server if missing and
# allowed; see scripts/redis-lib.sh) and stops it on exit.
#
# DATABASE_URL, when set, names the PostgreSQL of the examples' PostgreSQL
# variants; unset, a local PostgreSQL that lets user postgres in is used.
#
# The browser tests of contrib/dashboard drive a headless chromium; when the
# packages tested include that one and chromium is missing, Debian's chromium
# package is installed the way redis-server is (root or passwordless sudo,
# CONVEYOR_NO_INSTALL unset). Without it those tests fail saying how to get it.
#
#   TEST_PKGS     packages to vet and test (default ./...)
#   TEST_FIRST    packages among them that go test starts first, in this order,
#   TEST_LAST     and last (default: none; ./... order). go test runs two
#                 packages at a time here, in the order it is given them, so
#                 starting the slowest (./worker ./delay) first shortens the
#                 run by about a minute; but the worker package's child
#                 processes then load the machine beside every other package,
#                 and timed tests elsewhere (seckill's story, delay's
#                 promotion races, the weighted-queue shares) failed on 2
#                 cores, so the default leaves it last, where it runs alone
#   GOTESTFLAGS   extra go test flags, split on spaces (e.g. "-count=1 -run TestX")
#   TEST_PARALLEL how many parallel tests of a package run at once (default
#                 4: most tests wait on leases, timers and child processes
#                 rather than compute, so twice the cores of this 2-core CI
#                 machine halves the worker package's time)
#
# The exit code is go test's; a go vet failure fails the run too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME='test'
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

read -r -a pkgs <<<"${TEST_PKGS:-./...}"
read -r -a first <<<"${TEST_FIRST:-}"
read -r -a last <<<"${TEST_LAST:-}"
read -r -a flags <<<"${GOTESTFLAGS:-}"

rl_use_test_redis

# ensure_chromium: installs Debian's chromium for the dashboard's browser
# tests when they are among the packages tested, it is missing, and
# installing is allowed; otherwise leaves it to those tests to say how.
ensure_chromium() {
	local sudo=() name
	# The names the tests look for (contrib/dashboard/chromium_test.go).
	for name in chromium chromium-browser google-chrome-stable google-chrome; do
		command -v "$name" >/dev/null 2>&1 && return 0
	done
	go list "${pkgs[@]}" 2>/dev/null | grep -qx 'github.com/conveyorq/conveyor/contrib/dashboard' || return 0
	if [[ -n ${CONVEYOR_NO_INSTALL:-} ]]; then
		rl_log "chromium not found and CONVEYOR_NO_INSTALL is set, so not installing it: the dashboard's browser tests will fail"
		return 0
	elif ! command -v apt-get >/dev/null 2>&1; then
		rl_log "chromium not found and there is no apt-get to install it with: the dashboard's browser tests will fail"
		return 0
	elif [[ $(id -u) -ne 0 ]] && ! { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; then
		rl_log "chromium not found; installing it needs root or passwordless sudo: the dashboard's browser tests will fail"
		return 0
	fi
	[[ $(id -u) -ne 0 ]] && sudo=(sudo -n)
	rl_log "chromium not found: installing Debian's chromium package for the dashboard's browser tests"
	# A stale package list makes install fail; update once and retry then.
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2; then
		"${sudo[@]}" apt-get update -q >&2 &&
			"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2 ||
			rl_log "installing chromium failed: the dashboard's browser tests will fail"
	fi
	hash -r
}
ensure_chromium

# examples/seckill also runs its PostgreSQL variant when DATABASE_URL names
# one; when it is unset and a local PostgreSQL lets us in, use that one.
if [[ -z "${DATABASE_URL:-}" ]] && command -v psql >/dev/null; then
	pg='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
	if PGCONNECT_TIMEOUT=3 psql "$pg" -qAtc 'select 1' >/dev/null 2>&1; then
		export DATABASE_URL="$pg"
		rl_log "using the PostgreSQL at $pg for the examples' PostgreSQL variants"
	else
		rl_log "no local PostgreSQL answers; the examples' PostgreSQL variants are not run (set DATABASE_URL to run them)"
	fi
fi

# ordered lists the packages pkgs names, those of first (that are among
# them) first and those of last last.
ordered() {
	local all firsts lasts
	all=$(go list "${pkgs[@]}")
	firsts=$( ( ((${#first[@]})) && go list "${first[@]}" 2>/dev/null | grep -xF -f <(echo "$all") ) || true)
	lasts=$( ( ((${#last[@]})) && go list "${last[@]}" 2>/dev/null | grep -xF -f <(echo "$all") | grep -vxF -f <(echo "$firsts") ) || true)
	[[ -n $firsts ]] && echo "$firsts"
	grep -vxF -f <(printf '%s\n%s\n' "$firsts" "$lasts") <<<"$all" || true
	[[ -n $lasts ]] && echo "$lasts"
	return 0
}

vet=0
go vet "${pkgs[@]}" || vet=$?
rc=0
mapfile -t run < <(ordered)
# go list failed (go vet said why): let go test name the bad packages.
((${#run[@]})) || run=("${pkgs[@]}")
go test -race -parallel "${TEST_PARALLEL:-4}" "${flags[@]}" "${run[@]}" || rc=$?
if ((rc == 0 && vet != 0)); then
	rl_log "go vet failed (exit $vet)"
	rc=$vet
fi
exit "$rc"
