package fsm

import "testing"

func semAcquire(name, lease string, limit, ttlMs int64) Command {
	return v5(Command{Op: OpSemAcquire, Name: name, Owner: "owner-" + lease, LeaseID: lease, Limit: limit, TTL: ttlMs})
}

// Limit 3: slots 0, 1, 2; a fourth is full (with every holder); a freed
// slot is granted again with a larger token; another limit is
// limit_mismatch while anyone holds; a retry keeps slot and token.
func TestSemaphoreSlotsAndLimit(t *testing.T) {
	l := newLog(t)
	l.at(0)
	tokens := map[int]uint64{}
	for i, lease := range []string{"L0", "L1", "L2"} {
		r := l.apply(semAcquire("s", lease, 3, 1000))
		if r.Status != StatusOK || r.Lock.Slot != i || r.Lock.Limit != 3 || r.Lock.Token != l.index {
			t.Fatalf("acquire %d: %+v", i, r)
		}
		tokens[i] = r.Lock.Token
	}
	r := l.apply(semAcquire("s", "L3", 3, 1000))
	if r.Status != StatusFull || len(r.Holders) != 3 || r.Holders[0].Token > r.Holders[2].Token {
		t.Fatalf("fourth: %+v", r)
	}
	if r := l.apply(semAcquire("s", "L3", 5, 1000)); r.Status != StatusLimitMismatch || r.Limit != 3 {
		t.Fatalf("other limit: %+v", r)
	}
	if r := l.apply(semAcquire("s", "L1", 3, 1000)); r.Status != StatusOK || r.Lock.Slot != 1 || r.Lock.Token != tokens[1] {
		t.Fatalf("retry by a holder: %+v", r)
	}
	if r := l.apply(v5(Command{Op: OpSemRelease, Name: "s", LeaseID: "L1"})); r.Status != StatusOK || len(r.FreedSemaphores) != 1 {
		t.Fatalf("release: %+v", r)
	}
	r = l.apply(semAcquire("s", "L3", 3, 1000))
	if r.Status != StatusOK || r.Lock.Slot != 1 || r.Lock.Token <= tokens[1] {
		t.Fatalf("the freed slot: %+v (old token %d)", r, tokens[1])
	}
	// Semaphores and locks are separate names.
	if r := l.apply(acquire("s", "Llock", 1000)); r.Status != StatusOK {
		t.Fatalf("lock s beside semaphore s: %v", r.Status)
	}
	// A holder that vanishes frees its permit at its TTL.
	if r := l.apply(v5(Command{Op: OpSemRenew, Name: "s", LeaseID: "L0", TTL: 5000})); r.Status != StatusOK {
		t.Fatalf("renew: %v", r.Status)
	}
	r = l.at(1000).apply(tick())
	if r.Expired != 3 || len(r.FreedSemaphores) != 2 { // L2, L3 and the lock
		t.Fatalf("at 1 s: %+v", r)
	}
	if s, ok := l.m.Semaphore("s"); !ok || len(s.Holders) != 1 || s.Holders[0].Slot != 0 {
		t.Fatalf("left: %+v", s)
	}
	l.at(5000).apply(tick())
	if _, ok := l.m.Semaphore("s"); ok {
		t.Fatal("a semaphore nobody holds is still there")
	}
	// Nobody holds: a new limit is fine.
	if r := l.apply(semAcquire("s", "L9", 1, 1000)); r.Status != StatusOK || r.Lock.Limit != 1 {
		t.Fatalf("new limit: %+v", r)
	}
	for _, c := range []Command{
		semAcquire("s", "L9", 0, 1000),
		semAcquire("s", "L9", MaxSemaphoreLimit+1, 1000),
		func() Command { c := semAcquire("s", "Lz", 1, 1000); c.LockDelay = 10; return c }(),
	} {
		if r := l.apply(c); r.Status != StatusInvalid {
			t.Errorf("%+v: %v, want invalid", c, r.Status)
		}
	}
}

