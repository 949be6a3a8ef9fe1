#!/usr/bin/env bash
# bench-compare.sh: raftlock against its peers, side by side in one run, on this machine.
#
#   scripts/bench-compare.sh
#
# Runs, in order: an fdatasync probe of the disk under the work dir; a 3-node raftlock
# cluster (scripts/cluster.sh) for each log store in STORES, driven by `raftlock bench`;
# a 3-member etcd (Debian's etcd-server) driven through etcd's concurrency session +
# Mutex; a single Redis with appendonly yes + appendfsync always, driven by SET NX PX and
# a Lua compare-and-delete. Each is driven by WORKERS workers, each with its own lock,
# running acquire+release cycles for DURATION, straight to the leader (raftlock bench
# through the Go client, and through plain keep-alive HTTP; the etcd client given the
# leader's endpoint only). It
# prints one Markdown table: cycles/s, acquire p50/p99 and the servers' CPU per cycle per
# system and worker count, then each process's share: raftlock's leader per request and a
# follower per committed entry, and the entries each Raft round carried (one fdatasync on
# the leader and one AppendEntries to each follower), which most decides the CPU per cycle.
# Server CPU is utime+stime from /proc/PID/stat of every node, member or server over the
# measured window (the load generator is not in it); a
# CPU-bound service's throughput is cores / CPU per cycle, so it is the figure that holds
# on a machine shared with other work, where cycles/s and latency do not. The machine's
# load average at the start is printed too.
# Every node, member and server runs on 127.0.0.1, its data under one work dir on the
# same disk; everything it starts is stopped and the work dir deleted when it exits.
#
# Environment:
#   WORKERS    worker counts (default "1 16 64")
#   DURATION   per measurement (default 10s)
#   STORES     raftlock --log-store kinds to measure (default "boltdb wal")
#   VIAS       how raftlock bench drives raftlock (default "client http"): client is the
#              Go client library, sharing one client across the workers as the etcd driver
#              shares one etcd client (so calls made at once go in batches); http is one
#              keep-alive connection per worker, one request per call
#   SYSTEMS    which to run (default "raftlock etcd redis")
#   BENCH_DIR  work dir (default: a fresh one under $TMPDIR or /tmp; put it on the disk to measure)
#   KEEP=1     keep the work dir (logs, data) after the run
#   PORT_BASE  ports used: raftlock BASE+101.. (HTTP) and BASE+201.. (Raft), etcd
#              BASE+301.. (client) and BASE+311.. (peer), Redis BASE+379 (default 17000)
# Needs: go, jq, curl, etcd + etcdctl (apt-get install etcd-server etcd-client) and
# redis-server + redis-cli (apt-get install redis-server).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORKERS=${WORKERS:-"1 16 64"}
DURATION=${DURATION:-10s}
STORES=${STORES:-"boltdb wal"}
VIAS=${VIAS:-"client http"}
SYSTEMS=${SYSTEMS:-"raftlock etcd redis"}
PORT_BASE=${PORT_BASE:-17000}

log() { echo "bench-compare: $*" >&2; }
die() { log "$*"; exit 1; }

for tool in go jq curl; do command -v "$tool" >/dev/null || die "$tool is required"; done
if [[ $SYSTEMS == *etcd* ]] && ! { command -v etcd && command -v etcdctl; } >/dev/null; then
	die "etcd and etcdctl are required: apt-get install -y etcd-server etcd-client"
fi
if [[ $SYSTEMS == *redis* ]] && ! { command -v redis-server && command -v redis-cli; } >/dev/null; then
	die "redis-server and redis-cli are required: apt-get install -y redis-server"
fi

