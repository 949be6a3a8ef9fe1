#!/usr/bin/env bash
# chaos-rolling-restart.sh: restart every node in turn, followers first and the leader
# last, as an upgrade would: a graceful stop (SIGTERM or docker stop: a leader hands over
# first), a start, and a wait until every node is ready before the next. One round restarts
# every node. A workload of concurrent clients runs throughout and its summary ends the run.
#
#   scripts/chaos-rolling-restart.sh [--target local|compose] [--rounds N] [--down SECONDS] ...
#   --down is how long each node stays stopped (default 1 s)
CHAOS_NAME=chaos-rolling-restart
CHAOS_DEFAULT_ROUNDS=1
CHAOS_DEFAULT_DOWN=1
CHAOS_USAGE=$(sed -n '2,/^CHAOS_NAME/p' "$0" | sed '$d; s/^# \{0,1\}//')
# shellcheck source=scripts/lib/chaos.sh
source "$(dirname "$0")/lib/chaos.sh"
chaos_init "$@"

restart_node() {
	local i=$1 leader
	chaos_mark start restart "n$i"
	chaos_log "restart n$i"
	node_stop "$i" || return 1
	sleep "$DOWN"
	node_start "$i" || return 1
	leader=$(chaos_wait_ready) || return 1
	chaos_mark end restart "n$i"
	chaos_log "n$i back; leader $leader"
}

rolling_restart() {
	local leader i
	leader=$(chaos_wait_ready) || return 1
	for ((i = 1; i <= NODES; i++)); do
		[[ n$i == "$leader" ]] && continue
		restart_node "$i" || return 1
		sleep "$CALM"
	done
	restart_node "${leader#n}"
}

chaos_main rolling_restart
