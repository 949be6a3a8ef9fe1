#!/usr/bin/env bash
# bench-ramp.sh: what one tenant's ramp costs the others, on a 3-node TLS cluster with tokens.
#
#   scripts/bench-ramp.sh            both runs: waits, then reads
#   MODES=waits scripts/bench-ramp.sh
#
# Starts a 3-node cluster (scripts/cluster.sh) with TLS (scripts/certs.sh) and a tokens
# file of three tenants (admin; tenantA and tenantB, read-write under their own prefixes),
# then runs scripts/ramp against the leader, on the same cores as the nodes:
#   waits   tenantA keeps WAITS acquires with wait_ms going on one held lock (60,000)
#   reads   tenantA keeps READS blocking reads of it going (10,000)
#   idle    no ramp: the probes and tenantB alone, the machine's baseline at its load now
# while /healthz and /readyz are probed on fresh TLS connections every 20ms and tenantB
# runs acquire/release cycles. Prints, per run, one JSON line (scripts/ramp: latencies in
# ms, answers by status) with the leader's RSS before, at its peak (sampled every 0.5s)
# and after, and the parked acquires the leader counted at their peak. The load average
# and the disk's fdatasync p50 (scripts/fsync-probe) come first: they say what the
# figures are worth.
#
# Environment:
#   WAITS, READS  ramp sizes (defaults above)
#   CONNS         connections the ramp may use (default 4000; the node's cap is 4096)
#   DURATION      per run (default 20s); RAMP_TIME: time to start all of them (5s)
#   MODES         runs (default "waits reads")
#   PORT_BASE     HTTP BASE+1.., Raft BASE+101.. (default 17500)
#   BENCH_DIR     work dir (default: a fresh one under $TMPDIR or /tmp); KEEP=1 keeps it
#   PROBE_VIA     port: probe the leader's --probe-addr (default); api: its API port, over TLS
#   SERVER_BIN    run the nodes on this raftlock binary instead of building one (e.g. an
#                 older version, for a before/after: with PROBE_VIA=api and PLAIN_TOKENS=1
#                 if it predates --probe-addr and prefix=)
#   PLAIN_TOKENS=1  tokens without prefix= fields
#   PROFILE=1     also take a 10s CPU profile of the leader once the ramp is started, and
#                 print its top functions (the profile stays in the work dir)
# Serve flags reach the nodes as RAFTLOCK_* variables, e.g. RAFTLOCK_TENANT_MAX_WAITS=2048.
# Needs: go, jq, curl, openssl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WAITS=${WAITS:-60000}
READS=${READS:-10000}
CONNS=${CONNS:-4000}
DURATION=${DURATION:-20s}
RAMP_TIME=${RAMP_TIME:-5s}
MODES=${MODES:-"waits reads"}
PORT_BASE=${PORT_BASE:-17500}

log() { echo "bench-ramp: $*" >&2; }
die() { log "$*"; exit 1; }
for tool in go jq curl openssl; do command -v "$tool" >/dev/null || die "$tool is required"; done

