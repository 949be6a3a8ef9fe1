#!/usr/bin/env bash
# bench-admission.sh: the admission figures, reproducibly, in one run.
#
#   scripts/bench-admission.sh
#
# Starts a 3-node cluster (scripts/cluster.sh) in a fresh work dir and drives it with
# `raftlock bench`, every run on lock names of its own tenant (the names' first segment):
#   calm alone      CALM workers (4), the calm tenant's figures without anyone else
#   knee            each of KNEE worker counts (16 64), uncontended, no shedding expected
#   overload        FLOOD workers (400) on one tenant, each pausing SHED_PAUSE after a 429
#   recovery        CALM workers started the moment the overload stops
#   flood + calm    FLOOD_WITH workers (300) and CALM workers at once, on two tenants
# For each it prints cycles/s, acquire p50/p99 as the bench saw them (through the kernel
# and the bench's own scheduling on the same cores), the 429s and their latency, and the
# leader's own time to answer a 429 (raftlock_http_shed_duration_seconds: from handler
# start, bucket upper bounds) and its RSS at the end. The load average and the disk's
# fdatasync p50 (scripts/fsync-probe) come first: they say what the figures are worth.
#
# Environment:
#   CALM, KNEE, FLOOD, FLOOD_WITH   worker counts (defaults above)
#   DURATION     per run (default 8s)
#   SHED_PAUSE   a flood worker's pause after a 429 (default 100ms; 0 retries at once)
#   BENCH_DIR    work dir (default: a fresh one under $TMPDIR or /tmp)
#   PORT_BASE    HTTP BASE+1.., Raft BASE+101.. (default 17400)
#   KEEP=1       keep the work dir
# Serve flags reach the nodes as RAFTLOCK_* variables (cluster.sh passes them on), e.g.
# RAFTLOCK_ADMISSION_MIN=16 or RAFTLOCK_LOG_STORE=boltdb.
# Needs: go, jq, curl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CALM=${CALM:-4}
KNEE=${KNEE:-"16 64"}
FLOOD=${FLOOD:-400}
FLOOD_WITH=${FLOOD_WITH:-300}
DURATION=${DURATION:-8s}
SHED_PAUSE=${SHED_PAUSE:-100ms}
PORT_BASE=${PORT_BASE:-17400}

log() { echo "bench-admission: $*" >&2; }
die() { log "$*"; exit 1; }
for tool in go jq curl; do command -v "$tool" >/dev/null || die "$tool is required"; done

DIR=${BENCH_DIR:-$(mktemp -d -t raftlock-admission.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
export RAFTLOCK_CLUSTER_DIR=$DIR/cluster RAFTLOCK_CLUSTER_BIN=$DIR/raftlock
export RAFTLOCK_CLUSTER_HTTP_BASE=$PORT_BASE RAFTLOCK_CLUSTER_RAFT_BASE=$((PORT_BASE + 100))

cleanup() {
	local rc=$?
	"$ROOT/scripts/cluster.sh" down --purge >/dev/null 2>&1 || true
	if [[ ${KEEP:-} == 1 ]]; then log "kept $DIR"; else rm -rf "$DIR"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "work dir $DIR; building"
(cd "$ROOT" && go build -o "$DIR/raftlock" ./cmd/raftlock)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
FSYNC=$("$ROOT/scripts/fsync-probe" "$DIR" 2>/dev/null | tail -1)
"$ROOT/scripts/cluster.sh" up 3 >/dev/null
EPS=""
for i in 1 2 3; do EPS+="${EPS:+,}http://127.0.0.1:$((PORT_BASE + i))"; done

# leader_url: the HTTP URL of the node that leads now.
leader_url() {
	local id
	id=$(curl -sf "http://127.0.0.1:$((PORT_BASE + 1))/v1/cluster" | jq -r '.leader')
	echo "http://127.0.0.1:$((PORT_BASE + ${id#n}))"
}

# shed_buckets URL: "le count" lines of the leader's 429 latency histogram, summed over routes.
shed_buckets() {
	curl -sf "$1/metrics" | awk '/^raftlock_http_shed_duration_seconds_bucket/ {
		match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5); sum[le] += $NF
	} END { for (le in sum) print le, sum[le] }' | sort -g
}

# shed_p99 BEFORE AFTER: the smallest bucket bound (ms) holding 99% of the 429s between two reads.
shed_p99() {
	if [[ -z $2 ]]; then echo "-"; return; fi # no 429 answered yet: no histogram
	awk 'NR == FNR { before[$1] = $2; next } { print $1, $2 - before[$1] }' <(echo "$1") <(echo "$2") |
		sort -g | awk '{ le[NR] = $1; n[NR] = $2 } END {
		total = n[NR]; if (NR == 0 || total == 0) { print "-"; exit }
		for (i = 1; i <= NR; i++) if (n[i] >= 0.99 * total) { print (le[i] == "+Inf" ? "> 100" : "<= " le[i] * 1000); exit }
	}'
}

