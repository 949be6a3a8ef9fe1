package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
)

// inspect counts locks and semaphore permits apart: a backup holding two
// locks (one shared by two readers), three permits of one semaphore and a
// session says so, instead of "6 locks". Built offline, no cluster.
func TestSnapshotInspectCountsApart(t *testing.T) {
	m := fsm.New()
	var i uint64
	apply := func(c fsm.Command) {
		i++
		c.Stamp = int64(i)
		if r := m.ApplyCommand(i, 1, c); r.Status != fsm.StatusOK {
			t.Fatalf("entry %d: %+v", i, r)
		}
	}
	apply(fsm.Command{Op: fsm.OpSessionCreate, SessionID: "sess-A_0123456789", Owner: "s", TTL: 60000})
	apply(fsm.Command{Op: fsm.OpAcquire, Name: "x", Owner: "o", LeaseID: "lease-X_0123456789", TTL: 60000})
	for _, id := range []string{"lease-R1_0123456789", "lease-R2_0123456789"} {
		apply(fsm.Command{Op: fsm.OpAcquire, Name: "r", Owner: "r", LeaseID: id, TTL: 60000, Mode: fsm.ModeShared})
	}
	for _, id := range []string{"lease-P1_0123456789", "lease-P2_0123456789", "lease-P3_0123456789"} {
		apply(fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 5, Owner: "p", LeaseID: id, TTL: 60000})
	}
	var snap, file bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if _, err := raftnode.WriteBackup(&file, i, 1, snap.Bytes()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "b.snap")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, nil, "snapshot", "inspect", path)
	want := "2 locks held (3 holds, shared holders each counted), 3 permits of 1 semaphore, 1 session"
	if r.code != exitOK || !strings.Contains(r.stdout, want) {
		t.Errorf("inspect: exit %d %q, want it to say %q", r.code, r.stdout, want)
	}
	r = runCLI(t, nil, "snapshot", "inspect", "--json", path)
	var info struct {
		Locks, HeldLocks, LockHolds, Permits, Semaphores, Sessions int
	}
	decode(t, r.stdout, &struct {
		Locks      *int `json:"locks"`
		HeldLocks  *int `json:"held_locks"`
		LockHolds  *int `json:"lock_holds"`
		Permits    *int `json:"permits"`
		Semaphores *int `json:"semaphores"`
		Sessions   *int `json:"sessions"`
	}{&info.Locks, &info.HeldLocks, &info.LockHolds, &info.Permits, &info.Semaphores, &info.Sessions})
	if info.Locks != 6 || info.HeldLocks != 2 || info.LockHolds != 3 || info.Permits != 3 || info.Semaphores != 1 || info.Sessions != 1 {
		t.Errorf("inspect --json: %+v; want locks 6 (every lease, as before), held_locks 2, lock_holds 3, permits 3, semaphores 1, sessions 1", info)
	}
}
