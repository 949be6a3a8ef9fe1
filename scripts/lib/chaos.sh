# shellcheck shell=bash
# chaos.sh: what scripts/chaos-*.sh share. Sourced, never run.
#
# A chaos script sets CHAOS_NAME and CHAOS_USAGE, calls `chaos_init "$@"`, defines
# one function that injects and heals one fault, and hands it to `chaos_main`:
#
#   chaos_main FN   starts its own cluster (chaos_up), builds and starts the workload
#                   (`raftlock-check workload`) in the background, calls FN once per
#                   round with calm periods between, stops the workload, prints its
#                   summary and exits 0 (no violation) or non-zero. An EXIT trap
#                   resumes, reconnects and tears down everything it started.
#
# FN uses the fault vocabulary, the same for both targets:
#   chaos_wait_ready       wait until every node is ready and all name one leader; print it
#   chaos_mark start|end KIND NODE   write a fault mark for the workload's summary
#   node_kill I / node_start I       kill -9 / docker kill; start again (same data)
#   node_pause I / node_resume I     SIGSTOP / docker pause; SIGCONT / docker unpause
#   node_stop I                      graceful stop (SIGTERM / docker stop), then waits for exit
#   node_disconnect I / node_connect I   compose only: leave / rejoin the compose network
#
# Targets: `local` runs scripts/cluster.sh on free loopback ports in its own directory
# (never the user's cluster); `compose` runs scripts/compose.sh as its own compose project
# (default raftlock-chaos) on the fixed host ports 8001-800N, and refuses when they are taken.

set -euo pipefail

CHAOS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CHAOS_COMMON_USAGE="Common flags:
  --target local|compose  the process cluster (default) or the compose cluster
  --rounds N              faults to inject (default ${CHAOS_DEFAULT_ROUNDS:-3})
  --down SECONDS          how long each fault lasts before it is healed (default ${CHAOS_DEFAULT_DOWN:-3})
  --calm SECONDS          quiet time before, between and after faults (default 2)
  --nodes 3|5             cluster size (default 3)
  --out DIR               run directory: workload journals, marks, node logs
                          (default: a new one under \$TMPDIR, removed when the run passes)
  --keep                  keep the run directory when the run passes
Environment: CHAOS_WAIT (seconds to wait for recovery, default 60),
CHAOS_COMPOSE_PROJECT (default raftlock-chaos), CHAOS_CLIENTS (workload clients, default 6);
RAFTLOCK_ELECTION_TIMEOUT and other RAFTLOCK_* serve flags reach local nodes.
Exit status: 0 no violation; 1 a violation, or the cluster did not recover; 2 bad usage."

TARGET=local
ROUNDS=${CHAOS_DEFAULT_ROUNDS:-3}
DOWN=${CHAOS_DEFAULT_DOWN:-3}
CALM=2
NODES=3
RUN_DIR=
KEEP=0
WAIT_S=${CHAOS_WAIT:-60}
ENDPOINTS=()
CONTAINERS=()
PAUSED=()
DISCONNECTED=()
WORKLOAD_PID=
CLUSTER_STARTED=0
CHAOS_FAILED=
OWN_RUN_DIR=0
T0=$(date +%s%3N)

chaos_log() { printf '%s [%6.2fs] %s\n' "$CHAOS_NAME" "$(($(date +%s%3N) - T0))e-3" "$*" >&2; }
chaos_die() { chaos_log "$*"; exit 1; }
chaos_usage() { printf '%s\n\n%s\n' "$CHAOS_USAGE" "$CHAOS_COMMON_USAGE" >&2; exit 2; }

