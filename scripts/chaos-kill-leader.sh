#!/usr/bin/env bash
# chaos-kill-leader.sh: kill -9 the leader (docker kill in containers), bring it back after
# a pause, wait until the cluster is whole again, repeat; a workload of concurrent clients
# runs throughout and its summary (operations, time to a new leader, violations) ends the run.
#
#   scripts/chaos-kill-leader.sh [--target local|compose] [--rounds N] [--down SECONDS] ...
#   scripts/chaos-kill-leader.sh --rounds 5                    # the process cluster, as CI runs it
#   scripts/chaos-kill-leader.sh --target compose --rounds 3   # the compose cluster
CHAOS_NAME=chaos-kill-leader
CHAOS_USAGE=$(sed -n '2,/^CHAOS_NAME/p' "$0" | sed '$d; s/^# \{0,1\}//')
# shellcheck source=scripts/lib/chaos.sh
source "$(dirname "$0")/lib/chaos.sh"
chaos_init "$@"

kill_leader() {
	local leader i
	leader=$(chaos_wait_ready) || return 1
	i=${leader#n}
	chaos_mark start kill "$leader"
	chaos_log "kill -9 leader $leader; back in ${DOWN}s"
	node_kill "$i" || return 1
	sleep "$DOWN"
	node_start "$i" || return 1
	leader=$(chaos_wait_ready) || return 1
	chaos_mark end kill "n$i"
	chaos_log "n$i back; leader $leader"
}

chaos_main kill_leader
