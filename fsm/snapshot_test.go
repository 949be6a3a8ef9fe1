package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func snapshotBytes(t testing.TB, m *Machine) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(Command{Op: OpSetNode, NodeID: "n1", NodeAddr: "127.0.0.1:8001"})
	for i, n := range []string{"a", "b", "c", "d"} {
		c := acquire(n, "L"+n, int64(1000*(i+1)))
		c.LockDelay = 300
		l.apply(c)
	}
	l.apply(release("b", "Lb"))
	l.at(1000).apply(tick()) // "a" expires into its lock-delay

	before := snapshotBytes(t, l.m)
	restored := New()
	if err := restored.Restore(bytes.NewReader(before)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if after := snapshotBytes(t, restored); !bytes.Equal(before, after) {
		t.Fatal("snapshot of restored state differs from the original")
	}
	if !reflect.DeepEqual(restored.Clock(), l.m.Clock()) || restored.HeldCount() != l.m.HeldCount() {
		t.Fatalf("clock/held differ: %+v %d vs %+v %d", restored.Clock(), restored.HeldCount(), l.m.Clock(), l.m.HeldCount())
	}
	want, _ := l.m.List("", 0)
	got, _ := restored.List("", 0)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(restored.Nodes(), l.m.Nodes()) {
		t.Fatalf("state differs:\n%+v\n%+v", got, want)
	}

	// The restored machine keeps its timers: both go on to the same state.
	l.m = restored
	r := l.at(1300).apply(tick())
	if !reflect.DeepEqual(r.Freed, []string{"a"}) {
		t.Fatalf("after restore, end of lock-delay freed %v", r.Freed)
	}
}

func TestRestoreRejectsGarbage(t *testing.T) {
	good := snapshotBytes(t, newLog(t).m)
	for name, data := range map[string][]byte{
		"empty":          nil,
		"wrong magic":    []byte("NOT-A-SNAPSHOT-AT-ALL"),
		"truncated":      good[:len(good)-1],
		"future version": append([]byte(snapshotMagic), 9),
	} {
		m := New()
		m.ApplyCommand(1, 1, acquire("keep", "L", 1000))
		if err := m.Restore(bytes.NewReader(data)); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: err %v, want ErrBadSnapshot", name, err)
		}
		if _, ok := m.Get("keep"); !ok {
			t.Errorf("%s: a failed restore changed the state", name)
		}
	}
}

// A backup restored through Raft must not have the time since it was taken
// subtracted from its leases (the clock's term becomes 0), and no lock's
// index may go down for a watcher (every index becomes at least the
// restore's); nothing else changes.
func TestPrepareRestoreForgetsTheTermAndRaisesIndexes(t *testing.T) {
	m := New()
	m.ApplyCommand(5, 3, Command{Op: OpAcquire, Stamp: 1e9, Name: "a", LeaseID: "la", TTL: 10_000})
	m.ApplyCommand(6, 3, Command{Op: OpAcquire, Stamp: 1e9, Name: "b", LeaseID: "lb", TTL: 10_000})
	m.ApplyCommand(7, 3, Command{Op: OpRelease, Stamp: 2e9, Name: "b", LeaseID: "lb"})
	m.ApplyCommand(8, 3, Command{Op: OpTick, Stamp: 4e9})
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
	want := m.Clock()
	want.Term = 0
	if got := r.Clock(); got != want {
		t.Fatalf("clock after PrepareRestore = %+v, want %+v", got, want)
	}
	l, held, idx := r.Lookup("a")
	if !held || l.Token != 5 || l.LeaseID != "la" || idx != 50 {
		t.Fatalf("lock a = %+v held=%v index %d; want held with token 5 at index 50", l, held, idx)
	}
	if _, held, idx := r.Lookup("b"); held || idx != 50 {
		t.Fatalf("lock b held=%v index %d; want free at index 50", held, idx)
	}
	if idx := r.Index("never-held"); idx != 50 {
		t.Fatalf("a lock never held reads index %d after the restore, want the floor 50", idx)
	}
	for _, bad := range [][]byte{nil, []byte("RAFTLOCK-SNAP"), []byte("NOT-A-SNAPSHOT")} {
		if _, err := PrepareRestore(bad, 50); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("PrepareRestore(%q) = %v, want ErrBadSnapshot", bad, err)
		}
	}
}

// Replicas compare hashes of the outcome state: two states that differ only
// in watch bookkeeping (a lock's last-change index, tombstones of freed
// locks, as after one replica restored a snapshot written before indexes
// existed) must write the same outcome bytes, and a real difference (a
// value) must not.
func TestOutcomeStateIgnoresWatchBookkeeping(t *testing.T) {
	outcome := func(m *Machine) []byte {
		var b bytes.Buffer
		if _, err := m.Snapshot().WriteOutcomeStateTo(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	build := func(freedIndex uint64, value string) *Machine {
		m := New()
		m.ApplyCommand(5, 3, Command{Op: OpAcquire, Stamp: 1e9, Name: "a", LeaseID: "la", TTL: 10_000})
		// A lock taken and freed: a tombstone at freedIndex.
		m.ApplyCommand(freedIndex-1, 3, Command{Op: OpAcquire, Stamp: 2e9, Name: "b", LeaseID: "lb", TTL: 10_000})
		m.ApplyCommand(freedIndex, 3, Command{Op: OpRelease, Stamp: 2e9, Name: "b", LeaseID: "lb"})
		m.ApplyCommand(20, 3, Command{Version: MaxCommandVersion, Op: OpUpdate, StampTerm: 3, Stamp: 3e9, Name: "a", LeaseID: "la", Value: value})
		return m
	}
	x, y := build(8, "v"), build(12, "v")
	var fullX, fullY bytes.Buffer
	x.Snapshot().WriteTo(&fullX)
	y.Snapshot().WriteTo(&fullY)
	if bytes.Equal(fullX.Bytes(), fullY.Bytes()) {
		t.Fatal("the two states should differ in their tombstones")
	}
	if !bytes.Equal(outcome(x), outcome(y)) {
		t.Fatal("states that differ only in watch bookkeeping hash differently")
	}
	if bytes.Equal(outcome(build(8, "v")), outcome(build(8, "w"))) {
		t.Fatal("states with different values hash alike")
	}
}
