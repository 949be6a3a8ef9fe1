#!/usr/bin/env bash
# chaos-ci.sh: the bounded chaos stage of scripts/test.sh (about 2 minutes).
#   - the process cluster survives 5 leader kills and 3 leader pauses with zero violations
#   - when a Docker engine answers, the compose cluster survives 3 leader kills likewise
#     (skipped, saying so, when there is no engine or no docker-compose)
# Each run prints its workload summary: operations, failed share per fault, time to a
# new leader, violations. Exits non-zero when any run does.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== chaos: process cluster, 5 leader kills"
bash scripts/chaos-kill-leader.sh --target local --rounds 5
echo "== chaos: process cluster, 3 leader pauses"
bash scripts/chaos-pause-leader.sh --target local --rounds 3
if ! docker info >/dev/null 2>&1; then
	echo "== chaos: compose cluster SKIPPED: no Docker engine answers (docker info failed)"
elif ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
	echo "== chaos: compose cluster SKIPPED: neither docker-compose nor 'docker compose' is installed"
else
	echo "== chaos: compose cluster, 3 leader kills"
	bash scripts/chaos-kill-leader.sh --target compose --rounds 3
fi
