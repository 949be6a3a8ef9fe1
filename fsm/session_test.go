package fsm

import (
	"bytes"
	"fmt"
	"testing"
)

func v5(c Command) Command { c.Version = commandVersion5; return c }

func createSession(id string, ttlMs, delayMs int64) Command {
	return v5(Command{Op: OpSessionCreate, SessionID: id, Owner: "owner-" + id, TTL: ttlMs, LockDelay: delayMs})
}
func sessionAcquire(name, lease, session string) Command {
	return v5(Command{Op: OpAcquire, Name: name, Owner: "owner-" + lease, LeaseID: lease, SessionID: session})
}

// A session holding 200 locks keeps them while only the session is
// renewed, and its expiry ends all of them at one index.
func TestSessionExpiryEndsAllLocksAtOneIndex(t *testing.T) {
	l := newLog(t)
	if r := l.at(0).apply(createSession("S", 2000, 0)); r.Status != StatusOK || r.Session.Deadline != 2000*ms {
		t.Fatalf("create: %+v", r)
	}
	for i := 0; i < 200; i++ {
		r := l.apply(sessionAcquire(fmt.Sprintf("lock/%d", i), fmt.Sprintf("L%d", i), "S"))
		if r.Status != StatusOK || r.Lock.SessionID != "S" || r.Lock.TTL != 2000 || r.Lock.Deadline != 2000*ms {
			t.Fatalf("acquire %d: %+v", i, r)
		}
	}
	for at := int64(1500); at <= 6000; at += 1500 {
		if r := l.at(at).apply(v5(Command{Op: OpSessionRenew, SessionID: "S"})); r.Status != StatusOK {
			t.Fatalf("renew at %d: %v", at, r.Status)
		}
		if s, _ := l.m.Session("S"); len(s.Leases) != 200 {
			t.Fatalf("after the renew at %d: %d leases", at, len(s.Leases))
		}
	}
	if r := l.at(7999).apply(tick()); r.Expired != 0 || l.m.HeldCount() != 200 {
		t.Fatalf("before the deadline: expired %d, held %d", r.Expired, l.m.HeldCount())
	}
	// A lease of the session has no TTL of its own to renew.
	if r := l.apply(renew("lock/0", "L0", 1000)); r.Status != StatusInvalid {
		t.Fatalf("renew of a session's lease: %v, want invalid", r.Status)
	}
	r := l.at(8000).apply(tick())
	if r.Expired != 200 || len(r.Freed) != 200 || l.m.HeldCount() != 0 {
		t.Fatalf("at the deadline: expired %d, freed %d, held %d", r.Expired, len(r.Freed), l.m.HeldCount())
	}
	for i := 0; i < 200; i++ {
		if _, ok := l.m.Get(fmt.Sprintf("lock/%d", i)); ok {
			t.Fatalf("lock/%d still held", i)
		}
	}
	if _, ok := l.m.Session("S"); ok {
		t.Fatal("the session outlived its deadline")
	}
	if r := l.apply(v5(Command{Op: OpSessionRenew, SessionID: "S"})); r.Status != StatusNoSession {
		t.Fatalf("renew of an expired session: %v", r.Status)
	}
	if r := l.apply(sessionAcquire("x", "Lx", "S")); r.Status != StatusNoSession {
		t.Fatalf("acquire in an expired session: %v", r.Status)
	}
}