chaos_init() {
	while (($# > 0)); do
		case $1 in
		--target) TARGET=${2:-}; shift 2 ;;
		--rounds) ROUNDS=${2:-}; shift 2 ;;
		--down) DOWN=${2:-}; shift 2 ;;
		--calm) CALM=${2:-}; shift 2 ;;
		--nodes) NODES=${2:-}; shift 2 ;;
		--out) RUN_DIR=${2:-}; shift 2 ;;
		--keep) KEEP=1; shift ;;
		-h | --help) chaos_usage ;;
		*) echo "$CHAOS_NAME: unknown argument $1" >&2; chaos_usage ;;
		esac
	done
	[[ $TARGET == local || $TARGET == compose ]] || { echo "$CHAOS_NAME: --target must be local or compose" >&2; exit 2; }
	[[ $ROUNDS =~ ^[0-9]+$ && $NODES =~ ^[35]$ && $DOWN =~ ^[0-9.]+$ && $CALM =~ ^[0-9.]+$ ]] ||
		{ echo "$CHAOS_NAME: bad --rounds, --nodes, --down or --calm" >&2; exit 2; }
	for tool in go curl jq; do command -v "$tool" >/dev/null || chaos_die "$tool is required"; done
	if [[ -z $RUN_DIR ]]; then
		RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/raftlock-$CHAOS_NAME.XXXXXX")
		OWN_RUN_DIR=1
	fi
	mkdir -p "$RUN_DIR"
	RUN_DIR=$(cd "$RUN_DIR" && pwd)
	trap chaos_cleanup EXIT
	trap 'exit 130' INT TERM
}

# ---- the cluster ----------------------------------------------------------------------

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pick_local_ports sets HTTP and Raft port bases with every port free.
pick_local_ports() {
	local try base i ok
	for ((try = 0; try < 100; try++)); do
		base=$((20000 + (RANDOM % 120) * 100)) # below the ephemeral ports (32768-)
		ok=1
		for ((i = 1; i <= NODES; i++)); do
			if ! port_free $((base + i)) || ! port_free $((base + 50 + i)); then
				ok=0
				break
			fi
		done
		if ((ok)); then
			export RAFTLOCK_CLUSTER_HTTP_BASE=$base RAFTLOCK_CLUSTER_RAFT_BASE=$((base + 50))
			return
		fi
	done
	chaos_die "found no free loopback ports for $NODES nodes"
}

chaos_build() {
	mkdir -p "$RUN_DIR/bin"
	chaos_log "building raftlock and raftlock-check"
	(cd "$CHAOS_ROOT" && go build -o "$RUN_DIR/bin/raftlock" ./cmd/raftlock && go build -o "$RUN_DIR/bin/raftlock-check" ./cmd/raftlock-check) ||
		chaos_die "go build failed"
}

compose() { RAFTLOCK_COMPOSE_PROJECT=$COMPOSE_PROJECT bash "$CHAOS_ROOT/scripts/compose.sh" "$@"; }

chaos_up() {
	local i
	chaos_build
	if [[ $TARGET == local ]]; then
		export RAFTLOCK_CLUSTER_DIR=$RUN_DIR/cluster RAFTLOCK_CLUSTER_BIN=$RUN_DIR/bin/raftlock
		pick_local_ports
		CLUSTER_STARTED=1
		bash "$CHAOS_ROOT/scripts/cluster.sh" up "$NODES" >"$RUN_DIR/cluster-up.out" 2>&1 ||
			{ cat "$RUN_DIR/cluster-up.out" >&2; chaos_die "the local cluster did not start"; }
		for ((i = 1; i <= NODES; i++)); do ENDPOINTS+=("http://127.0.0.1:$((RAFTLOCK_CLUSTER_HTTP_BASE + i))"); done
	else
		docker info >/dev/null 2>&1 || chaos_die "--target compose: no Docker engine answers (docker info failed)"
		COMPOSE_PROJECT=${CHAOS_COMPOSE_PROJECT:-raftlock-chaos}
		for ((i = 1; i <= NODES; i++)); do
			port_free $((8000 + i)) || chaos_die "port $((8000 + i)) is taken: docker-compose.yml publishes nodes on 8001-800$NODES (is another compose cluster up?)"
		done
		# A project of this name is ours: what a killed earlier run left behind goes.
		compose down --purge >/dev/null 2>&1 || true
		CLUSTER_STARTED=1
		compose up "$NODES" >"$RUN_DIR/cluster-up.out" 2>&1 ||
			{ cat "$RUN_DIR/cluster-up.out" >&2; chaos_die "the compose cluster did not start"; }
		for ((i = 1; i <= NODES; i++)); do
			ENDPOINTS+=("http://127.0.0.1:$((8000 + i))")
			CONTAINERS[i]=$(compose container "n$i")
			[[ -n ${CONTAINERS[i]} ]] || chaos_die "no container for n$i"
		done
	fi
	chaos_log "$TARGET cluster of $NODES nodes up: ${ENDPOINTS[*]}"
}

