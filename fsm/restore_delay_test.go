package fsm

import (
	"bytes"
	"testing"
)

// A lock in its lock-delay when a backup was taken is restored in its
// lock-delay, with the time it had left: the restore restarts the clock from
// the backup's (docs/API.md, "Backup and restore").
func TestPrepareRestoreKeepsALockDelay(t *testing.T) {
	m := New()
	// Held for 1 s with a 5 s lock-delay (the clock starts at the term's
	// first stamp); settled as expired by the tick at 2 s, so delayed until 7 s.
	m.ApplyCommand(5, 3, Command{Op: OpAcquire, Stamp: 1e9, Name: "c", LeaseID: "lc", TTL: 1_000, LockDelay: 5_000})
	m.ApplyCommand(6, 3, Command{Op: OpTick, Stamp: 3e9})
	if r := m.ApplyCommand(7, 3, Command{Op: OpAcquire, Stamp: 3e9, Name: "c", LeaseID: "lx", TTL: 1_000}); r.Status == StatusOK {
		t.Fatal("the lock-delay did not hold before the backup")
	}
	var buf bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	out, err := PrepareRestore(buf.Bytes(), 50)
	if err != nil {
		t.Fatal(err)
	}
	r := New()
	if err := r.Restore(bytes.NewReader(out)); err != nil {
		t.Fatal(err)
	}
	// A new term's first entry starts the clock afresh at the backup's time
	// (2 s): 5 s of delay are left, whatever the new leader's stamps say.
	if got := r.ApplyCommand(51, 9, Command{Op: OpAcquire, Stamp: 500e9, Name: "c", LeaseID: "lx", TTL: 1_000}); got.Status == StatusOK {
		t.Fatal("the restore ended the lock-delay")
	}
	if got := r.ApplyCommand(52, 9, Command{Op: OpAcquire, Stamp: 504e9, Name: "c", LeaseID: "lx", TTL: 1_000}); got.Status == StatusOK {
		t.Fatal("the lock-delay ended 1 s early after the restore")
	}
	if got := r.ApplyCommand(53, 9, Command{Op: OpAcquire, Stamp: 505e9 + 1, Name: "c", LeaseID: "lx", TTL: 1_000}); got.Status != StatusOK || got.Lock.Token <= 50 {
		t.Fatalf("acquire once the restored lock-delay ended = %+v, want a grant above the restore's index", got)
	}
}