// An expiring session's exclusive locks enter the session's lock-delay;
// its shared holds and permits simply end. A close ends all at once with
// no lock-delay.
func TestSessionLockDelayAndClose(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(createSession("S", 1000, 500))
	l.apply(sessionAcquire("ex", "L1", "S"))
	sh := sessionAcquire("sh", "L2", "S")
	sh.Mode = ModeShared
	l.apply(sh)
	l.apply(v5(Command{Op: OpSemAcquire, Name: "sem", LeaseID: "L3", Owner: "o", SessionID: "S", Limit: 2}))
	if s, _ := l.m.Session("S"); len(s.Leases) != 3 || s.Leases[0].Name != "ex" || s.Leases[1].Name != "sh" || s.Leases[2].Limit != 2 {
		t.Fatalf("session leases: %+v", s.Leases)
	}
	r := l.at(1000).apply(tick())
	if r.Expired != 3 || len(r.FreedSemaphores) != 1 || len(r.Freed) != 1 || r.Freed[0] != "sh" {
		t.Fatalf("expiry: %+v", r)
	}
	if r := l.apply(acquire("ex", "other", 1000)); r.Status != StatusHeld || r.Retry != 500 || r.Holder.LeaseID != "L1" {
		t.Fatalf("acquire during the session's lock-delay: %+v", r)
	}

	l.apply(createSession("T", 1000, 500))
	for i := 0; i < 5; i++ {
		l.apply(sessionAcquire(fmt.Sprintf("t/%d", i), fmt.Sprintf("T%d", i), "T"))
	}
	r = l.apply(v5(Command{Op: OpSessionClose, SessionID: "T"}))
	if r.Status != StatusOK || r.Ended != 5 || len(r.Freed) != 5 {
		t.Fatalf("close: %+v", r)
	}
	if r := l.apply(acquire("t/0", "other", 1000)); r.Status != StatusOK {
		t.Fatalf("acquire after close (no lock-delay): %v", r.Status)
	}
	if r := l.apply(v5(Command{Op: OpSessionClose, SessionID: "T"})); r.Status != StatusNoSession {
		t.Fatalf("second close: %v", r.Status)
	}
}

// Create is idempotent on the id for its owner; another owner's create of
// that id is refused.
func TestSessionCreateIdempotent(t *testing.T) {
	l := newLog(t)
	first := l.at(0).apply(createSession("S", 1000, 0))
	l.apply(sessionAcquire("a", "L", "S"))
	again := l.at(500).apply(createSession("S", 1000, 0))
	if again.Status != StatusOK || again.Session.Index != first.Session.Index || again.Session.Deadline != 1500*ms {
		t.Fatalf("retried create: %+v (first %+v)", again, first)
	}
	other := createSession("S", 1000, 0)
	other.Owner = "someone else"
	if r := l.apply(other); r.Status != StatusInvalid {
		t.Fatalf("another owner's create: %v", r.Status)
	}
	if r := l.apply(v5(Command{Op: OpSessionCreate, SessionID: "Z", TTL: 0})); r.Status != StatusInvalid {
		t.Fatalf("create without a TTL: %v", r.Status)
	}
}

// A create retried with the same id and owner but another TTL or
// lock-delay is refused and leaves the live session as it was: its first
// caller holds leases it times with its own TTL, and a "retry" that shrank
// the TTL or dropped the lock-delay under it (as it did before) let
// another lease take a lock that caller still believed it held.
func TestSessionCreateRetryWithOtherTermsRefused(t *testing.T) {
	l := newLog(t).at(0)
	create := Command{Version: commandVersion5, Op: OpSessionCreate, SessionID: "S", Owner: "w", TTL: 60_000, LockDelay: 5_000}
	first := l.apply(create)
	if first.Status != StatusOK {
		t.Fatal(first.Status)
	}
	if r := l.apply(Command{Version: commandVersion5, Op: OpAcquire, Name: "x", Owner: "w", LeaseID: "L", SessionID: "S"}); r.Status != StatusOK {
		t.Fatal(r.Status)
	}
	for _, terms := range []struct{ ttl, delay int64 }{{1_000, 0}, {1_000, 5_000}, {60_000, 0}, {120_000, 5_000}} {
		retry := create
		retry.TTL, retry.LockDelay = terms.ttl, terms.delay
		if r := l.at(10).apply(retry); r.Status != StatusInvalid {
			t.Fatalf("create retried with ttl %d, lock-delay %d: %v (session %+v), want refused", terms.ttl, terms.delay, r.Status, r.Session)
		}
	}
	s, alive := l.m.Session("S")
	if !alive || s.TTL != 60_000 || s.LockDelay != 5_000 || s.Index != first.Session.Index || s.Deadline != 60_000*ms {
		t.Fatalf("after refused retries: alive %v, %+v (first %+v)", alive, s, first.Session)
	}
	// 2 s later the first caller holds "x" for about 58 s more.
	if got := l.at(2_010).apply(Command{Version: commandVersion5, Op: OpAcquire, Name: "x", Owner: "other", LeaseID: "L2", TTL: 1_000}); got.Status != StatusHeld {
		t.Fatalf("another lease's acquire of x 2 s after the retries: %v (token %d)", got.Status, got.Lock.Token)
	}
	// The same terms again: idempotent, and the deadline counts from it.
	if r := l.at(3_000).apply(create); r.Status != StatusOK || r.Session.Index != first.Session.Index || r.Session.Deadline != 63_000*ms {
		t.Fatalf("same-terms retry: %v %+v", r.Status, r.Session)
	}
}

