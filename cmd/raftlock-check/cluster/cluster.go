// Package cluster runs a cluster of real "raftlock serve" processes on
// loopback ports, and kills, pauses, resumes and restarts them. It is the
// shared internal/testenv/procs under the names the checker's files use.
package cluster

import "github.com/raftlock/raftlock/internal/testenv/procs"

type (
	// Node is one raftlock process (across restarts).
	Node = procs.Node
	// Cluster is the set of nodes.
	Cluster = procs.Cluster
	// Options say how to run the nodes.
	Options = procs.Options
	// Info is GET /v1/cluster.
	Info = procs.Info
)

// Start launches the nodes and waits until the cluster has a leader.
func Start(o Options) (*Cluster, error) { return procs.Start(o) }
