package raftnode_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

func backupOf(t *testing.T, n *testenv.Node) []byte {
	t.Helper()
	var f bytes.Buffer
	if _, err := n.Backup(testenv.Context(t, 10*time.Second), &f); err != nil {
		t.Fatalf("backup of %s: %v", n.ID, err)
	}
	return f.Bytes()
}

func httpAddrs(t *testing.T, n *testenv.Node) map[string]string {
	t.Helper()
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range st.Nodes {
		out[m.ID] = m.HTTPAddr
	}
	return out
}

// twoClusters starts a 3-node cluster a, every member's address known, and a
// 1-node cluster b, each holding a lock, and returns b's backup.
func twoClusters(t *testing.T) (a *testenv.Cluster, other []byte) {
	a = testenv.Start(t, 3)
	b := testenv.Start(t, 1)
	leader := a.Leader()
	testenv.WaitFor(t, 10*time.Second, "every member's address is known", func() bool {
		for _, addr := range httpAddrs(t, leader) {
			if addr == "" {
				return false
			}
		}
		return true
	})
	if status, body := acquire(t, leader, "a/kept", "w", leaseA, 600000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	if status, body := acquire(t, b.Leader(), "b/lock", "w", leaseB, 600000); status != 200 {
		t.Fatalf("acquire on b: %d %v", status, body)
	}
	return a, backupOf(t, b.Leader())
}

// Another cluster's backup is refused unless the operator says so, and so
// is a backup taken before clusters had ids. Every replica holds the same
// id, written once by the first leader.
func TestRestoreRefusesAnotherClustersBackup(t *testing.T) {
	a, other := twoClusters(t)
	leader := a.Leader()
	testenv.WaitFor(t, 10*time.Second, "every node has the cluster id", func() bool {
		id := leader.ClusterID()
		for _, n := range a.Nodes {
			if n.ClusterID() == "" || n.ClusterID() != id {
				return false
			}
		}
		return true
	})
	if st, err := leader.Status(); err != nil || st.ClusterID != leader.ClusterID() {
		t.Fatalf("status shows cluster id %q (%v), want %s", st.ClusterID, err, leader.ClusterID())
	}
	info, _, err := raftnode.ParseBackup(other)
	if err != nil || info.ClusterID == "" || info.ClusterID == leader.ClusterID() {
		t.Fatalf("b's backup: %+v %v, want a cluster id other than a's %s", info, err, leader.ClusterID())
	}
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(other), raftnode.RestoreOptions{}); !errors.Is(err, raftnode.ErrOtherCluster) || !errors.Is(err, raftnode.ErrBadBackup) {
		t.Fatalf("restore of b's backup: %v, want ErrOtherCluster", err)
	}
	noID := rawState{index: 69, locks: okState(10).locks}.file(t)
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(noID), raftnode.RestoreOptions{}); !errors.Is(err, raftnode.ErrOtherCluster) {
		t.Fatalf("restore of a backup without a cluster id: %v, want ErrOtherCluster", err)
	}
	if _, ok := leader.Machine().Get("a/kept"); !ok {
		t.Fatal("a refused restore changed the state")
	}
	if _, ok := leader.Machine().Get("b/lock"); ok {
		t.Fatal("a refused restore installed the other cluster's lock")
	}
}

// Told to, a restore takes another cluster's locks but keeps this cluster's
// id and member table (the backup's names other nodes, or none with an
// address): followers still forward to the leader.
func TestRestoreOfAnotherClustersBackupKeepsMembers(t *testing.T) {
	a, other := twoClusters(t)
	leader := a.Leader()
	addrs := httpAddrs(t, leader)
	id := leader.ClusterID()
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(other), raftnode.RestoreOptions{AllowOtherCluster: true}); err != nil {
		t.Fatalf("restore of b's backup, allowed: %v", err)
	}
	for _, n := range a.Nodes {
		testenv.WaitFor(t, 10*time.Second, n.ID+" takes the restore", func() bool {
			_, ok := n.Machine().Get("b/lock")
			return ok
		})
		if got := n.ClusterID(); got != id {
			t.Errorf("%s: cluster id %q after the restore, want this cluster's %s", n.ID, got, id)
		}
		for mid, addr := range httpAddrs(t, n) {
			if addr != addrs[mid] {
				t.Errorf("%s: member %s's http address %q after the restore, want %q", n.ID, mid, addr, addrs[mid])
			}
		}
	}
	f := a.Followers()[0]
	if status, body := acquire(t, f, "a/after", "w", "lease-after-0123456789", 600000); status != 200 {
		t.Fatalf("acquire through follower %s after the restore: %d %v", f.ID, status, body)
	}
	// The restored state's own backups are this cluster's.
	if _, err := a.Leader().RestoreBackupWith(ctx, bytes.NewReader(backupOf(t, a.Leader())), raftnode.RestoreOptions{}); err != nil {
		t.Fatalf("restore of this cluster's own backup: %v", err)
	}
}

// A backup whose records the API would refuse changes nothing, even with
// allow_other_cluster; a token in it above its index (the finding: 10^12
// at index 69, after which a new grant got 84) is refused, and after a
// valid restore every new grant's token exceeds every restored one.
func TestRestoreRefusesCraftedStateAndNoTokenGoesDown(t *testing.T) {
	c := testenv.Start(t, 1)
	leader := c.Leader()
	if status, body := acquire(t, leader, "keep", "w", leaseA, 600000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	ctx := testenv.Context(t, 30*time.Second)
	allow := raftnode.RestoreOptions{AllowOtherCluster: true}
	for name, tc := range untrustedCases(t) {
		if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(tc.file), allow); !errors.Is(err, raftnode.ErrBadBackup) {
			t.Errorf("%s: restore = %v, want ErrBadBackup", name, err)
		}
	}
	if _, ok := leader.Machine().Get("keep"); !ok {
		t.Fatal("a refused restore changed the state")
	}
	if _, ok := leader.Machine().Get("tok/x"); ok {
		t.Fatal("a refused restore installed its lock")
	}

	// A valid file at a high index: tokens up to it come back, and the
	// next grant is above them all.
	high := okState(900_000)
	high.index = 1_000_000
	if _, err := leader.RestoreBackupWith(ctx, bytes.NewReader(high.file(t)), allow); err != nil {
		t.Fatalf("restore: %v", err)
	}
	l, ok := leader.Machine().Get("tok/x")
	if !ok || l.Token != 900_000 {
		t.Fatalf("restored lock: %+v %v", l, ok)
	}
	r, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "tok/x", LeaseID: l.LeaseID})
	if err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("release: %+v %v", r, err)
	}
	status, body := acquire(t, leader, "tok/x", "w2", leaseB, 600000)
	if status != 200 || token(t, body) <= 1_000_000 {
		t.Fatalf("re-acquire after the restore: %d %v, want a token above the restored index 1000000", status, body)
	}
}