// A session renew that changes the TTL moves the index of every lock and
// semaphore of the session, whose ttl_ms (the session's) changed with it,
// and names the locks in Changed: a blocking read on one of them hears of
// the change. A renew that keeps the TTL moves nothing.
func TestSessionTTLChangeMovesLockIndex(t *testing.T) {
	l := newLog(t).at(0)
	l.apply(v5(Command{Op: OpSessionCreate, SessionID: "S", Owner: "w", TTL: 10_000}))
	l.apply(sessionAcquire("x", "L", "S"))
	l.apply(v5(Command{Op: OpAcquire, Name: "r", Owner: "w", LeaseID: "R", SessionID: "S", Mode: ModeShared}))
	l.apply(v5(Command{Op: OpAcquire, Name: "r", Owner: "v", LeaseID: "R2", TTL: 5_000, Mode: ModeShared}))
	l.apply(v5(Command{Op: OpSemAcquire, Name: "p", Owner: "w", LeaseID: "P", SessionID: "S", Limit: 2}))
	l.apply(acquire("other", "O", 5_000))
	before, _, idx := l.m.Lookup("x")
	semBefore, _ := l.m.Semaphore("p")
	_, _, otherIdx := l.m.Lookup("other")

	r := l.at(10).apply(v5(Command{Op: OpSessionRenew, SessionID: "S", TTL: 30_000}))
	after, _, idx2 := l.m.Lookup("x")
	_, _, rIdx := l.m.Lookup("r")
	semAfter, _ := l.m.Semaphore("p")
	_, _, otherIdx2 := l.m.Lookup("other")
	if after.TTL == before.TTL || idx2 == idx || idx2 != r.Session.Index || rIdx != idx2 {
		t.Fatalf("lock x: ttl_ms %d -> %d, index %d -> %d; lock r index %d; the renew's index %d", before.TTL, after.TTL, idx, idx2, rIdx, r.Session.Index)
	}
	if semAfter.Index == semBefore.Index || semAfter.Holders[0].TTL != 30_000 {
		t.Fatalf("semaphore p: index %d -> %d, holder %+v", semBefore.Index, semAfter.Index, semAfter.Holders[0])
	}
	if otherIdx2 != otherIdx {
		t.Fatalf("a lock outside the session moved: %d -> %d", otherIdx, otherIdx2)
	}
	if fmt.Sprint(r.Changed) != "[r x]" {
		t.Fatalf("Changed %v, want [r x]", r.Changed)
	}

	r = l.at(20).apply(v5(Command{Op: OpSessionRenew, SessionID: "S", TTL: 30_000}))
	if _, _, idx3 := l.m.Lookup("x"); idx3 != idx2 || len(r.Changed) != 0 {
		t.Fatalf("a renew keeping the TTL: index %d -> %d, Changed %v", idx2, idx3, r.Changed)
	}
}

// A session holds at most MaxLeasesPerSession leases.
func TestSessionFull(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(createSession("S", 60000, 0))
	for i := 0; i < MaxLeasesPerSession; i++ {
		if r := l.apply(sessionAcquire(fmt.Sprint(i), fmt.Sprint("L", i), "S")); r.Status != StatusOK {
			t.Fatalf("acquire %d: %v", i, r.Status)
		}
	}
	if r := l.apply(sessionAcquire("one more", "Lx", "S")); r.Status != StatusSessionFull {
		t.Fatalf("lease %d: %v, want session_full", MaxLeasesPerSession+1, r.Status)
	}
	if r := l.apply(sessionAcquire("0", "L0", "S")); r.Status != StatusOK {
		t.Fatalf("a retry by a lease it holds: %v", r.Status)
	}
	// Its expiry fits one entry's cap whatever else is due.
	r := l.at(60000).apply(tick())
	if r.Expired != MaxLeasesPerSession {
		t.Fatalf("expired %d, want %d", r.Expired, MaxLeasesPerSession)
	}
}

