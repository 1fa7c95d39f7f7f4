#!/usr/bin/env bash
# make bench: the benchmarks (no tests) against a real Redis, found or started
# as in scripts/test.sh. No -race: it distorts the figures.
#
#   BENCH_PKGS    packages (default "./broker/... ./worker/...")
#   BENCH         -bench regexp (default .)
#   BENCHTIME     -benchtime (default 1s)
#   GOTESTFLAGS   extra go test flags, split on spaces (e.g. "-count=5 -cpu 1,2")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RL_NAME=bench
# shellcheck source=scripts/redis-lib.sh
. scripts/redis-lib.sh

read -r -a pkgs <<<"${BENCH_PKGS:-./broker/... ./worker/...}"
read -r -a flags <<<"${GOTESTFLAGS:-}"

rl_use_test_redis

rc=0
go test -run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-1s}" -benchmem "${flags[@]}" "${pkgs[@]}" || rc=$?
exit "$rc"
