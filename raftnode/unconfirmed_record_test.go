package raftnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// A node whose unconfirmed-restore record cannot be read (damaged file)
// refuses everything "until the leader settles this node's state": only a
// leader's snapshot clears the sentinel record. But once that node leads, no
// snapshot ever comes to it, and restoreUnconfirmed's leader path (applied
// past R) can never pass R = MaxInt64. Nothing moves leadership away either
// (watchIntegrity transfers only on Diverged). So the cluster keeps a leader
// that is never ready and answers no read, stale or linearizable, forever.
//
// Expected: the cluster serves reads again (the leader settles its own record
// once its no-op of the term commits, or hands leadership away).
// Before the fix: the leader stays leader, Ready false, Read -> ErrDiverged.
func TestUnreadableRecordLeaderSettlesItsOwnRecord(t *testing.T) {
	tr := startTrio(t, Config{})
	leader := tr.leader()
	ctx := context.Background()
	if _, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "A", LeaseID: "lease-0123456789abcdef", TTL: 600_000}); err != nil {
		t.Fatal(err)
	}
	var fid string
	for id, n := range tr.nodes {
		if n != leader {
			fid = id
			break
		}
	}
	tr.nodes[fid].Close()
	// A damaged record (e.g. a partial write by an older version, or bit rot).
	if err := os.WriteFile(filepath.Join(tr.cfgs[fid].DataDir, unconfirmedRestoreFile), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tr.cfgs[fid]
	tr.start(fid, cfg)
	f := tr.nodes[fid]
	waitUntil(t, "restarted node catches up", func() bool { return f.raft.AppliedIndex() >= leader.raft.AppliedIndex() })
	// Leadership moves to it (an operator's transfer, or any election it wins).
	deadline := time.Now().Add(15 * time.Second)
	for !f.IsLeader() {
		cur := tr.leader()
		if cur != f {
			cur.raft.LeadershipTransferToServer(raft.ServerID(fid), raft.ServerAddress(cfg.RaftAddr)).Error()
		}
		if time.Now().After(deadline) {
			t.Skip("could not move leadership to the node under test")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := f.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "B", LeaseID: "lease-0123456789abcdef", TTL: 600_000}); err != nil {
		t.Fatalf("write through the new leader: %v", err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		var leaderNow *Node
		for _, n := range tr.nodes {
			if n.IsLeader() {
				leaderNow = n
			}
		}
		if leaderNow != nil && leaderNow.Ready() {
			if _, err := leaderNow.Read(ctx, false); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			var r, tm uint64
			r, tm = f.unconfirmedPair()
			t.Fatalf("no leader serves for 10s: %s leader=%v ready=%v record=(%d,%d) applied=%d", fid, f.IsLeader(), f.Ready(), r, tm, f.raft.AppliedIndex())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