DIR=${BENCH_DIR:-$(mktemp -d -t raftlock-bench.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

PIDS=()        # etcd members and redis: stopped by pid at exit
CLUSTERS=()    # raftlock cluster dirs: stopped by cluster.sh down --purge at exit
cleanup() {
	local rc=$? pid c
	for c in "${CLUSTERS[@]}"; do
		RAFTLOCK_CLUSTER_DIR=$c "$ROOT/scripts/cluster.sh" down --purge >/dev/null 2>&1 || true
	done
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	if [[ ${KEEP:-} == 1 ]]; then
		log "kept $DIR"
	else
		rm -rf "$DIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "work dir $DIR; building"
(cd "$ROOT" && go build -o "$DIR/raftlock" ./cmd/raftlock)
(cd "$ROOT/bench/peers" && go build -o "$DIR/peers" .)

declare -A CELL # CELL[system,workers] = "cycles/s, p50 / p99, CPU per cycle"
declare -A CPU  # CPU[system,workers] = server CPU µs per cycle
COLS=()
PROCS=()       # per-process CPU lines printed under the table
cell() { # cell SYSTEM WORKERS JSON-with-cycles_per_sec,acquire_p50_ms,acquire_p99_ms,cpu_us_per_cycle
	CELL[$1,$2]=$(jq -r '"\(.cycles_per_sec|floor) /s, \(.acquire_p50_ms) / \(.acquire_p99_ms) ms, \(.cpu_us_per_cycle // 0 | floor) µs CPU"' <<<"$3")
	CPU[$1,$2]=$(jq -r '.cpu_us_per_cycle // 0' <<<"$3")
	log "$1, $2 workers: ${CELL[$1,$2]}"
}
# procs SYSTEM WORKERS JSON-with-processes: one line of each process's CPU.
procs() {
	PROCS+=("$1, $2 workers: $(jq -r '[.processes[] | "\(.name) \(.us_per_cycle|floor) µs/cycle" +
		(if .role == "leader" then " (leader, \(.us_per_request|floor) µs/request)"
		 elif .role == "follower" then " (follower, \(.us_per_entry|floor) µs/entry)" else "" end)] | join(", ")' <<<"$3")$(
		jq -r 'if (.entries_per_round // 0) > 0 then "; \(.entries_per_round * 10 | floor / 10) entries per Raft round" else "" end' <<<"$3")")
}

# wait_for CMD...: retry for 30 s.
wait_for() {
	for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	return 1
}

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average at start: $LOAD"
FSYNC=$("$DIR/peers" fsync --dir "$DIR" --count 2000 --json)
log "fdatasync: $FSYNC"

run_raftlock() {
	local store=$1 cdir=$DIR/raftlock-$store w out help
	help=$("$DIR/raftlock" serve --help 2>&1 || true) # --help exits 2
	if [[ $store != boltdb && $help != *-log-store* ]]; then
		log "this raftlock has no --log-store: skipping $store"
		return
	fi
	CLUSTERS+=("$cdir")
	log "raftlock ($store): starting 3 nodes"
	RAFTLOCK_CLUSTER_DIR=$cdir RAFTLOCK_CLUSTER_BIN=$DIR/raftlock RAFTLOCK_LOG_STORE=$store \
		RAFTLOCK_CLUSTER_HTTP_BASE=$((PORT_BASE + 100)) RAFTLOCK_CLUSTER_RAFT_BASE=$((PORT_BASE + 200)) \
		"$ROOT/scripts/cluster.sh" up 3 >/dev/null
	local eps="" pids="" i
	for i in 1 2 3; do
		eps+="${eps:+,}http://127.0.0.1:$((PORT_BASE + 100 + i))"
		pids+="${pids:+,}n$i=$(cat "$cdir/n$i.pid")"
	done
	local via col
	for via in $VIAS; do
		col=raftlock-$store-$via
		COLS+=("$col")
		for w in $WORKERS; do
			out=$("$DIR/raftlock" bench --endpoints "$eps" --via "$via" --workers "$w" --duration "$DURATION" --progress 0 --json --server-pids "$pids")
			cell "$col" "$w" "$(jq '{cycles_per_sec, acquire_p50_ms: .ops.acquire.p50_ms, acquire_p99_ms: .ops.acquire.p99_ms, cpu_us_per_cycle: .cpu.us_per_cycle}' <<<"$out")"
			procs "$col" "$w" "$(jq .cpu <<<"$out")"
		done
	done
	RAFTLOCK_CLUSTER_DIR=$cdir "$ROOT/scripts/cluster.sh" down --purge >/dev/null
}

run_etcd() {
	local i cluster="" eps="" leader w pids="" out
	for i in 1 2 3; do
		cluster+="${cluster:+,}e$i=http://127.0.0.1:$((PORT_BASE + 310 + i))"
		eps+="${eps:+,}127.0.0.1:$((PORT_BASE + 300 + i))"
	done
	log "etcd $(etcd --version | sed -n 1p | awk '{print $3}'): starting 3 members"
	for i in 1 2 3; do
		etcd --name "e$i" --data-dir "$DIR/etcd/e$i" \
			--listen-client-urls "http://127.0.0.1:$((PORT_BASE + 300 + i))" \
			--advertise-client-urls "http://127.0.0.1:$((PORT_BASE + 300 + i))" \
			--listen-peer-urls "http://127.0.0.1:$((PORT_BASE + 310 + i))" \
			--initial-advertise-peer-urls "http://127.0.0.1:$((PORT_BASE + 310 + i))" \
			--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "bench-$$" \
			--logger zap --log-level warn </dev/null >"$DIR/etcd-e$i.log" 2>&1 &
		PIDS+=($!)
		pids+="${pids:+,}e$i=$!"
	done
	ETCDCTL_API=3 wait_for etcdctl --endpoints "$eps" endpoint health || die "etcd did not become healthy (logs in $DIR)"
	# The member whose id is the leader's, as raftlock bench talks to raftlock's leader.
	leader=$(ETCDCTL_API=3 etcdctl --endpoints "$eps" endpoint status -w json |
		jq -r '.[] | select(.Status.leader == .Status.header.member_id) | .Endpoint')
	[[ -n $leader ]] || die "etcd: no leader found"
	COLS+=(etcd)
	for w in $WORKERS; do
		out=$("$DIR/peers" etcd --endpoints "$leader" --workers "$w" --duration "$DURATION" --json --server-pids "$pids")
		cell etcd "$w" "$out"
		procs etcd "$w" "$out"
	done
}

run_redis() {
	local port=$((PORT_BASE + 379)) w
	mkdir -p "$DIR/redis"
	log "$(redis-server --version | awk '{print $1, $3}'): starting, appendfsync always"
	redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR/redis" --appendonly yes --appendfsync always \
		--save "" --daemonize no --logfile "$DIR/redis.log" </dev/null >/dev/null 2>&1 &
	PIDS+=($!)
	wait_for redis-cli -p "$port" ping || die "redis did not answer (log in $DIR)"
	COLS+=(redis)
	for w in $WORKERS; do
		cell redis "$w" "$("$DIR/peers" redis --addr "127.0.0.1:$port" --workers "$w" --duration "$DURATION" --json --server-pids "redis=${PIDS[-1]}")"
	done
}

for sys in $SYSTEMS; do
	case $sys in
	raftlock) for store in $STORES; do run_raftlock "$store"; done ;;
	etcd) run_etcd ;;
	redis) run_redis ;;
	*) die "unknown system $sys" ;;
	esac
