#!/usr/bin/env bash
# make compare: bench/compare (Conveyor against asynq) against a real Redis,
# found or started as in scripts/test.sh (CONVEYOR_TEST_REDIS_URL, default
# redis://127.0.0.1:6379/0, else a throwaway redis-server). Takes minutes.
#
#   COMPARE_FLAGS   flags for compare, split on spaces (e.g. "-rounds 3 -n 20000")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
RL_NAME=compare
# shellcheck source=../../scripts/redis-lib.sh
. ../../scripts/redis-lib.sh

read -r -a flags <<<"${COMPARE_FLAGS:-}"

rl_use_test_redis

rc=0
go run . -redis "$CONVEYOR_TEST_REDIS_URL" "${flags[@]}" || rc=$?
exit "$rc"
