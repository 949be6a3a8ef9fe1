package raftnode

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/fsm"
)

// A cluster's id is 128 random bits, made once by the first leader that
// finds none in the state and written through the log (an OpSetNode under
// fsm.ClusterIDKey), so every replica holds the same id, and every snapshot
// and backup carries it. It is written after the leader's Barrier: an id an
// earlier leader wrote and committed is then applied here and seen; one it
// wrote that this leader's log lacks never commits. So a cluster keeps one
// id for good. A restore keeps the running cluster's id (and node table),
// whatever the backup holds, and refuses another cluster's backup unless
// told otherwise (RestoreOptions.AllowOtherCluster).

// clusterIDLen is the length of a cluster id: 32 hex digits.
const clusterIDLen = 32

func newClusterID() string {
	var b [clusterIDLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b[:])
}

func validClusterID(id string) bool {
	if len(id) != clusterIDLen {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// ClusterID is the id of the cluster this node belongs to, as its applied
// state holds it; "" until the cluster's first leader has written one.
func (n *Node) ClusterID() string { return n.machine.ClusterID() }

// ensureClusterID runs on a leader once its Barrier is done: a cluster with
// no id yet (a new cluster, or one upgraded from a build without ids) gets
// one. Every build applies OpSetNode, so a mixed-version cluster may too.
func (n *Node) ensureClusterID(log hclog.Logger) {
	if n.machine.ClusterID() != "" {
		return
	}
	id := newClusterID()
	if _, err := n.applyOwn(fsm.Command{Op: fsm.OpSetNode, NodeID: fsm.ClusterIDKey, NodeAddr: id}); err != nil {
		log.Warn("writing the cluster id failed; the next leader tries again", "error", err)
		return
	}
	log.Info("cluster id written", "cluster_id", n.machine.ClusterID())
}
