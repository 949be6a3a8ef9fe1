#!/usr/bin/env bash
# demo-gc-pause.sh: the failure fencing tokens exist for, on a real three-node raftlock
# cluster and a real PostgreSQL, first with fencing, then without.
#
#   scripts/demo-gc-pause.sh
#
# Worker A takes lock tickets/402 and is frozen (SIGSTOP, a stand-in for a long GC
# pause) just before it writes; its lease expires; worker B takes the lock with a
# higher fencing token and reserves ticket 402; A wakes up and sends its write with
# its old token. With fencing, PostgreSQL refuses it (UPDATE 0). Without, A's write
# silently overwrites B's reservation.
#
# Both workers are real processes: `raftlock exec` holding the lease and renewing it,
# running a shell that writes with psql using the RAFTLOCK_FENCING_TOKEN that
# raftlock exec hands it.
#
# Everything runs on 127.0.0.1, on free ports the script picks, with data in a temporary
# directory: a cluster started by scripts/cluster.sh and a PostgreSQL started by
# scripts/pg.sh (installed from Debian's packages if missing). All of it is stopped and
# deleted on exit. Needs bash, curl, jq, and go unless RAFTLOCK_DEMO_BIN is set.
#
# Exit status: 0 when the fenced stale write was refused and the unfenced one overwrote
# B's, 1 otherwise, 2 when the demo could not be set up.
#
# Environment:
#   RAFTLOCK_DEMO_BIN      raftlock binary to use (default: go build into the temp dir)
#   RAFTLOCK_DEMO_TIMEOUT  seconds the demo may take after the build and any PostgreSQL
#                          installation (default 60)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCK=tickets/402
TTL=2s
T0=${EPOCHREALTIME/./}

log() { echo "demo: $*" >&2; }
die() {
	log "$*"
	exit 2
}

# say WHO TEXT: one line of the timeline, stamped with the time since the run began.
say() {
	local us=$((${EPOCHREALTIME/./} - RUN_T0))
	printf '[%2d.%02ds] %-9s %s\n' $((us / 1000000)) $((us % 1000000 / 10000)) "$1" "$2"
}

# --- everything started here is stopped in cleanup -------------------------------------

TMP=$(mktemp -d "${TMPDIR:-/tmp}/raftlock-demo.XXXXXX")
# PostgreSQL runs as the postgres user when we are root: it must reach its data dir.
chmod 755 "$TMP"
WORKERS=()   # "pid pgid" of each raftlock exec started, pgid of its command when known
WATCHDOG=""
CLUSTER_UP=""
PG_UP=""

