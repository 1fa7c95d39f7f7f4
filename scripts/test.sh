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
#   TEST_PKGS     packages to vet and test (default ./...)
#   GOTESTFLAGS   extra go test flags, split on spaces (e.g. "-count=1 -run TestX")
#
# The exit code is go test's; a go vet failure fails the run too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME='test'
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

read -r -a pkgs <<<"${TEST_PKGS:-./...}"
read -r -a flags <<<"${GOTESTFLAGS:-}"

rl_use_test_redis

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

vet=0
go vet "${pkgs[@]}" || vet=$?
rc=0
go test -race "${flags[@]}" "${pkgs[@]}" || rc=$?
if ((rc == 0 && vet != 0)); then
	rl_log "go vet failed (exit $vet)"
	rc=$vet
fi
exit "$rc"
