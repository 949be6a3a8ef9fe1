#!/usr/bin/env bash
# test.sh: the Python client's whole suite: unit tests (fake nodes, fake clock)
# and integration tests against three-node clusters of the raftlock binary,
# built here once from the repository root. Needs python3 (3.11+) and go.
# The last line is unittest's verdict ("OK" or "FAILED (...)") after its
# "Ran N tests" line; the exit status is non-zero on any failure.
#
#   clients/python/test.sh [unittest args, e.g. test_retry or -k failover]
#
# RAFTLOCK_BIN=path skips the build and uses that binary.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
	echo "test.sh: $PY is $("$PY" --version 2>&1); the client needs Python 3.11 or later" >&2
	exit 2
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/raftlock-py.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [[ -z ${RAFTLOCK_BIN:-} ]]; then
	echo "test.sh: building raftlock" >&2
	(cd "$ROOT" && go build -o "$TMP/raftlock" ./cmd/raftlock)
	export RAFTLOCK_BIN=$TMP/raftlock
fi

cd "$HERE/tests"
# -B: no __pycache__ in the tree; the package is tested from src/, as installed.
PYTHONPATH="$HERE/src:$HERE/tests" PYTHONDONTWRITEBYTECODE=1 exec "$PY" -B -m unittest "${@:-discover}" -v
