#!/usr/bin/env bash
# check.sh: build raftlock and the Jepsen-style checker, then run the checker
# against a real three-node cluster under faults.
#   scripts/check.sh [DURATION] [more raftlock-check flags...]
#   scripts/check.sh 1m                 # what CI runs, and then with --clock-faults
#   scripts/check.sh 10m --seed 1234    # replay a seed for longer
#   scripts/check.sh 1m --clock-faults  # add clock faults (builds raftlock with -tags raftlock_faults)
#   scripts/check.sh 1m --mix 0         # locks alone, without the session, semaphore and shared-lock cycles
#   scripts/check.sh 1m --faults restore  # backup restores alone (the default cycle has them among the rest)
# Exit status: 0 when every property holds, 1 on a violation (the report
# names the directory holding the journal, node logs and porcupine's HTML),
# 2 when the run could not be made.
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${1:-2m}"
[ $# -gt 0 ] && shift

bin="$(mktemp -d "${TMPDIR:-/tmp}/raftlock-check-bin.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
tags=()
# Clock faults need the node's fault clock, compiled only with this tag.
for a in "$@"; do
	if [ "$a" = --clock-faults ]; then tags=(-tags raftlock_faults); fi
done
go build ${tags[@]+"${tags[@]}"} -o "$bin/raftlock" ./cmd/raftlock
go build -o "$bin/raftlock-check" ./cmd/raftlock-check
"$bin/raftlock-check" --duration "$duration" --raftlock-bin "$bin/raftlock" "$@"
