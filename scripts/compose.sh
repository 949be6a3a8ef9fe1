#!/usr/bin/env bash
# compose.sh: the raftlock cluster of docker-compose.yml, in containers.
#
#   scripts/compose.sh up [3|5]        build the static binary and the FROM scratch image,
#                                      start 3 (or 5) nodes, wait until all agree on a leader,
#                                      print the endpoints (http://127.0.0.1:8001 ...).
#                                      Idempotent: starts only stopped or missing nodes and
#                                      never recreates a running one.
#   scripts/compose.sh down [--purge]  stop and remove the containers; --purge also removes
#                                      the volumes (all Raft state)
#   scripts/compose.sh status          each node's container, health, role, term and indexes;
#                                      exits 0 only when all agree on a leader
#   scripts/compose.sh logs [nI ...]   follow the containers' logs
#   scripts/compose.sh build           only build bin/image/raftlock and the image
#   scripts/compose.sh container nI    print node nI's container id (for docker kill/pause)
#
# No image is pulled: the binary is compiled on this host with CGO_ENABLED=0 and copied
# into a FROM scratch image (see Dockerfile), so an empty Docker engine with no registry
# suffices. Needs go, docker, curl, jq, and docker-compose (or the `docker compose` plugin).
#
# Environment:
#   RAFTLOCK_COMPOSE_PROJECT  compose project name (default raftlock)
#   RAFTLOCK_COMPOSE_WAIT     seconds `up` waits for a leader (default 60)
#   RAFTLOCK_COMPOSE_IMAGE    image tag (default raftlock:local; docker-compose.yml expects it)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROJECT=${RAFTLOCK_COMPOSE_PROJECT:-raftlock}
WAIT=${RAFTLOCK_COMPOSE_WAIT:-60}
IMAGE=${RAFTLOCK_COMPOSE_IMAGE:-raftlock:local}