chaos_teardown() {
	((CLUSTER_STARTED)) || return 0
	if [[ $TARGET == local ]]; then
		# Data and node logs stay in the run directory, which goes as a whole on a pass.
		bash "$CHAOS_ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || chaos_log "WARNING: 'cluster.sh down' failed"
	else
		local i
		if [[ -n $CHAOS_FAILED || $KEEP == 1 ]]; then
			for ((i = 1; i <= NODES; i++)); do
				docker logs "${CONTAINERS[i]:-none}" >"$RUN_DIR/n$i.log" 2>&1 || true
			done
		fi
		compose down --purge >/dev/null 2>&1 || chaos_log "WARNING: 'compose.sh down --purge' of project $COMPOSE_PROJECT failed"
	fi
	CLUSTER_STARTED=0
}

# url and CURL serve lib/leader.sh, whose agreed_leader N prints the leader once every
# node is ready, has applied what it knows committed, and all name the same leader.
url() { echo "${ENDPOINTS[$1 - 1]}"; }
# shellcheck disable=SC2034 # used by lib/leader.sh
CURL=(curl -fsS --max-time 1)
# shellcheck source=scripts/lib/leader.sh
. "$CHAOS_ROOT/scripts/lib/leader.sh"

chaos_wait_ready() {
	local deadline=$((SECONDS + WAIT_S)) leader
	until leader=$(agreed_leader "${#ENDPOINTS[@]}"); do
		if ((SECONDS >= deadline)); then
			CHAOS_FAILED="the cluster did not recover within ${WAIT_S}s"
			chaos_log "$CHAOS_FAILED"
			return 1
		fi
		sleep 0.1
	done
	echo "$leader"
}

# ---- faults ---------------------------------------------------------------------------

pid_of() { cat "$RAFTLOCK_CLUSTER_DIR/n$1.pid"; }
cid_of() { echo "${CONTAINERS[$1]}"; }

node_kill() {
	if [[ $TARGET == local ]]; then kill -KILL "$(pid_of "$1")"; else docker kill "$(cid_of "$1")" >/dev/null; fi
}

node_start() {
	if [[ $TARGET == local ]]; then
		bash "$CHAOS_ROOT/scripts/cluster.sh" up "$NODES" >>"$RUN_DIR/cluster-up.out" 2>&1 ||
			{ tail -n 20 "$RUN_DIR/cluster-up.out" >&2; chaos_log "cluster.sh up failed"; return 1; }
	else
		docker start "$(cid_of "$1")" >/dev/null
	fi
}

node_pause() {
	PAUSED+=("$1")
	if [[ $TARGET == local ]]; then kill -STOP "$(pid_of "$1")"; else docker pause "$(cid_of "$1")" >/dev/null; fi
}

node_resume() {
	if [[ $TARGET == local ]]; then kill -CONT "$(pid_of "$1")"; else docker unpause "$(cid_of "$1")" >/dev/null; fi
	local i keep=()
	for i in "${PAUSED[@]}"; do [[ $i == "$1" ]] || keep+=("$i"); done
	PAUSED=("${keep[@]}")
}

# node_stop I: a graceful stop (a leader hands over first), waiting for the exit.
node_stop() {
	if [[ $TARGET == compose ]]; then
		docker stop -t 15 "$(cid_of "$1")" >/dev/null
		return
	fi
	local pid n=0
	pid=$(pid_of "$1")
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do
		((n++ < 150)) || { chaos_log "n$1 ignored SIGTERM for 15s: SIGKILL"; kill -KILL "$pid"; break; }
		sleep 0.1
	done
}

NETWORK=
declare -A ALIASES=()

node_disconnect() {
	[[ $TARGET == compose ]] || chaos_die "node_disconnect needs --target compose"
	local c
	c=$(cid_of "$1")
	NETWORK=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{"\n"}}{{end}}' "$c" | head -n 1)
	# Peers dial the service name, an alias of the compose network: keep them to restore.
	ALIASES[$1]=$(docker inspect -f "{{range (index .NetworkSettings.Networks \"$NETWORK\").Aliases}}{{.}} {{end}}" "$c")
	DISCONNECTED+=("$1")
	docker network disconnect "$NETWORK" "$c"
}

