#!/usr/bin/env bash
# chaos-partition.sh (compose only): disconnect the leader's container from the compose
# network, so it can reach neither its peers nor the clients, keep it out for a while,
# reconnect it (with its service-name aliases) and wait until the cluster is whole again;
# repeat. A workload of concurrent clients runs throughout and its summary ends the run.
#
#   scripts/chaos-partition.sh --target compose [--rounds N] [--down SECONDS] ...
CHAOS_NAME=chaos-partition
CHAOS_DEFAULT_DOWN=5
CHAOS_USAGE=$(sed -n '2,/^CHAOS_NAME/p' "$0" | sed '$d; s/^# \{0,1\}//')
# shellcheck source=scripts/lib/chaos.sh
source "$(dirname "$0")/lib/chaos.sh"
chaos_init "$@"
[[ $TARGET == compose ]] || { echo "$CHAOS_NAME: needs --target compose (processes on one host share a network)" >&2; exit 2; }

partition_leader() {
	local leader i
	leader=$(chaos_wait_ready) || return 1
	i=${leader#n}
	chaos_mark start partition "$leader"
	chaos_log "disconnect leader $leader from the network for ${DOWN}s"
	node_disconnect "$i" || return 1
	sleep "$DOWN"
	node_connect "$i" || return 1
	leader=$(chaos_wait_ready) || return 1
	chaos_mark end partition "n$i"
	chaos_log "n$i reconnected; leader $leader"
}

chaos_main partition_leader
