#!/usr/bin/env bash
# cluster.sh: a local raftlock cluster of 3 or 5 `raftlock serve` processes on 127.0.0.1.
#
#   scripts/cluster.sh up [3|5]       build bin/raftlock if missing or stale, start every node
#                                     that is not running, wait until all agree on a leader,
#                                     print the endpoints (default 3 nodes)
#   scripts/cluster.sh down [--purge] stop the nodes this script started (SIGTERM, then
#                                     SIGKILL after 10s); --purge also deletes data and logs
#   scripts/cluster.sh status         each node's pid, role, term, indexes and readiness;
#                                     exits 0 only when every node is up and all agree on a leader
#   scripts/cluster.sh logs [nI ...]  tail -F the node logs (all nodes by default)
#
# Layout: node nI listens on HTTP 127.0.0.1:(8000+I) and Raft 127.0.0.1:(9000+I); its
# Raft data is in $DIR/nI, its log in $DIR/nI.log, its pid in $DIR/nI.pid.
# `up` is idempotent: it restarts only nodes whose process is gone (after a kill -9, say),
# and a restarted node recovers from its data dir. `down` signals only a pid that is a
# `raftlock serve` of this directory's node, never anything else.
#
# Environment:
#   RAFTLOCK_CLUSTER_DIR        cluster directory (default ./.cluster at the repository root)
#   RAFTLOCK_CLUSTER_WAIT       seconds `up` waits for a leader (default 30)
#   RAFTLOCK_CLUSTER_HTTP_BASE  node I serves HTTP on port BASE+I (default 8000)
#   RAFTLOCK_CLUSTER_RAFT_BASE  node I serves Raft on port BASE+I (default 9000)
#   RAFTLOCK_CLUSTER_BIN        use this binary instead of building bin/raftlock
# Other RAFTLOCK_* variables reach the nodes as flag defaults (RAFTLOCK_LOG_LEVEL=debug,
# RAFTLOCK_ELECTION_TIMEOUT=500ms, ...), except those that must differ per node.
# TLS and tokens (docs/OPERATIONS.md, "TLS and tokens"): RAFTLOCK_TLS_CERT, _KEY and _CA reach every node (on
# 127.0.0.1 one certificate from scripts/certs.sh serves them all) and make this script use
# https; with RAFTLOCK_AUTH_TOKENS, set RAFTLOCK_TOKEN to a token of the file for its checks.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${RAFTLOCK_CLUSTER_DIR:-$ROOT/.cluster}
WAIT=${RAFTLOCK_CLUSTER_WAIT:-30}
HTTP_BASE=${RAFTLOCK_CLUSTER_HTTP_BASE:-8000}
RAFT_BASE=${RAFTLOCK_CLUSTER_RAFT_BASE:-9000}
MARKER=.raftlock-cluster

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

http_port() { echo $((HTTP_BASE + $1)); }
raft_port() { echo $((RAFT_BASE + $1)); }
SCHEME=http
CURL=(curl -fsS --max-time 1)
if [[ -n ${RAFTLOCK_TLS_CA:-} ]]; then
	SCHEME=https
	CURL+=(--cacert "$RAFTLOCK_TLS_CA")
fi
url() { echo "$SCHEME://127.0.0.1:$(http_port "$1")"; }

# auth_header keeps RAFTLOCK_TOKEN out of curl's command line, which others can read.
auth_header() {
	[[ -n ${RAFTLOCK_TOKEN:-} ]] || return 0
	(umask 077 && printf 'Authorization: Bearer %s\n' "$RAFTLOCK_TOKEN" >"$DIR/.auth-header")
	CURL+=(-H "@$DIR/.auth-header")
}

# absdir makes DIR absolute, so that pid checks and the nodes' --data-dir agree.
absdir() {
	mkdir -p "$DIR"
	DIR=$(cd "$DIR" && pwd)
}

# size prints the node count recorded by the first `up` of this directory (empty if none).
size() { cat "$DIR/size" 2>/dev/null || true; }

# is_ours PID I: true when PID is a `raftlock serve` whose --data-dir is $DIR/nI.
is_ours() {
	local pid=$1 i=$2 args
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	if [[ -r /proc/$pid/cmdline ]]; then
		args=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	else
		args=$(ps -ww -o args= -p "$pid" 2>/dev/null | tr ' ' '\n') || return 1
	fi
	[[ $(sed -n 1p <<<"$args") == *raftlock ]] || return 1
	[[ $(sed -n 2p <<<"$args") == serve ]] || return 1
	grep -qxF -- "--data-dir" <<<"$args" && grep -qxF -- "$DIR/n$i" <<<"$args"
}

