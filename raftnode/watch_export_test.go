package raftnode

// ParkedWatches is how many blocking reads are parked on n, so tests change
// a lock only once their reads wait.
func ParkedWatches(n *Node) int { return int(n.watches.count.Load()) }
