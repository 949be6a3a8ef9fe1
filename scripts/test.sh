#!/usr/bin/env bash
# test.sh: every test raftlock has, with whatever they need started first.
#   - a throwaway PostgreSQL on 127.0.0.1 for the fencing tests (scripts/pg.sh)
#   - promtool (scripts/ci-deps.sh installs it) on the alert rules in monitoring/
#   - go vet and the unit, cluster and contract tests (go test -race ./...)
#   - the Python client's tests (clients/python/test.sh)
#   - the Jepsen-style checker under real faults (scripts/check.sh): a minute of
#     process and network faults, then a minute with clock faults added
#   - chaos runs against a process cluster, and a compose cluster when Docker answers
# Any failure stops the run with a non-zero status; the last line counts the stages.
# Run from anywhere: scripts/test.sh. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

export "$(bash scripts/pg.sh start)"
trap 'bash scripts/pg.sh stop >/dev/null 2>&1 || true' EXIT

passed=0
stage() {
	echo "== $1"
	shift
	"$@"
	passed=$((passed + 1))
}
stage "CI packages (promtool, chromium; skipped when present)" bash scripts/ci-deps.sh
export RAFTLOCK_REQUIRE_CHROMIUM=1 # the status page browser test may not skip in CI
stage "alert rules (promtool check and unit tests)" bash -c 'promtool check rules monitoring/prometheus-rules.yml && cd monitoring && promtool test rules prometheus-rules.test.yml'
stage "go vet" go vet ./...
stage "go test" go test -race -count=1 -timeout 20m ./...
stage "python client (unit tests, and three-node clusters of the built binary)" bash clients/python/test.sh
stage "checker (1 minute of faults against three real nodes)" bash scripts/check.sh 1m
stage "checker with clock faults (1 minute; raftlock built with -tags raftlock_faults)" bash scripts/check.sh 1m --clock-faults
stage "chaos (process cluster: 5 leader kills, 3 pauses; compose: 3 kills when Docker answers)" bash scripts/chaos-ci.sh
echo "stages: $passed passed, 0 failed"
