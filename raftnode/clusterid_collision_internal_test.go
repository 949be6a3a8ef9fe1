package raftnode

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/fsm"
)

// The cluster id lives in the replicated node table under fsm.ClusterIDKey,
// on the premise that no node id can be that key (ids are
// [A-Za-z0-9._-]). That rule is checked on join only: a bootstrapping node
// (serve --id with --peers, raftnode.New) takes any id. A node whose id is
// the key publishes its HTTP address over the cluster id, the first leader
// then finds an id and writes none, and every backup of the cluster is
// refused by its own leader ("cluster id ... is not 32 hex digits"). Either
// the id must be refused before anything starts, or the cluster must still
// get a real id and backups.
func TestNodeIDEqualToClusterIDKeyIsRefusedOrHarmless(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := Config{
		ID: fsm.ClusterIDKey, DataDir: t.TempDir(), RaftListener: ln, RaftAddr: ln.Addr().String(),
		AdvertiseHTTP:    "127.0.0.1:1", // published by the leader loop; nothing needs to answer there
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond,
		Logger: hclog.NewNullLogger(),
	}
	cfg.Peers = map[string]string{cfg.ID: cfg.RaftAddr}
	n, err := New(cfg)
	if err != nil {
		return // refused before anything started: sound
	}
	t.Cleanup(func() { n.Close() })
	deadline := time.Now().Add(10 * time.Second)
	// The leader loop publishes its address, then writes the cluster id if
	// it finds none; wait until one of the two is in the table.
	for n.readyTerm.Load() == 0 || n.readyTerm.Load() != n.raft.CurrentTerm() || n.ClusterID() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the single node never led and wrote its address or a cluster id")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if id := n.ClusterID(); !validClusterID(id) {
		t.Errorf("cluster id is %q, not 32 hex digits: node %q's address went into the table under the cluster id's key", id, cfg.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var f bytes.Buffer
	if _, err := n.Backup(ctx, &f); err != nil {
		t.Errorf("the cluster's own backup is refused: %v", err)
	}
}