# running I: prints the pid of node nI when it runs, fails otherwise.
running() {
	local pid
	pid=$(cat "$DIR/n$1.pid" 2>/dev/null) || return 1
	is_ours "$pid" "$1" || return 1
	echo "$pid"
}

# build makes bin/raftlock unless it is newer than every Go source and go.mod/go.sum.
BIN=${RAFTLOCK_CLUSTER_BIN:-}
build() {
	if [[ -n $BIN ]]; then
		[[ -x $BIN ]] || die "RAFTLOCK_CLUSTER_BIN=$BIN is not executable"
		return
	fi
	BIN=$ROOT/bin/raftlock
	if [[ -x $BIN ]] && [[ -z $(cd "$ROOT" && find . -path ./.cluster -prune -o \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$BIN" -print -quit) ]]; then
		return
	fi
	command -v go >/dev/null || die "bin/raftlock is missing or stale and go is not installed"
	log "building bin/raftlock"
	if ! (cd "$ROOT" && go build -o bin/raftlock ./cmd/raftlock); then
		# The tree may be mid-edit; a working older binary beats no cluster.
		[[ -x $BIN ]] || die "go build failed"
		log "go build failed; using the existing, older bin/raftlock"
	fi
}

# port_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_node() {
	local i=$1 n=$2 peers="" j
	for ((j = 1; j <= n; j++)); do
		peers+="${peers:+,}n$j=127.0.0.1:$(raft_port "$j")"
	done
	for port in "$(http_port "$i")" "$(raft_port "$i")"; do
		port_free "$port" || die "n$i: port $port is taken by another process (see RAFTLOCK_CLUSTER_HTTP_BASE / _RAFT_BASE)"
	done
	mkdir -p "$DIR/n$i"
	echo "=== $(date -u +%FT%TZ) cluster.sh starts n$i" >>"$DIR/n$i.log"
	# Per-node flags are all on the command line (which wins over RAFTLOCK_* variables);
	# --join and --dev would contradict them, so they never reach a node. setsid keeps a
	# Ctrl-C in this terminal away from the nodes.
	local launcher=()
	command -v setsid >/dev/null && launcher=(setsid)
	env -u RAFTLOCK_JOIN -u RAFTLOCK_DEV -u RAFTLOCK_ADVERTISE_HTTP -u RAFTLOCK_ADVERTISE_RAFT \
		"${launcher[@]}" "$BIN" serve --id "n$i" --data-dir "$DIR/n$i" \
		--http-addr "127.0.0.1:$(http_port "$i")" --raft-addr "127.0.0.1:$(raft_port "$i")" \
		--peers "$peers" </dev/null >>"$DIR/n$i.log" 2>&1 &
	echo $! >"$DIR/n$i.pid"
}

# shellcheck source=scripts/lib/leader.sh
. "$ROOT/scripts/lib/leader.sh"

now_ms() { date +%s%3N; }

cmd_up() {
	local n=${1:-} have i started=0 t0 leader
	have=$(size)
	n=${n:-${have:-3}}
	[[ $n == 3 || $n == 5 ]] || die "up: size must be 3 or 5, not $n"
	if [[ -n $have && $have != "$n" ]]; then
		die "up: $DIR holds a $have-node cluster; run '$0 down --purge' first to start $n nodes"
	fi
	command -v curl >/dev/null || die "curl is required"
	command -v jq >/dev/null || die "jq is required"
	build
	echo "$n" >"$DIR/size"
	touch "$DIR/$MARKER"
	t0=$(now_ms)
	for ((i = 1; i <= n; i++)); do
		if pid=$(running "$i"); then
			log "n$i already running (pid $pid)"
		else
			start_node "$i" "$n"
			started=$((started + 1))
		fi
	done
	local deadline=$((SECONDS + WAIT))
	until leader=$(agreed_leader "$n"); do
		for ((i = 1; i <= n; i++)); do
			if ! running "$i" >/dev/null; then
				log "n$i exited; the end of $DIR/n$i.log:"
				tail -n 15 "$DIR/n$i.log" >&2
				die "up: n$i is not running ('$0 down' stops the others)"
			fi
		done
		((SECONDS < deadline)) || { cmd_status >&2 || true; die "up: no leader agreed on by all $n nodes after ${WAIT}s"; }
		sleep 0.1
	done
	log "started $started node(s); leader $leader agreed on by all $n nodes after $(($(now_ms) - t0)) ms"
	for ((i = 1; i <= n; i++)); do
		printf 'n%s %s raft=127.0.0.1:%s%s\n' "$i" "$(url "$i")" "$(raft_port "$i")" "$([[ n$i == "$leader" ]] && echo ' (leader)')"
	done
}

cmd_down() {
	local purge=${1:-} i pid pids=() waited
	[[ -z $purge || $purge == --purge ]] || die "down: unknown argument $purge"
	[[ -d $DIR ]] || { log "nothing to stop: $DIR does not exist"; return 0; }
	absdir
	for f in "$DIR"/n*.pid; do
		[[ -e $f ]] || continue
		i=${f##*/n}
		i=${i%.pid}
		if pid=$(running "$i"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
			log "n$i: SIGTERM to pid $pid"
		else
			log "n$i: not running (stale pid file)"
		fi
		rm -f "$f"
	done
	for pid in "${pids[@]}"; do
		waited=0
		while kill -0 "$pid" 2>/dev/null; do
			if ((waited >= 100)); then
				log "pid $pid still up after 10s: SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.1
			waited=$((waited + 1))
		done
	done
	if [[ $purge == --purge ]]; then
		[[ -e $DIR/$MARKER ]] || die "down --purge: $DIR has no $MARKER file; not deleting it"
		rm -rf "$DIR"
		log "deleted $DIR"
	fi
}

cmd_status() {
	local n i pid j role ok=0 leaders=()
	[[ -d $DIR ]] || die "status: $DIR does not exist (run '$0 up')"
	absdir
	n=$(size)
	[[ -n $n ]] || die "status: $DIR holds no cluster"
	printf '%-4s %-8s %-22s %-9s %-7s %-6s %-14s %s\n' NODE PID HTTP ROLE LEADER TERM COMMIT/APPLIED READY
	for ((i = 1; i <= n; i++)); do
		pid=$(running "$i") || pid=-
		j=$(cluster_json "$i")
		if [[ -z $j ]]; then
			printf '%-4s %-8s %-22s %-9s\n' "n$i" "$pid" "$(url "$i")" down
			ok=1
			continue
		fi
		role=$(jq -r --arg id "n$i" 'if .leader == $id then "leader" elif .leader == "" then "candidate" else "follower" end' <<<"$j")
		[[ $role == candidate ]] && role=no-leader
		printf '%-4s %-8s %-22s %-9s %-7s %-6s %-14s %s\n' "n$i" "$pid" "$(url "$i")" "$role" \
			"$(jq -r '.leader | if . == "" then "-" else . end' <<<"$j")" "$(jq -r .term <<<"$j")" \
			"$(jq -r '"\(.commit_index)/\(.applied_index)"' <<<"$j")" "$(ready "$i" && echo yes || echo no)"
		leaders+=("$(jq -r .leader <<<"$j")")
	done
	print_agreement "$ok" "${leaders[@]}"
}

cmd_logs() {
	local files=() a
	[[ -d $DIR ]] || die "logs: $DIR does not exist"
	if (($# == 0)); then
		for a in "$DIR"/n*.log; do [[ -e $a ]] && files+=("$a"); done
	else
		for a in "$@"; do
			[[ $a =~ ^n[0-9]+$ ]] || die "logs: $a is not a node name like n1"
			files+=("$DIR/$a.log")
		done
	fi
	((${#files[@]} > 0)) || die "logs: no log files in $DIR"
	exec tail -n 20 -F "${files[@]}"
}

case ${1:-} in
up) shift; (($# <= 1)) || usage; absdir; auth_header; cmd_up "$@" ;;
down) shift; (($# <= 2)) || usage; [[ ${1:-} == 3 || ${1:-} == 5 ]] && shift; cmd_down "$@" ;;
status) shift; [[ -d $DIR ]] && auth_header; cmd_status ;;
logs) shift; [[ ${1:-} == 3 || ${1:-} == 5 ]] && shift; cmd_logs "$@" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
