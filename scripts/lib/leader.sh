# shellcheck shell=bash
# leader.sh: waiting for a cluster's leader, shared by cluster.sh and compose.sh.
# The sourcing script defines url I (node nI's HTTP URL) and CURL (an array: curl
# and its flags).

# cluster_json I: node nI's /v1/cluster, or nothing.
cluster_json() { "${CURL[@]}" "$(url "$1")/v1/cluster" 2>/dev/null || true; }
ready() { "${CURL[@]}" -o /dev/null "$(url "$1")/readyz" 2>/dev/null; }

# agreed_leader N: prints the leader id when every node is ready and names the same leader.
agreed_leader() {
	local n=$1 i leader="" l
	for ((i = 1; i <= n; i++)); do
		ready "$i" || return 1
		# Belt and braces: a node must also report everything committed as applied.
		l=$(cluster_json "$i" | jq -r 'select(.commit_index > 0 and .applied_index >= .commit_index) | .leader // empty' 2>/dev/null)
		[[ -n $l ]] || return 1
		[[ -z $leader || $leader == "$l" ]] || return 1
		leader=$l
	done
	echo "$leader"
}

# print_agreement OK LEADER...: for status reports: prints the leader and succeeds when
# every node answered (OK is 0) and all name the same leader.
print_agreement() {
	local ok=$1
	shift
	if ((ok == 0)) && [[ -n ${1:-} ]] && [[ $(printf '%s\n' "$@" | sort -u | wc -l) == 1 ]]; then
		echo "leader: $1"
		return 0
	fi
	echo "leader: none agreed on"
	return 1
}