cleanup() {
	local rc=$? w pid pgid
	set +e
	trap - EXIT INT TERM
	for w in "${WORKERS[@]}"; do
		read -r pid pgid <<<"$w"
		# A stopped process does not act on SIGTERM; SIGKILL ends it anyway.
		[[ -n $pgid ]] && kill -KILL -- "-$pgid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
	done
	if [[ -n $CLUSTER_UP ]]; then
		cluster down --purge >>"$TMP/cluster.log" 2>&1 || { log "cluster.sh down failed:"; tail -n 5 "$TMP/cluster.log" >&2; }
	fi
	if [[ -n $PG_UP ]]; then
		RAFTLOCK_PG_DIR=$TMP/pg RAFTLOCK_PG_PORT=$PG_PORT bash "$ROOT/scripts/pg.sh" stop >/dev/null 2>&1 ||
			log "pg.sh stop failed"
	fi
	if [[ -n $WATCHDOG ]]; then
		kill -TERM "$WATCHDOG" 2>/dev/null
		wait "$WATCHDOG" 2>/dev/null
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "stopped by SIGTERM (or the ${LIMIT:-60}s time limit)"; exit 124' TERM

# --- setup -----------------------------------------------------------------------------

for c in curl jq; do command -v "$c" >/dev/null || die "$c is required"; done

BIN=${RAFTLOCK_DEMO_BIN:-}
if [[ -n $BIN ]]; then
	[[ -x $BIN ]] || die "RAFTLOCK_DEMO_BIN=$BIN is not executable"
else
	command -v go >/dev/null || die "go is required to build raftlock (or set RAFTLOCK_DEMO_BIN)"
	log "building raftlock"
	(cd "$ROOT" && go build -o "$TMP/raftlock" ./cmd/raftlock) || die "go build failed"
	BIN=$TMP/raftlock
fi

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Ports BASE+1..3 for HTTP, BASE+5..7 for Raft, BASE+9 for PostgreSQL: a random free
# block, so that the demo runs beside a default cluster, the tests, or another demo.
BASE=""
for _ in $(seq 30); do
	b=$((20000 + RANDOM % 1200 * 10)) # below the ephemeral range (32768+), which outbound connections use
	ok=1
	for p in $((b + 1)) $((b + 2)) $((b + 3)) $((b + 5)) $((b + 6)) $((b + 7)) $((b + 9)); do
		port_free "$p" || { ok=""; break; }
	done
	[[ -n $ok ]] && { BASE=$b; break; }
done
[[ -n $BASE ]] || die "found no block of free ports"
PG_PORT=$((BASE + 9))
ENDPOINTS=http://127.0.0.1:$((BASE + 1)),http://127.0.0.1:$((BASE + 2)),http://127.0.0.1:$((BASE + 3))

cluster() {
	RAFTLOCK_CLUSTER_DIR=$TMP/cluster RAFTLOCK_CLUSTER_BIN=$BIN RAFTLOCK_CLUSTER_WAIT=20 \
		RAFTLOCK_CLUSTER_HTTP_BASE=$BASE RAFTLOCK_CLUSTER_RAFT_BASE=$((BASE + 4)) \
		bash "$ROOT/scripts/cluster.sh" "$@"
}

pg_start() {
	local out
	PG_UP=1
	out=$(RAFTLOCK_PG_DIR=$TMP/pg RAFTLOCK_PG_PORT=$PG_PORT bash "$ROOT/scripts/pg.sh" start 2>"$TMP/pg.log") ||
		{ tail -n 20 "$TMP/pg.log" >&2; die "PostgreSQL did not start"; }
	DSN=${out#RAFTLOCK_TEST_PG_DSN=}
}

# Installing PostgreSQL can take minutes; the time limit starts after it.
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -z $pgbin ]] && ! command -v initdb >/dev/null; then
	pg_start
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
fi

LIMIT=${RAFTLOCK_DEMO_TIMEOUT:-60}
(
	trap 'kill "$sp" 2>/dev/null; exit 0' TERM
	sleep "$LIMIT" &
	sp=$!
	wait "$sp"
	kill -TERM $$
) </dev/null >/dev/null 2>&1 &
WATCHDOG=$!

[[ -n $PG_UP ]] || pg_start
PSQL=psql
[[ -n $pgbin && -x $pgbin/psql ]] && PSQL=$pgbin/psql
command -v "$PSQL" >/dev/null || die "psql not found"
sql() { "$PSQL" "$DSN" -X -q -At -v ON_ERROR_STOP=1 "$@"; }

CLUSTER_UP=1
cluster up 3 >"$TMP/cluster.log" 2>&1 || { cat "$TMP/cluster.log" >&2; die "the cluster did not start"; }

sql -c "CREATE TABLE ticket_reservations (
	id bigint PRIMARY KEY,
	holder text,
	last_fencing_token bigint NOT NULL DEFAULT 0);
	INSERT INTO ticket_reservations (id) VALUES (402)" || die "cannot create ticket_reservations"

# The worker, run by `raftlock exec`, which puts the lease's token in
# RAFTLOCK_FENCING_TOKEN. Arguments: owner, fenced|unfenced, and for worker A the
# fifo it waits on: the instant, between deciding to write and writing, where the
# pause strikes.
cat >"$TMP/worker.sh" <<'EOF'
#!/bin/sh
owner=$1 mode=$2 gate=${3:-}
echo "token $RAFTLOCK_FENCING_TOKEN pid $$"
if [ -n "$gate" ]; then
	# In a real GC pause the lease watchdog freezes with the worker, and when the
	# process wakes, the write it was about to send goes out before the watchdog can
	# stop it. Ignoring SIGTERM keeps that order here: raftlock exec's watchdog (which
	# does notice the lost lease, see its message) cannot recall the write.
	trap '' TERM
	read -r _ <"$gate"
