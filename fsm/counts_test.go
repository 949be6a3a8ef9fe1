package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// countsState applies, from index 1: an exclusive lock, a lock shared by
// two, three permits of one semaphore (one in a session) and a session; it
// returns the machine and the last index.
func countsState(t *testing.T) (*fsm.Machine, uint64) {
	t.Helper()
	m := fsm.New()
	var i uint64
	apply := func(c fsm.Command) {
		i++
		c.Stamp = int64(i)
		if r := m.ApplyCommand(i, 1, c); r.Status != fsm.StatusOK {
			t.Fatalf("entry %d %+v: %+v", i, c, r)
		}
	}
	apply(fsm.Command{Op: fsm.OpSessionCreate, SessionID: "sess-A_0123456789", Owner: "s", TTL: 60000})
	apply(fsm.Command{Op: fsm.OpAcquire, Name: "x", Owner: "o", LeaseID: "lease-X_0123456789", TTL: 60000})
	apply(fsm.Command{Op: fsm.OpAcquire, Name: "r", Owner: "r1", LeaseID: "lease-R1_0123456789", TTL: 60000, Mode: fsm.ModeShared})
	apply(fsm.Command{Op: fsm.OpAcquire, Name: "r", Owner: "r2", LeaseID: "lease-R2_0123456789", TTL: 60000, Mode: fsm.ModeShared})
	apply(fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 5, Owner: "p", LeaseID: "lease-P1_0123456789", TTL: 60000})
	apply(fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 5, Owner: "p", LeaseID: "lease-P2_0123456789", TTL: 60000})
	apply(fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 5, Owner: "p", LeaseID: "lease-P3_0123456789", SessionID: "sess-A_0123456789"})
	return m, i
}

// Counts tells lock holds and semaphore permits apart, which HeldCount adds
// together.
func TestCounts(t *testing.T) {
	m, _ := countsState(t)
	want := fsm.Counts{Locks: 2, LockHolds: 3, Semaphores: 1, Permits: 3, Sessions: 1}
	if got := m.Counts(); got != want {
		t.Errorf("Counts() = %+v, want %+v", got, want)
	}
	if got := m.HeldCount(); got != 6 {
		t.Errorf("HeldCount() = %d, want 6 (3 lock holds + 3 permits)", got)
	}
	if got := fsm.New().Counts(); got != (fsm.Counts{}) {
		t.Errorf("empty machine: %+v", got)
	}
}
