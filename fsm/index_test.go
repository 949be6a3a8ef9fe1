package fsm

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// Every kind of change moves a lock's index to its entry's, and reports the
// lock in Result.Changed; what readers cannot see (a renew that keeps the
// TTL, a refused acquire) does not.
func TestIndexFollowsEveryChange(t *testing.T) {
	l := newLog(t).at(0)
	check := func(what string, r Result, name string, want uint64, changed bool) {
		t.Helper()
		if got := l.m.Index(name); got != want {
			t.Errorf("%s: index %d, want %d", what, got, want)
		}
		if got := len(r.Changed) > 0 && r.Changed[len(r.Changed)-1] == name; got != changed {
			t.Errorf("%s: Changed %v, want %s changed=%v", what, r.Changed, name, changed)
		}
	}
	check("never held", Result{}, "a", 0, false)
	r := l.apply(acquire("a", "L1", 1000)) // 1
	check("grant", r, "a", 1, true)
	if lk, _ := l.m.Get("a"); lk.Index != 1 {
		t.Errorf("Get: Index %d, want 1", lk.Index)
	}
	r = l.apply(renew("a", "L1", 0)) // 2: same TTL
	check("renew keeping the TTL", r, "a", 1, false)
	r = l.apply(renew("a", "L1", 2000)) // 3
	check("renew changing the TTL", r, "a", 3, true)
	r = l.apply(acquire("a", "L2", 1000)) // 4: held
	check("refused acquire", r, "a", 3, false)
	r = l.apply(acquire("a", "L1", 1500)) // 5: retried acquire, new TTL
	check("retried acquire with a new TTL", r, "a", 5, true)
	r = l.apply(release("a", "L1")) // 6
	check("release", r, "a", 6, true)

	c := acquire("b", "L3", 1000)
	c.LockDelay = 500
	l.apply(c)                   // 7
	r = l.at(1000).apply(tick()) // 8: expires into its lock-delay
	check("expiry into lock-delay", r, "b", 8, true)
	r = l.at(1500).apply(tick()) // 9: end of lock-delay
	check("end of lock-delay", r, "b", 9, true)
	l.apply(acquire("c", "L4", 1000)) // 10
	r = l.at(2500).apply(tick())      // 11: expires, no lock-delay
	check("expiry", r, "c", 11, true)
	l.apply(acquire("d", "L5", 1000))                                             // 12
	r = l.apply(Command{Version: commandVersion3, Op: OpForceRelease, Name: "d"}) // 13
	check("force release", r, "d", 13, true)
	l.apply(acquire("a", "L6", 1000)) // 14: a tombstone becomes a lock again
	if got := l.m.Index("a"); got != 14 {
		t.Errorf("re-grant: index %d, want 14", got)
	}
	if got := l.m.PrefixIndex(""); got != 14 {
		t.Errorf("PrefixIndex(\"\") = %d, want 14", got)
	}
	if got := l.m.PrefixIndex("b"); got != 9 {
		t.Errorf("PrefixIndex(b) = %d, want 9", got)
	}
	if got := l.m.PrefixIndex("x"); got != 0 {
		t.Errorf("PrefixIndex(x) = %d, want 0", got)
	}
}

// Tombstones beyond the bound go oldest first (lowest index, then name);
// a pruned or never-held lock then answers the floor, so no lock's index
// ever goes down.
func TestTombstonesPruneOldestFirstBehindAFloor(t *testing.T) {
	l := newLog(t).at(0)
	l.m.maxTombs = 2
	for _, n := range []string{"a", "b", "c"} {
		l.apply(acquire(n, "L"+n, 1000))
	}
	l.apply(release("b", "Lb")) // 4
	l.apply(release("a", "La")) // 5
	if got := l.m.Index("never"); got != 0 {
		t.Fatalf("never held, no pruning yet: %d", got)
	}
	l.apply(release("c", "Lc")) // 6: prunes b (index 4)
	for name, want := range map[string]uint64{"a": 5, "b": 4, "c": 6, "never": 4} {
		if got := l.m.Index(name); got != want {
			t.Errorf("Index(%s) = %d, want %d", name, got, want)
		}
	}
	if got := l.m.PrefixIndex("b"); got != 4 {
		t.Errorf("PrefixIndex(b) = %d, want the floor 4", got)
	}
	// The floor survives a snapshot.
	restored := New()
	if err := restored.Restore(bytes.NewReader(snapshotBytes(t, l.m))); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c", "never"} {
		if restored.Index(n) != l.m.Index(n) {
			t.Errorf("after restore Index(%s) = %d, want %d", n, restored.Index(n), l.m.Index(n))
		}
	}
}

// A version 1 snapshot (written before indexes existed) is still read:
// its locks have index 0, no value, and there are no tombstones.
func TestVersion1SnapshotReadable(t *testing.T) {
	var b []byte
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendVarint(b, 5e9) // clock.Now
	b = binary.AppendUvarint(b, 3)  // term
	b = binary.AppendVarint(b, 7e9) // stamp
	b = binary.AppendUvarint(b, 42) // index
	b = binary.AppendUvarint(b, 1)  // one lock
	b = appendString(b, "a")
	b = appendString(b, "owner")
	b = appendString(b, "L1")
	b = binary.AppendUvarint(b, 40)  // token
	b = binary.AppendVarint(b, 1000) // ttl
	b = binary.AppendVarint(b, 0)    // lock-delay
	b = binary.AppendVarint(b, 6e9)  // deadline
	b = binary.AppendVarint(b, 6e9)  // until
	b = append(b, 0)                 // not delayed
	b = binary.AppendUvarint(b, 1)   // one node
	b = appendString(b, "n1")
	b = appendString(b, "addr")
	m := New()
	if err := m.Restore(bytes.NewReader(b)); err != nil {
		t.Fatalf("restore v1: %v", err)
	}
	want := Lock{Name: "a", Owner: "owner", LeaseID: "L1", Token: 40, TTL: 1000, Deadline: 6e9}
	if got, ok := m.Get("a"); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Get = %+v %v, want %+v", got, ok, want)
	}
	if m.Index("a") != 0 || m.Index("b") != 0 || m.Clock().Index != 42 {
		t.Fatalf("indexes %d %d, clock %+v", m.Index("a"), m.Index("b"), m.Clock())
	}
	if _, err := PrepareRestore(b, 100); err != nil {
		t.Fatalf("PrepareRestore on v1: %v", err)
	}
	// Written back, it is version 2.
	if s := snapshotBytes(t, m); s[len(snapshotMagic)] != snapshotVersion2 {
		t.Fatalf("rewritten as version %d", s[len(snapshotMagic)])
	}
}