// The cap counts leases ended; a session's leases are never split across
// entries, and a tick always settles at least one due timer.
func TestSessionExpiryIsNeverSplit(t *testing.T) {
	l := newLog(t)
	l.m.maxExpiries = 3
	l.at(0).apply(acquire("a", "La", 1000)) // timers due at 1000, in order: "a", session "m" (5 leases), "z"
	l.apply(createSession("m", 1000, 0))
	for i := 0; i < 5; i++ {
		l.apply(sessionAcquire(fmt.Sprint("s", i), fmt.Sprint("L", i), "m"))
	}
	l.apply(acquire("z", "Lz", 1000))
	if r := l.at(1000).apply(tick()); r.Expired != 1 || len(r.Freed) != 1 || r.Freed[0] != "a" {
		t.Fatalf("first entry: %+v (the session's 5 do not fit after a)", r)
	}
	if r := l.apply(tick()); r.Expired != 5 {
		t.Fatalf("second entry: expired %d, want the session's 5 (first timer, over the cap)", r.Expired)
	}
	if r := l.apply(tick()); r.Expired != 1 || r.Freed[0] != "z" {
		t.Fatalf("third entry: %+v", r)
	}
}

// A snapshot with sessions, shared holders and permits restores to the
// same state, and a state without them is still written as version 2.
func TestSnapshotVersion3RoundTrip(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(acquire("plain", "L0", 1000))
	if s := snapshotBytes(t, l.m); s[len(snapshotMagic)] != snapshotVersion2 {
		t.Fatalf("a state without sessions is written as version %d", s[len(snapshotMagic)])
	}
	l.apply(createSession("S", 1000, 300))
	l.apply(sessionAcquire("a", "L1", "S"))
	sh := v5(Command{Op: OpAcquire, Name: "b", LeaseID: "L2", TTL: 500, Mode: ModeShared})
	l.apply(sh)
	sh.LeaseID = "L3"
	l.apply(sh)
	l.apply(v5(Command{Op: OpSemAcquire, Name: "a", LeaseID: "L4", TTL: 700, Limit: 3}))
	l.apply(v5(Command{Op: OpSemAcquire, Name: "a", LeaseID: "L5", SessionID: "S", Limit: 3}))
	snap := snapshotBytes(t, l.m)
	if snap[len(snapshotMagic)] != snapshotVersion3 {
		t.Fatalf("written as version %d", snap[len(snapshotMagic)])
	}
	r := New()
	if err := r.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, r), snap) {
		t.Fatal("restored state writes other bytes")
	}
	if s, ok := r.Session("S"); !ok || len(s.Leases) != 2 {
		t.Fatalf("restored session: %+v", s)
	}
	if h := r.Holders("b"); len(h) != 2 || h[0].Token > h[1].Token {
		t.Fatalf("restored shared holders: %+v", h)
	}
	if p, err := PrepareRestore(snap, 1000); err != nil {
		t.Fatal(err)
	} else if err := r.Restore(bytes.NewReader(p)); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Session("S"); s.Index != 1000 {
		t.Fatalf("session index after PrepareRestore: %d", s.Index)
	}
}

// Once a format 5 entry is applied the state proves it (the leader's
// format gate trusts that), also after every session and permit ended and
// through a snapshot: it is written in version 3, which no older build
// restores, and restoring it proves format 5 again. A log of older formats
// proves nothing and is still written in version 2.
func TestFormat5StaysProvenAfterItsStateEnds(t *testing.T) {
	l := newLog(t)
	l.at(0).apply(Command{Version: commandVersion4, Op: OpAcquire, Name: "plain", LeaseID: "L0", TTL: 1000, Value: "v"})
	if v := l.m.ProvenCommandVersion(); v != commandVersion1 {
		t.Fatalf("a format 4 log proves format %d", v)
	}
	l.apply(createSession("S", 1000, 0))
	l.apply(sessionAcquire("a", "L1", "S"))
	l.apply(v5(Command{Op: OpSessionClose, SessionID: "S"}))
	if _, ok := l.m.Session("S"); ok || len(l.m.Holders("a")) != 0 {
		t.Fatal("the session's state did not end")
	}
	if v := l.m.ProvenCommandVersion(); v != commandVersion5 {
		t.Fatalf("after a format 5 entry: proves %d", v)
	}
	snap := snapshotBytes(t, l.m)
	if snap[len(snapshotMagic)] != snapshotVersion3 {
		t.Fatalf("written as version %d after format 5 entries", snap[len(snapshotMagic)])
	}
	r := New()
	if err := r.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if v := r.ProvenCommandVersion(); v != commandVersion5 {
		t.Fatalf("restored: proves %d", v)
	}
	if !bytes.Equal(snapshotBytes(t, r), snap) {
		t.Fatal("restored state writes other bytes")
	}
	// A plain command in format 5 proves it as well: it stops old builds.
	p := newLog(t)
	p.at(0).apply(v5(tick()))
	if v := p.m.ProvenCommandVersion(); v != commandVersion5 {
		t.Fatalf("a format 5 tick proves %d", v)
	}
}