fi
if [ "$mode" = fenced ]; then
	update="UPDATE ticket_reservations SET holder = :'owner', last_fencing_token = :token WHERE id = 402 AND last_fencing_token < :token"
else
	update="UPDATE ticket_reservations SET holder = :'owner' WHERE id = 402"
fi
# -e prints the statement as sent, with the token in it.
echo "$update;" | "$PSQL" "$DSN" -X -At -e -v ON_ERROR_STOP=1 \
	-v owner="$owner" -v token="$RAFTLOCK_FENCING_TOKEN"
EOF
chmod +x "$TMP/worker.sh"
export PSQL DSN

# --- the story -------------------------------------------------------------------------

# wait_line FILE REGEX SECONDS: prints the first line of FILE matching REGEX.
wait_line() {
	local deadline=$((SECONDS + $3)) l
	until l=$(grep -m 1 -E "$2" "$1" 2>/dev/null); do
		((SECONDS < deadline)) || return 1
		sleep 0.02
	done
	echo "$l"
}

# wait_exit PID SECONDS: waits for a child and sets EXIT_CODE.
wait_exit() {
	local deadline=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null && [[ $(ps -o stat= -p "$1" 2>/dev/null) != Z* ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.02
	done
	EXIT_CODE=0
	wait "$1" || EXIT_CODE=$?
}

row() { sql -F ' ' -c "SELECT coalesce(holder, '(nobody)'), last_fencing_token FROM ticket_reservations WHERE id = 402"; }

FAILED=0
fail() {
	say "RESULT" "FAIL: $*"
	FAILED=1
}

# story fenced|unfenced
story() {
	local mode=$1 d=$TMP/$1 apid agroup atoken bpid btoken line paused holder token
	mkdir -p "$d"
	mkfifo "$d/gate"
	sql -c "UPDATE ticket_reservations SET holder = NULL, last_fencing_token = 0 WHERE id = 402"
	RUN_T0=${EPOCHREALTIME/./}
	if [[ $mode == fenced ]]; then
		echo "== With fencing: every write is  UPDATE … WHERE id = 402 AND last_fencing_token < \$token"
	else
		echo "== Without fencing: every write is  UPDATE … WHERE id = 402"
	fi
	say "db" "$(row | awk '{print "ticket 402: holder " $1 ", last_fencing_token " $2}')"

	RAFTLOCK_ENDPOINTS=$ENDPOINTS "$BIN" exec --ttl "$TTL" --kill-grace 10s --owner worker-a "$LOCK" -- \
		"$TMP/worker.sh" worker-a "$mode" "$d/gate" >"$d/a.out" 2>"$d/a.err" &
	apid=$!
	WORKERS+=("$apid")
	line=$(wait_line "$d/a.out" '^token ' 15) || { cat "$d/a.err" >&2; die "worker A did not get the lock"; }
	read -r _ atoken _ agroup <<<"$line"
	WORKERS[${#WORKERS[@]} - 1]="$apid $agroup"
	say "worker A" "raftlock exec --ttl $TTL $LOCK: lock held, fencing token $atoken; ticket 402 is free, A is about to reserve it"

	# The pause: raftlock exec (the lease and its renewals) and its command's process
	# group (the shell, and psql once it runs) freeze together, as one process does in a
	# stop-the-world GC pause. Stopping only the command would keep the lease renewed.
	kill -STOP "$apid"
	kill -STOP -- "-$agroup"
	local pause_t0=${EPOCHREALTIME/./}
	say "demo" "SIGSTOP worker A (raftlock exec pid $apid and its command, process group $agroup): a long GC pause; its lease renewals stop too"

	RAFTLOCK_ENDPOINTS=$ENDPOINTS "$BIN" exec --ttl 10s --wait 15s --owner worker-b "$LOCK" -- \
		"$TMP/worker.sh" worker-b "$mode" >"$d/b.out" 2>"$d/b.err" &
	bpid=$!
	WORKERS+=("$bpid")
	say "worker B" "raftlock exec --wait 15s $LOCK: A holds the lock, B waits"
	line=$(wait_line "$d/b.out" '^token ' 20) || { cat "$d/b.err" >&2; die "worker B did not get the lock"; }
	read -r _ btoken _ <<<"$line"
	say "cluster" "A's lease expires: $TTL without a renewal"
	say "worker B" "lock held, fencing token $btoken; B reserves ticket 402"
	wait_exit "$bpid" 20 || die "worker B did not finish"
	[[ $EXIT_CODE == 0 ]] || { cat "$d/b.err" >&2; die "worker B failed (exit $EXIT_CODE)"; }
	say "worker B" "$(grep -m 1 '^UPDATE ticket' "$d/b.out")"
	if [[ $mode == fenced ]]; then
		say "db" "$(tail -n 1 "$d/b.out"): $(row | awk '{print "ticket 402: holder " $1 ", last_fencing_token " $2}')"
	else
		say "db" "$(tail -n 1 "$d/b.out"): $(row | awk '{print "ticket 402: holder " $1}')"
	fi
	say "worker B" "done; raftlock exec released the lock"
	((btoken > atoken)) || fail "B's token $btoken is not above A's $atoken"

	paused=$(((${EPOCHREALTIME/./} - pause_t0) / 10000))
	kill -CONT -- "-$agroup"
	kill -CONT "$apid"
	echo go >"$d/gate"
	say "demo" "SIGCONT worker A after $((paused / 100)).$(printf %02d $((paused % 100)))s: it wakes up still believing it holds the lock, and sends its write with token $atoken"
	wait_exit "$apid" 20 || die "worker A did not finish"
	if [[ -s $d/a.err ]]; then
		say "worker A" "$(head -n 1 "$d/a.err")"
	fi
	say "worker A" "$(grep -m 1 '^UPDATE ticket' "$d/a.out")"
	line=$(tail -n 1 "$d/a.out")
	read -r holder token <<<"$(row)"
	if [[ $mode == fenced ]]; then
		say "db" "$line: PostgreSQL refused the stale write (token $atoken, the row has $token). Ticket 402: holder $holder, last_fencing_token $token"
		if [[ $line == "UPDATE 0" && $holder == worker-b && $token == "$btoken" ]]; then
			say "RESULT" "B's reservation stands; the paused worker's stale write was rejected"
		else
			fail "the stale write was not rejected (A's update: $line; ticket 402: holder $holder, token $token)"
		fi
	else
		say "db" "$line: PostgreSQL accepted it. Ticket 402: holder $holder"
		if [[ $line == "UPDATE 1" && $holder == worker-a ]]; then
			say "RESULT" "B's reservation is lost: A overwrote it, though B held the lock when it wrote"
		else
			fail "expected A's unfenced write to overwrite B's (A's update: $line; ticket 402: holder $holder)"
		fi
	fi
	say "worker A" "raftlock exec exited $EXIT_CODE (4: the lease was lost while the command ran)"
	echo
}

echo "raftlock GC-pause demo: 3 nodes on $ENDPOINTS, PostgreSQL on 127.0.0.1:$PG_PORT, lock $LOCK"
echo "ticket_reservations (id bigint PRIMARY KEY, holder text, last_fencing_token bigint NOT NULL DEFAULT 0)"
echo "Each worker is  raftlock exec … $LOCK -- worker.sh,  which writes ticket 402 with psql, using the"
echo "fencing token that raftlock exec puts in RAFTLOCK_FENCING_TOKEN. Times are since the start of each run."
echo
story fenced
story unfenced
if ((FAILED)); then
	echo "demo FAILED"
	exit 1
fi
echo "demo OK in $(((${EPOCHREALTIME/./} - T0) / 1000)) ms: with fencing the storage refused the stale write; without, it lost B's."