leader_rss_mib() {
	curl -sf "$1/metrics" | awk '/^process_resident_memory_bytes/ { printf "%.0f", $2 / 1048576 }'
}

bench() { # bench PREFIX WORKERS [flags...]: the bench's JSON
	local prefix=$1 workers=$2
	shift 2
	"$DIR/raftlock" bench --endpoints "$EPS" --prefix "$prefix" --workers "$workers" \
		--duration "$DURATION" --progress 0 --json "$@"
}

ROWS=()
row() { # row NAME JSON SHED_P99 RSS
	ROWS+=("$(jq -r --arg name "$1" --arg srv "$3" --arg rss "$4" '"| \($name) | \(.cycles_per_sec | floor) | \(.ops.acquire.p50_ms) / \(.ops.acquire.p99_ms) | \(.errors.overloaded // 0) | \(if .ops.shed then "\(.ops.shed.p50_ms) / \(.ops.shed.p99_ms)" else "-" end) | \($srv) | \($rss) |"' <<<"$2")")
}

measure() { # measure NAME PREFIX WORKERS [flags...]
	local name=$1 l before out
	shift
	# Each run is a tenant of its own, and a tenant counts for the gate's
	# shares until it has been idle 250 ms (ActiveFor): a run started at
	# once would share the limit with the one before for its first 250 ms,
	# and its workers, which resend a 429 at once, would count hundreds.
	sleep 0.5
	l=$(leader_url)
	before=$(shed_buckets "$l")
	out=$(bench "$@")
	row "$name" "$out" "$(shed_p99 "$before" "$(shed_buckets "$l")")" "$(leader_rss_mib "$l")"
}

log "calm alone: $CALM workers"
measure "calm alone ($CALM)" calm/ "$CALM"
for w in $KNEE; do
	log "knee: $w workers"
	measure "knee ($w)" "knee$w/" "$w"
done

log "overload: $FLOOD workers, then $CALM at once as it stops"
L=$(leader_url)
BEFORE=$(shed_buckets "$L")
bench flood/ "$FLOOD" --shed-pause "$SHED_PAUSE" >"$DIR/flood.json"
row "overload ($FLOOD, pause $SHED_PAUSE)" "$(cat "$DIR/flood.json")" "$(shed_p99 "$BEFORE" "$(shed_buckets "$L")")" "$(leader_rss_mib "$L")"
measure "recovery ($CALM, right after)" calm/ "$CALM"

log "flood + calm: $FLOOD_WITH and $CALM workers at once"
L=$(leader_url)
BEFORE=$(shed_buckets "$L")
bench flood/ "$FLOOD_WITH" --shed-pause "$SHED_PAUSE" >"$DIR/flood.json" &
FLOOD_PID=$!
CALM_OUT=$(bench calm/ "$CALM")
wait "$FLOOD_PID"
AFTER=$(shed_buckets "$L")
row "flood ($FLOOD_WITH) with calm" "$(cat "$DIR/flood.json")" "$(shed_p99 "$BEFORE" "$AFTER")" "$(leader_rss_mib "$L")"
row "calm ($CALM) with flood" "$CALM_OUT" "-" "$(leader_rss_mib "$L")"

echo "load average before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg); $FSYNC"
echo
echo "| run | cycles/s | acquire p50 / p99 ms | 429s | 429 p50 / p99 ms (bench) | 429 p99 ms (leader) | leader RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
