#!/usr/bin/env bash
# test.sh: the Python client's whole suite: unit tests (fake nodes, fake clock)
# and integration tests against three-node clusters of the raftlock binary,
# built here once from the repository root. Needs python3 (3.11+) and go;
# PostgreSQL tests of the fencing guard run when RAFTLOCK_TEST_PG_DSN is set.
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
# With a test PostgreSQL (scripts/test.sh starts one), the fencing guard is also
# tested on it through psycopg, which only Debian's python3 can have here (no
# PyPI): use that interpreter, installing python3-psycopg when missing. Without
# either, those tests are reported skipped.
if [[ -n ${RAFTLOCK_TEST_PG_DSN:-} && -z ${PYTHON:-} && -x /usr/bin/python3 ]] &&
	/usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
	if ! /usr/bin/python3 -c 'import psycopg' 2>/dev/null && command -v apt-get >/dev/null; then
		echo "test.sh: installing python3-psycopg" >&2
		apt-get install -y -q python3-psycopg >&2 || echo "test.sh: python3-psycopg not installed: the PostgreSQL tests will skip" >&2
	fi
	/usr/bin/python3 -c 'import psycopg' 2>/dev/null && PY=/usr/bin/python3
fi
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