// A session's create, renew and close answer what the HTTP answer needs
// (id, owner, TTL, lock-delay, deadline, index), not a view of its leases:
// every replica applies every renew, and building the sorted view of 4,096
// leases cost 12.4 ms per renew (requests-server.md). The leases are for
// reads (Machine.Session). A renew costs the same whatever the session
// holds.
func TestSessionWritesAnswerWithoutLeases(t *testing.T) {
	l := newLog(t)
	if r := l.at(0).apply(createSession("S", 1000, 200)); r.Status != StatusOK || r.Session.ID != "S" || r.Session.Owner != "owner-S" ||
		r.Session.TTL != 1000 || r.Session.LockDelay != 200 || r.Session.Deadline != 1000*ms || r.Session.Index != 1 || r.Session.Leases != nil {
		t.Fatalf("create: %+v", r.Session)
	}
	l.apply(sessionAcquire("a", "La", "S"))
	l.apply(v5(Command{Op: OpSemAcquire, Name: "p", LeaseID: "Lp", SessionID: "S", Limit: 2}))
	if r := l.at(300).apply(createSession("S", 1000, 200)); r.Status != StatusOK || r.Session.Deadline != 1300*ms || r.Session.Leases != nil {
		t.Fatalf("create again: %+v", r.Session)
	}
	if r := l.at(500).apply(v5(Command{Op: OpSessionRenew, SessionID: "S", TTL: 2000})); r.Status != StatusOK || r.Session.TTL != 2000 ||
		r.Session.Deadline != 2500*ms || r.Session.Index != 5 || r.Session.Leases != nil {
		t.Fatalf("renew: %+v", r.Session)
	}
	if s, ok := l.m.Session("S"); !ok || len(s.Leases) != 2 || s.Leases[0].Name != "a" || s.Leases[1].Limit != 2 {
		t.Fatalf("read: %+v", s)
	}
	if r := l.apply(v5(Command{Op: OpSessionClose, SessionID: "S"})); r.Status != StatusOK || r.Ended != 2 || r.Session.Owner != "owner-S" || r.Session.Leases != nil {
		t.Fatalf("close: %+v", r)
	}

	allocs := func(leases int) float64 {
		m, index := sessionWith(leases)
		return testing.AllocsPerRun(20, func() {
			index++
			m.ApplyCommand(index, 1, Command{Version: commandVersion5, Op: OpSessionRenew, StampTerm: 1, SessionID: "S"})
		})
	}
	if small, big := allocs(1), allocs(MaxLeasesPerSession); big > small {
		t.Fatalf("a renew allocates %v times with %d leases, %v with 1", big, MaxLeasesPerSession, small)
	}
}

// A shared hold publishes no value: a shared acquire with one, or an
// update of a shared hold, is invalid and changes nothing.
func TestSharedHoldHasNoValue(t *testing.T) {
	l := newLog(t)
	sh := v5(Command{Op: OpAcquire, Name: "cfg", LeaseID: "L1", TTL: 1000, Mode: ModeShared, Value: "v"})
	if r := l.at(0).apply(sh); r.Status != StatusInvalid || len(l.m.Holders("cfg")) != 0 {
		t.Fatalf("shared acquire with a value: %v", r.Status)
	}
	sh.Value = ""
	l.apply(sh)
	before := l.m.Index("cfg")
	if r := l.apply(v5(Command{Op: OpUpdate, Name: "cfg", LeaseID: "L1", Value: "x"})); r.Status != StatusInvalid {
		t.Fatalf("update of a shared hold: %v", r.Status)
	}
	if h := l.m.Holders("cfg"); len(h) != 1 || h[0].Value != "" || l.m.Index("cfg") != before {
		t.Fatalf("after the refused update: %+v, index %d (was %d)", h, l.m.Index("cfg"), before)
	}
}
