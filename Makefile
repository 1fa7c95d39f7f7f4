# Conveyor's developer commands. Every target that needs Redis finds one or
# starts a throwaway one itself; see scripts/.
#
#   make test            go vet + go test -race ./... against a real Redis
#   make test-cluster    the broker tests against a throwaway 3-master Redis Cluster
#   make bench           the benchmarks of broker/ and worker/ (no -race)
#   make compare         bench/compare: Conveyor against asynq, side by side (minutes; not in make test)
#   make chaos           the chaos suite, docs/chaos.md (CHAOS_RUNS=3 runs each; make chaos-short: one short run each)
#   make vet             go vet ./...
#
# Variables (make test PKGS=./broker/list/... GOTESTFLAGS='-count=1 -run TestX'):
#   PKGS                 packages for test and vet (default ./...)
#   CLUSTER_PKGS         packages for test-cluster (default ./broker/... ./delay/..., the slowest first)
#   BENCH_PKGS           packages for bench (default . ./broker/... ./worker/... ./delay/...)
#   BENCH, BENCHTIME     -bench regexp (default .) and -benchtime (default 1s)
#   GOTESTFLAGS          extra go test flags, split on spaces
#   COMPARE_FLAGS        flags for bench/compare, split on spaces (e.g. '-rounds 3')
#   CONVEYOR_TEST_REDIS_URL   Redis to use when it answers (default redis://127.0.0.1:6379/0)
#   CONVEYOR_CLUSTER_PORT     first cluster port (default 7101; the next two are used too)
#   CONVEYOR_NO_INSTALL=1     never install redis-server (nor chromium, for the dashboard's browser tests)
#   CONVEYOR_FULL_SIZE=1      the tests that SIGKILL worker processes (worker TestKillWorkers, TestGroupOrderUnderKills) at full size, twice the jobs

PKGS ?= ./...
CLUSTER_PKGS ?= ./broker/shard ./delay/... ./broker/...
BENCH_PKGS ?= . ./broker/... ./worker/... ./delay/...
BENCH ?= .
BENCHTIME ?= 1s
GOTESTFLAGS ?=
COMPARE_FLAGS ?=

.PHONY: test test-cluster bench compare chaos chaos-short vet screenshots

test:
	TEST_PKGS='$(PKGS)' GOTESTFLAGS='$(GOTESTFLAGS)' bash scripts/test.sh

test-cluster:
	bash scripts/cluster.sh run -- go test -race -parallel 4 $(GOTESTFLAGS) $(CLUSTER_PKGS)

bench:
	BENCH_PKGS='$(BENCH_PKGS)' BENCH='$(BENCH)' BENCHTIME='$(BENCHTIME)' GOTESTFLAGS='$(GOTESTFLAGS)' bash scripts/bench.sh

compare:
	COMPARE_FLAGS='$(COMPARE_FLAGS)' bash bench/compare/run.sh

chaos:
	bash scripts/chaos.sh

chaos-short:
	CHAOS_SHORT=1 bash scripts/chaos.sh

vet:
	go vet $(PKGS)

# screenshots: the dashboard's pictures in docs/images, taken by
# TestScreenshots in chromium (started, like Redis, by scripts/test.sh).
screenshots:
	CONVEYOR_SCREENSHOTS='$(CURDIR)/docs/images' TEST_PKGS=./contrib/dashboard GOTESTFLAGS='-count=1 -run ^TestScreenshots$$' bash scripts/test.sh