DIR=${BENCH_DIR:-$(mktemp -d -t raftlock-ramp.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
export RAFTLOCK_CLUSTER_DIR=$DIR/cluster RAFTLOCK_CLUSTER_BIN=$DIR/raftlock
export RAFTLOCK_CLUSTER_HTTP_BASE=$PORT_BASE RAFTLOCK_CLUSTER_RAFT_BASE=$((PORT_BASE + 100))

cleanup() {
	local rc=$?
	[[ -n ${SAMPLER:-} ]] && kill "$SAMPLER" 2>/dev/null || true
	[[ -n ${RAMP:-} ]] && kill "$RAMP" 2>/dev/null || true
	if [[ ${KEEP:-} == 1 ]]; then "$ROOT/scripts/cluster.sh" down >/dev/null 2>&1 || true; else "$ROOT/scripts/cluster.sh" down --purge >/dev/null 2>&1 || true; fi
	if [[ ${KEEP:-} == 1 ]]; then log "kept $DIR"; else rm -rf "$DIR"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "work dir $DIR; building"
(cd "$ROOT" && go build -o "$DIR/raftlock" ./cmd/raftlock && go build -o "$DIR/ramp" ./scripts/ramp)
[[ -n ${SERVER_BIN:-} ]] && cp "$SERVER_BIN" "$DIR/raftlock"
"$ROOT/scripts/certs.sh" "$DIR/certs" n1 >/dev/null 2>&1
ADMIN=admin-$(openssl rand -hex 16)
TOK_A=tenant-a-$(openssl rand -hex 16)
TOK_B=tenant-b-$(openssl rand -hex 16)
(umask 077 && cat >"$DIR/tokens" <<EOF
$ADMIN admin root
$TOK_A read-write tenantA prefix=tenantA/
$TOK_B read-write tenantB prefix=tenantB/
EOF
)
[[ ${PLAIN_TOKENS:-} == 1 ]] && sed -i 's/ prefix=.*//' "$DIR/tokens"
export RAFTLOCK_TLS_CERT=$DIR/certs/n1.pem RAFTLOCK_TLS_KEY=$DIR/certs/n1-key.pem RAFTLOCK_TLS_CA=$DIR/certs/ca.pem
export RAFTLOCK_AUTH_TOKENS=$DIR/tokens RAFTLOCK_TOKEN=$ADMIN
[[ ${PROFILE:-} == 1 ]] && export RAFTLOCK_DEBUG_ADDR=127.0.0.1:0
[[ ${PROBE_VIA:-port} == port ]] && export RAFTLOCK_PROBE_ADDR=127.0.0.1:0

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
FSYNC=$("$ROOT/scripts/fsync-probe" "$DIR" 2>/dev/null | tail -1)
"$ROOT/scripts/cluster.sh" up 3 >/dev/null
CURL=(curl -sf --cacert "$RAFTLOCK_TLS_CA" -H "Authorization: Bearer $ADMIN")
id=$("${CURL[@]}" "https://127.0.0.1:$((PORT_BASE + 1))/v1/cluster" | jq -r '.leader')
i=${id#n}
URL=https://127.0.0.1:$((PORT_BASE + i))
PID=$(cat "$DIR/cluster/n$i.pid")
PROBE_URL=$URL
if [[ ${PROBE_VIA:-port} == port ]]; then
	PROBE_URL=http://$(grep -o 'serving probes: addr=[0-9.:]*' "$DIR/cluster/n$i.log" | tail -1 | cut -d= -f2)
fi
log "load average at start: $LOAD_BEFORE; fdatasync: $FSYNC; leader $id (pid $PID) at $URL, probed at $PROBE_URL"

# rq_wait_s: seconds the leader's threads have spent runnable but waiting for a CPU (the
# kernel's schedstat): beside cpu_s, how much of its time the machine's load took.
rq_wait_s() { cat /proc/"$PID"/task/*/schedstat 2>/dev/null | awk '{ s += $2 } END { printf "%.1f", s / 1e9 }'; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$PID/stat"; }
rss_mib() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$PID/status"; }
waiters() { "${CURL[@]}" "$URL/metrics" | awk '/^raftlock_admission_waiters / { print $2 }'; }

for mode in $MODES; do
	n=$WAITS
	[[ $mode == reads ]] && n=$READS
	[[ $mode == idle ]] && n=0
	before=$(rss_mib)
	cpu_before=$(cpu_s)
	rq_before=$(rq_wait_s)
	: >"$DIR/samples"
	(while sleep 0.5; do echo "$(rss_mib) $(waiters)" >>"$DIR/samples"; done) &
	SAMPLER=$!
	if [[ ${PROFILE:-} == 1 ]]; then
		dbg=$(grep -o 'serving pprof: addr=[0-9.:]*' "$DIR/cluster/n$i.log" | tail -1 | cut -d= -f2)
		(sleep "${RAMP_TIME%s}" && curl -sf -o "$DIR/cpu-$mode.pprof" "http://$dbg/debug/pprof/profile?seconds=10") &
	fi
	args=(--url "$URL" --probe-url "$PROBE_URL" --ca "$RAFTLOCK_TLS_CA" --ramp-token "$TOK_A" --calm-token "$TOK_B"
		--mode "$mode" --n "$n" --conns "$CONNS" --duration "$DURATION" --ramp-time "$RAMP_TIME")
	# The prober is a process of its own, as an orchestrator's is; on the same cores.
	"$DIR/ramp" "${args[@]}" --role ramp >"$DIR/ramp-$mode.json" &
	RAMP=$!
	probe=$("$DIR/ramp" "${args[@]}" --role probe)
	wait "$RAMP"
	out=$(jq -c -s '.[0] * .[1]' "$DIR/ramp-$mode.json" <(echo "$probe"))
	kill "$SAMPLER" 2>/dev/null || true
	wait "$SAMPLER" 2>/dev/null || true
	SAMPLER=
	peak=$(sort -n "$DIR/samples" | tail -1 | cut -d' ' -f1)
	parked=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$DIR/samples")
	jq -c --arg load "$LOAD_BEFORE" --arg fsync "$FSYNC" --arg b "$before" --arg p "$peak" --arg a "$(rss_mib)" --arg w "$parked" \
		--arg endload "$(cut -d' ' -f1-3 /proc/loadavg)" --arg cpu "$(awk -v a="$cpu_before" -v b="$(cpu_s)" 'BEGIN { printf "%.1f", b - a }')" \
		--arg rq "$(awk -v a="$rq_before" -v b="$(rq_wait_s)" 'BEGIN { printf "%.1f", b - a }')" \
		'. + {leader_cpu_s: ($cpu|tonumber), leader_runqueue_wait_s: ($rq|tonumber), load_avg_at_start: $load, load_avg_at_end: $endload, fdatasync: $fsync, leader_rss_mib: {before: ($b|tonumber), peak: ($p|tonumber), after: ($a|tonumber)}, leader_parked_acquires_peak: ($w|tonumber)}' <<<"$out"
	if [[ ${PROFILE:-} == 1 ]]; then
		wait
		go tool pprof -top -nodecount 25 "$DIR/raftlock" "$DIR/cpu-$mode.pprof" 2>/dev/null | sed "s/^/$mode profile: /" >&2
	fi
done