log() { echo "compose.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
url() { echo "http://127.0.0.1:$((8000 + $1))"; }
# shellcheck disable=SC2034 # used by lib/leader.sh
CURL=(curl -fsS --max-time 1)
now_ms() { date +%s%3N; }

COMPOSE=()
find_compose() {
	if command -v docker-compose >/dev/null; then
		COMPOSE=(docker-compose)
	elif docker compose version >/dev/null 2>&1; then
		COMPOSE=(docker compose)
	else
		die "neither docker-compose nor 'docker compose' is installed"
	fi
	docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
}

# size prints 5 when this project has five-node volumes, 3 when it has three-node ones,
# nothing when it has none.
size() {
	local vols
	vols=$(docker volume ls -q --filter "name=^${PROJECT}_n[1-5]-data$")
	if grep -q "_n4-data$" <<<"$vols"; then
		echo 5
	elif [[ -n $vols ]]; then
		echo 3
	fi
}

# dc N ARGS: docker-compose on the files for an N-node cluster.
dc() {
	local n=$1 files=(-f "$ROOT/docker-compose.yml")
	shift
	[[ $n == 5 ]] && files+=(-f "$ROOT/docker-compose.five.yml")
	(cd "$ROOT" && "${COMPOSE[@]}" -p "$PROJECT" "${files[@]}" "$@")
}

cmd_build() {
	local arch
	command -v go >/dev/null || die "go is required to build the binary"
	arch=$(docker version -f '{{.Server.Arch}}' 2>/dev/null || go env GOARCH)
	log "building a static linux/$arch bin/image/raftlock"
	mkdir -p "$ROOT/bin/image/data"
	(cd "$ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w' -o bin/image/raftlock ./cmd/raftlock)
	log "building image $IMAGE (FROM scratch)"
	# The legacy builder's deprecation notice is noise here; show the output only on failure.
	local out
	out=$(docker build -q -t "$IMAGE" "$ROOT" 2>&1) || { echo "$out" >&2; die "docker build failed"; }
}

# shellcheck source=scripts/lib/leader.sh
. "$ROOT/scripts/lib/leader.sh"

cmd_up() {
	local n=${1:-} have t0 leader i
	have=$(size)
	n=${n:-${have:-3}}
	[[ $n == 3 || $n == 5 ]] || die "up: size must be 3 or 5, not $n"
	if [[ -n $have && $have != "$n" ]]; then
		die "up: project $PROJECT has $have-node volumes; run '$0 down --purge' first to start $n nodes"
	fi
	command -v curl >/dev/null || die "curl is required"
	command -v jq >/dev/null || die "jq is required"
	cmd_build
	t0=$(now_ms)
	# --no-recreate: a second `up` starts what is stopped or missing (after a docker kill,
	# say) and leaves running nodes alone, even when the image changed.
	dc "$n" up -d --no-build --no-recreate --remove-orphans
	local deadline=$((SECONDS + WAIT))
	until leader=$(agreed_leader "$n"); do
		if ((SECONDS >= deadline)); then
			cmd_status >&2 || true
			dc "$n" logs --tail 15 >&2 || true
			die "up: no leader agreed on by all $n nodes after ${WAIT}s"
		fi
		sleep 0.2
	done
	log "leader $leader agreed on by all $n nodes $(($(now_ms) - t0)) ms after 'up -d' began"
	local img c stale=0
	img=$(docker image inspect -f '{{.Id}}' "$IMAGE")
	for ((i = 1; i <= n; i++)); do
		c=$(container "$i")
		if [[ -n $c && $(docker inspect -f '{{.Image}}' "$c") != "$img" ]]; then stale=1; fi
	done
	((stale == 0)) || log "some containers run an older image; '$0 down && $0 up $n' rolls the new one out (volumes keep the state)"
	for ((i = 1; i <= n; i++)); do
		printf 'n%s %s%s\n' "$i" "$(url "$i")" "$([[ n$i == "$leader" ]] && echo ' (leader)')"
	done
}

cmd_down() {
	local purge=${1:-} n
	[[ -z $purge || $purge == --purge ]] || die "down: unknown argument $purge"
	n=$(size)
	if [[ $purge == --purge ]]; then
		dc "${n:-5}" down --remove-orphans -v
	else
		dc "${n:-5}" down --remove-orphans
	fi
}

# container I: node nI's container id (empty when it has none).
container() { dc "$(size)" ps -q "n$1" 2>/dev/null || true; }

cmd_status() {
	local n i j c health role ok=0 leaders=()
	n=$(size)
	[[ -n $n ]] || die "status: project $PROJECT has no volumes (run '$0 up')"
	printf '%-4s %-13s %-10s %-22s %-9s %-7s %-6s %s\n' NODE CONTAINER HEALTH HTTP ROLE LEADER TERM COMMIT/APPLIED
	for ((i = 1; i <= n; i++)); do
		c=$(container "$i")
		health=-
		[[ -n $c ]] && health=$(docker inspect -f '{{if .State.Running}}{{if .State.Health}}{{.State.Health.Status}}{{else}}running{{end}}{{else}}{{.State.Status}}{{end}}' "$c" 2>/dev/null || echo gone)
		j=$(cluster_json "$i")
		if [[ -z $j ]]; then
			printf '%-4s %-13s %-10s %-22s %s\n' "n$i" "${c:0:12}" "$health" "$(url "$i")" down
			ok=1
			continue
		fi
		role=$(jq -r --arg id "n$i" 'if .leader == $id then "leader" elif .leader == "" then "no-leader" else "follower" end' <<<"$j")
		printf '%-4s %-13s %-10s %-22s %-9s %-7s %-6s %s\n' "n$i" "${c:0:12}" "$health" "$(url "$i")" "$role" \
			"$(jq -r '.leader | if . == "" then "-" else . end' <<<"$j")" "$(jq -r .term <<<"$j")" \
			"$(jq -r '"\(.commit_index)/\(.applied_index)"' <<<"$j")"
		leaders+=("$(jq -r .leader <<<"$j")")
	done
	print_agreement "$ok" "${leaders[@]}"
}

cmd_logs() {
	local a
	for a in "$@"; do [[ $a =~ ^n[1-5]$ ]] || die "logs: $a is not a node name like n1"; done
	dc "$(size)" logs -f --tail 20 "$@"
}

[[ $# -gt 0 ]] || usage
cmd=$1
shift
case $cmd in
-h | --help | help) usage ;;
esac
find_compose
case $cmd in
up) (($# <= 1)) || usage; cmd_up "$@" ;;
down) [[ ${1:-} == 3 || ${1:-} == 5 ]] && shift; (($# <= 1)) || usage; cmd_down "$@" ;;
status) cmd_status ;;
logs) [[ ${1:-} == 3 || ${1:-} == 5 ]] && shift; cmd_logs "$@" ;;
build) cmd_build ;;
container) [[ ${1:-} =~ ^n[1-5]$ ]] || usage; container "${1#n}" ;;
*) usage ;;
esac