// A permit of a session is not renewed by itself.
func TestSemaphoreSessionPermit(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(createSession("S", 1000, 0))
	c := semAcquire("s", "L", 2, 0)
	c.SessionID = "S"
	if r := l.apply(c); r.Status != StatusOK || r.Lock.TTL != 1000 || r.Lock.SessionID != "S" {
		t.Fatalf("acquire: %+v", r)
	}
	if r := l.apply(v5(Command{Op: OpSemRenew, Name: "s", LeaseID: "L"})); r.Status != StatusInvalid {
		t.Fatalf("renew of a session's permit: %v", r.Status)
	}
	if r := l.apply(v5(Command{Op: OpSessionClose, SessionID: "S"})); r.Ended != 1 || len(r.FreedSemaphores) != 1 {
		t.Fatalf("close: %+v", r)
	}
}

// Two shared holders together; a writer is refused while they hold (with
// both listed), gets the lock once both leave, with a larger token than
// both; a shared holder asking exclusive is refused (no upgrades).
func TestSharedLocks(t *testing.T) {
	l := newLog(t)
	l.at(0)
	shared := func(lease string) Command {
		return v5(Command{Op: OpAcquire, Name: "rw", Owner: "o", LeaseID: lease, TTL: 1000, Mode: ModeShared})
	}
	r1, r2 := l.apply(shared("R1")), l.apply(shared("R2"))
	if r1.Status != StatusOK || r2.Status != StatusOK || r2.Lock.Mode != ModeShared {
		t.Fatalf("readers: %v %v", r1.Status, r2.Status)
	}
	r := l.apply(acquire("rw", "W", 1000))
	if r.Status != StatusHeld || len(r.Holders) != 2 || r.Holder.Token != r1.Lock.Token {
		t.Fatalf("writer while read: %+v", r)
	}
	up := shared("R1")
	up.Mode = ModeExclusive
	if r := l.apply(up); r.Status != StatusHeld {
		t.Fatalf("upgrade: %v, want held", r.Status)
	}
	if h := l.m.Holders("rw"); len(h) != 2 {
		t.Fatalf("holders: %+v", h)
	}
	if g, _ := l.m.Get("rw"); g.LeaseID != "R1" {
		t.Fatalf("Get: %+v, want the lowest token", g)
	}
	if r := l.apply(release("rw", "R1")); r.Status != StatusOK || len(r.Freed) != 1 {
		t.Fatalf("release R1: %+v", r)
	}
	if r := l.apply(acquire("rw", "W", 1000)); r.Status != StatusHeld {
		t.Fatalf("writer with one reader: %v", r.Status)
	}
	l.apply(release("rw", "R2"))
	w := l.apply(acquire("rw", "W", 1000))
	if w.Status != StatusOK || w.Lock.Token <= r2.Lock.Token {
		t.Fatalf("writer: %+v", w)
	}
	if r := l.apply(shared("R3")); r.Status != StatusHeld || r.Holder.LeaseID != "W" {
		t.Fatalf("reader while written: %+v", r)
	}
	bad := shared("R4")
	bad.LockDelay = 100
	if r := l.apply(bad); r.Status != StatusInvalid {
		t.Fatalf("shared with lock-delay: %v", r.Status)
	}
	// Shared holders expire each at their own deadline.
	l.apply(release("rw", "W"))
	l.at(100).apply(shared("R5"))
	l.at(600).apply(shared("R6"))
	if r := l.at(1100).apply(tick()); r.Expired != 1 || len(l.m.Holders("rw")) != 1 {
		t.Fatalf("at 1.1 s: %+v", r)
	}
	// A force release ends every shared holder.
	if r := l.apply(v5(Command{Op: OpForceRelease, Name: "rw"})); r.Status != StatusOK || len(l.m.Holders("rw")) != 0 {
		t.Fatalf("force: %+v", r)
	}
}
