package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
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

// Restore refuses a snapshot whose records decode but do not fit together,
// here a lock holder marked as a semaphore permit (Limit 1). Before, every
// replica installed it (raftnode.DecodeBackup behind POST /v1/snapshot checks
// only that the state decodes), and the first entry past the lease's
// deadline panicked on all of them (the expiry ended a permit of a
// semaphore that does not exist): the whole cluster stopped at one index.
func TestRestoreRefusesLockHolderMarkedAsPermit(t *testing.T) {
	src := newLog(t).at(0)
	src.apply(acquire("x", "L", 1_000))
	// Any session makes the snapshot format 3, which carries Limit.
	src.apply(Command{Version: commandVersion5, Op: OpSessionCreate, SessionID: "S", Owner: "w", TTL: 60_000})
	src.m.locks["x"].holders[0].lock.Limit = 1 // as a damaged or hand-made file may say
	snap := snapshotBytes(t, src.m)

	m := New()
	err := m.Restore(bytes.NewReader(snap))
	if err != nil {
		if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), `lock "x": holder with token 1 is marked as a semaphore permit`) {
			t.Fatalf("refused with %v: want ErrBadSnapshot naming the lock and its holder", err)
		}
		return
	}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Restore accepted the snapshot; the expiry then panicked: %v", p)
		}
	}()
	c := Command{Version: commandVersion2, Op: OpTick, Stamp: 0, StampTerm: 1}
	m.Apply(2, 1, c.Encode(nil))
	c.Stamp = 2_000 * ms
	r, err := m.Apply(3, 1, c.Encode(nil))
	t.Logf("tick past the deadline: %+v, %v", r, err)
	t.Fatal("Restore accepted a lock holder marked as a permit")
}

// Every other inconsistency Restore refuses, each from a state that
// restores fine before it is damaged, with an error naming what is wrong;
// the machine restored into keeps its state.
func TestRestoreRefusesInconsistentRecords(t *testing.T) {
	base := func(t *testing.T) *Machine {
		l := newLog(t).at(0)
		for _, c := range []Command{
			acquire("x", "L", 60_000),
			v5(Command{Op: OpSessionCreate, SessionID: "S", Owner: "w", TTL: 60_000}),
			sessionAcquire("s", "LS", "S"),
			v5(Command{Op: OpAcquire, Name: "r", Owner: "a", LeaseID: "R1", TTL: 60_000, Mode: ModeShared}),
			v5(Command{Op: OpAcquire, Name: "r", Owner: "b", LeaseID: "R2", TTL: 60_000, Mode: ModeShared}),
			v5(Command{Op: OpSemAcquire, Name: "p", Owner: "a", LeaseID: "P1", TTL: 60_000, Limit: 3}),
			v5(Command{Op: OpSemAcquire, Name: "p", Owner: "b", LeaseID: "P2", TTL: 60_000, Limit: 3}),
		} {
			if r := l.apply(c); r.Status != StatusOK {
				t.Fatalf("%v %s: %v", c.Op, c.Name, r.Status)
			}
		}
		return l.m
	}
	cases := []struct {
		name   string
		damage func(m *Machine)
		want   string
	}{
		{"exclusive lock with two holders", func(m *Machine) {
			for _, h := range m.locks["r"].holders {
				h.lock.Mode = ModeExclusive
			}
		}, `lock "r": exclusive lock with 2 holders`},
		{"exclusive and shared holders", func(m *Machine) { m.locks["r"].holders[1].lock.Mode = ModeExclusive },
			`lock "r": exclusive and shared holders together`},
		{"two holders with one lease id", func(m *Machine) { m.locks["r"].holders[1].lock.LeaseID = "R1" },
			`lock "r": two holders with one lease id`},
		{"two holders with one token", func(m *Machine) { m.locks["r"].holders[1].lock.Token = m.locks["r"].holders[0].lock.Token },
			`lock "r": holders not in strictly increasing token order`},
		{"two permits with one lease id", func(m *Machine) { m.sems["p"].holders[1].lock.LeaseID = "P1" },
			`semaphore "p": two permits with one lease id`},
		{"two permits in one slot", func(m *Machine) { m.sems["p"].holders[1].lock.Slot = 0 },
			`semaphore "p": permits not in strictly increasing slot order`},
		{"a slot at the limit", func(m *Machine) { m.sems["p"].holders[1].lock.Slot = 3 },
			`semaphore "p": permit with token 7 in slot 3, not below the limit 3`},
		{"a permit without a limit", func(m *Machine) { m.sems["p"].holders[0].lock.Limit = 0 },
			`semaphore "p": permit with token 6 has limit 0`},
		{"a permit of another limit", func(m *Machine) { m.sems["p"].holders[0].lock.Limit = 2 },
			`semaphore "p": permit with token 6 has limit 2, the semaphore 3`},
		{"more permits than the limit", func(m *Machine) {
			m.sems["p"].limit = 1
			for _, h := range m.sems["p"].holders {
				h.lock.Limit = 1
			}
		}, `semaphore "p": 2 holders, more than its limit 1`},
		{"a limit above the maximum", func(m *Machine) { m.sems["p"].limit = MaxSemaphoreLimit + 1 },
			`semaphore "p": limit 1025 outside 1..1024`},
		{"a lease of a missing session", func(m *Machine) { m.locks["x"].holders[0].lock.SessionID = "gone" },
			`lease of "x" in unknown session`},
		{"a session over MaxLeasesPerSession", func(m *Machine) {
			s := m.sessions["S"]
			for i := 0; len(s.leases) <= MaxLeasesPerSession; i++ {
				name := fmt.Sprintf("many/%d", i)
				g := &lease{lock: Lock{Name: name, Owner: "w", LeaseID: "M" + name, Token: uint64(100 + i), SessionID: "S"}, t: timer{slot: -1}}
				m.locks[name] = &entry{name: name, holders: []*lease{g}, delay: timer{slot: -1}}
				s.leases[g] = struct{}{}
			}
		}, fmt.Sprintf(`session "S" holds %d leases, more than %d`, MaxLeasesPerSession+1, MaxLeasesPerSession)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := base(t)
			if err := New().Restore(bytes.NewReader(snapshotBytes(t, src))); err != nil {
				t.Fatalf("the undamaged state: %v", err)
			}
			tc.damage(src)
			into := base(t)
			into.locks["x"].holders[0].lock.Owner = "kept"
			before := snapshotBytes(t, into)
			err := into.Restore(bytes.NewReader(snapshotBytes(t, src)))
			if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: %v; want ErrBadSnapshot with %q", err, tc.want)
			}
			if !bytes.Equal(snapshotBytes(t, into), before) {
				t.Fatal("a refused Restore changed the machine")
			}
		})
	}
}
