#!/usr/bin/env bash
# chaos-pause-leader.sh: freeze the leader (SIGSTOP, or docker pause in containers) for
# longer than the election timeout, so the others elect a new one, then resume it and wait
# until the cluster is whole again; repeat. A workload of concurrent clients runs throughout
# and its summary (operations, time to a new leader, violations) ends the run.
#
#   scripts/chaos-pause-leader.sh [--target local|compose] [--rounds N] [--down SECONDS] ...
#   --down is the pause length (default 3 s: the election timeout is 1 s, randomised up to 2 s)
CHAOS_NAME=chaos-pause-leader
CHAOS_USAGE=$(sed -n '2,/^CHAOS_NAME/p' "$0" | sed '$d; s/^# \{0,1\}//')
# shellcheck source=scripts/lib/chaos.sh
source "$(dirname "$0")/lib/chaos.sh"
chaos_init "$@"

pause_leader() {
	local leader i
	leader=$(chaos_wait_ready) || return 1
	i=${leader#n}
	chaos_mark start pause "$leader"
	chaos_log "pause leader $leader for ${DOWN}s"
	node_pause "$i" || return 1
	sleep "$DOWN"
	node_resume "$i" || return 1
	leader=$(chaos_wait_ready) || return 1
	chaos_mark end pause "n$i"
	chaos_log "n$i resumed; leader $leader"
}

chaos_main pause_leader