node_connect() {
	local c a args=() i keep=()
	c=$(cid_of "$1")
	for a in ${ALIASES[$1]:-}; do
		[[ $a == "${c:0:12}" ]] || args+=(--alias "$a")
	done
	docker network connect "${args[@]}" "$NETWORK" "$c"
	for i in "${DISCONNECTED[@]}"; do [[ $i == "$1" ]] || keep+=("$i"); done
	DISCONNECTED=("${keep[@]}")
}

# ---- the workload ---------------------------------------------------------------------

chaos_mark() { echo "$(date +%s%N) $1 $2 ${3:-}" >>"$RUN_DIR/workload/marks"; }

chaos_workload_start() {
	local endpoints cap
	endpoints=$(IFS=,; echo "${ENDPOINTS[*]}")
	# A cap in case this script is killed before it can stop the workload.
	cap=$(awk -v r="$ROUNDS" -v d="$DOWN" -v c="$CALM" -v n="$NODES" 'BEGIN { printf "%ds", 300 + r * n * (d + c + 90) }')
	mkdir -p "$RUN_DIR/workload"
	"$RUN_DIR/bin/raftlock-check" workload --endpoints "$endpoints" --out "$RUN_DIR/workload" \
		--clients "${CHAOS_CLIENTS:-6}" --duration "$cap" >"$RUN_DIR/workload.out" 2>&1 &
	WORKLOAD_PID=$!
	chaos_log "workload started (pid $WORKLOAD_PID), journals in $RUN_DIR/workload"
}

# chaos_workload_stop stops the workload, prints its summary and returns its exit status.
chaos_workload_stop() {
	local rc=0
	[[ -n $WORKLOAD_PID ]] || return 2
	kill -TERM "$WORKLOAD_PID" 2>/dev/null || true
	wait "$WORKLOAD_PID" || rc=$?
	WORKLOAD_PID=
	cat "$RUN_DIR/workload.out"
	return "$rc"
}

chaos_cleanup() {
	local rc=$? i
	trap - EXIT
	for i in "${PAUSED[@]}"; do node_resume "$i" 2>/dev/null || true; done
	for i in "${DISCONNECTED[@]}"; do node_connect "$i" 2>/dev/null || true; done
	if [[ -n $WORKLOAD_PID ]]; then
		kill -TERM "$WORKLOAD_PID" 2>/dev/null || true
		wait "$WORKLOAD_PID" 2>/dev/null || true
	fi
	((rc == 0)) || CHAOS_FAILED=${CHAOS_FAILED:-exit status $rc}
	chaos_teardown
	if [[ -n $RUN_DIR && -d $RUN_DIR ]]; then
		if [[ -z $CHAOS_FAILED && $KEEP == 0 && $OWN_RUN_DIR == 1 ]]; then
			rm -rf "$RUN_DIR"
		else
			chaos_log "run directory kept: $RUN_DIR"
		fi
	fi
	exit "$rc"
}

# chaos_main FN: the whole run, FN once per round.
chaos_main() {
	local fn=$1 r rc=0
	chaos_log "target $TARGET, $NODES nodes, $ROUNDS round(s), fault lasts ${DOWN}s, calm ${CALM}s"
	chaos_up
	chaos_wait_ready >/dev/null || exit 1
	chaos_workload_start
	sleep "$CALM"
	for ((r = 1; r <= ROUNDS; r++)); do
		chaos_log "round $r/$ROUNDS"
		"$fn" || { CHAOS_FAILED=${CHAOS_FAILED:-round $r failed}; break; }
		sleep "$CALM"
	done
	chaos_workload_stop || rc=$?
	if ((rc != 0)); then
		CHAOS_FAILED="workload exit status $rc (a violation, or no operation succeeded)"
	fi
	if [[ -n $CHAOS_FAILED ]]; then
		chaos_log "FAIL: $CHAOS_FAILED"
		exit 1
	fi
	chaos_log "PASS: $ROUNDS round(s), no violation"
}