done

echo
echo "$(nproc) cores, $(uname -r), load average at start $LOAD; fdatasync of a 4 KiB append: p50 $(jq .p50_ms <<<"$FSYNC") ms, p99 $(jq .p99_ms <<<"$FSYNC") ms; $DURATION per cell"
echo "Acquire+release cycles, one lock per worker; each cell: cycles/s, acquire p50 / p99, servers' CPU per cycle."
echo
header="| workers |" rule="| --- |"
for c in "${COLS[@]}"; do header+=" $c |"; rule+=" --- |"; done
echo "$header"
echo "$rule"
for w in $WORKERS; do
	row="| $w |"
	for c in "${COLS[@]}"; do row+=" ${CELL[$c,$w]:-} |"; done
	echo "$row"
done
echo
for p in "${PROCS[@]}"; do echo "$p"; done
# Each raftlock store's CPU per cycle as a fraction of etcd's, in this run.
for c in "${COLS[@]}"; do
	[[ $c == raftlock-* && " ${COLS[*]} " == *" etcd "* ]] || continue
	for w in $WORKERS; do
		awk -v c="$c" -v w="$w" -v r="${CPU[$c,$w]:-0}" -v e="${CPU[etcd,$w]:-0}" \
			'BEGIN { if (r > 0 && e > 0) printf "%s CPU per cycle at %s workers: %.2fx etcd'"'"'s\n", c, w, r / e }'
	done
done
