package raftnode

import "github.com/hashicorp/raft"

// LogEntry reads entry index from n's log, for tests of what the leader
// writes (the external tests cannot reach the log store).
func LogEntry(n *Node, index uint64) (raft.Log, error) {
	var l raft.Log
	err := n.logs.GetLog(index, &l)
	return l, err
}
