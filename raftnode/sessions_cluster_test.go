package raftnode_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// startFormat5 starts three nodes on a shared manual clock and waits until
// the leader writes command format 5.
func startFormat5(t *testing.T) (*testenv.Cluster, *testenv.ManualClock) {
	t.Helper()
	clock := &testenv.ManualClock{}
	c := testenv.Start(t, 3, testenv.Options{Clock: clock})
	t.Cleanup(c.Close)
	testenv.WaitFor(t, 15*time.Second, "the leader to write command format 5", func() bool {
		return c.Leader().CommandVersion() == fsm.MaxCommandVersion
	})
	return c, clock
}

// mustApply applies cmd on the leader, retrying as a client would (the
// same ids: every command here is idempotent or checked for it) when
// leadership moves under load, and wants status want.
func mustApply(t *testing.T, c *testenv.Cluster, cmd fsm.Command, want fsm.Status) fsm.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.Leader().Apply(testenv.Context(t, 10*time.Second), cmd)
		retry := errors.Is(err, raftnode.ErrIndeterminate) || errors.Is(err, raftnode.ErrNotLeader) ||
			errors.Is(err, raftnode.ErrNoLeader) || errors.Is(err, raftnode.ErrNotSupportedYet)
		if retry && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // a new leader surveys its members first
			continue
		}
		if err != nil || r.Status != want {
			t.Fatalf("%v %s: %+v, %v; want %v", cmd.Op, cmd.Name, r, err, want)
		}
		return r
	}
}

func sessionLock(i int) string { return fmt.Sprintf("session/lock-%03d", i) }

// A session with TTL 2 s holding 200 locks keeps all 200 for 6 s
// while only the session is renewed; once renewals stop, all are free at
// one index within the TTL (on the FSM clock: the manual clock moves it);
// close frees a session's locks at once.
func TestSessionHolds200LocksOnOneKeepalive(t *testing.T) {
	c, clock := startFormat5(t)
	if r, err := c.Leader().Apply(testenv.Context(t, 10*time.Second), fsm.Command{Op: fsm.OpSessionCreate, Owner: "anon", TTL: 2000}); err == nil && r.Session.ID == "" {
		t.Fatal("the leader made no session id")
	}
	sid := "session-one-0123456789abcdef"
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "worker", TTL: 2000}, fsm.StatusOK)
	tokens := map[string]uint64{}
	for i := 0; i < 200; i++ {
		r := mustApply(t, c, fsm.Command{Op: fsm.OpAcquire, Name: sessionLock(i), Owner: "worker", LeaseID: fmt.Sprintf("lease-%03d-0123456789abcdef", i), SessionID: sid}, fsm.StatusOK)
		tokens[sessionLock(i)] = r.Lock.Token
	}
	for step := 0; step < 12; step++ { // 6 s in 500 ms steps, renewing only the session
		clock.Advance(500 * time.Millisecond)
		mustApply(t, c, fsm.Command{Op: fsm.OpSessionRenew, SessionID: sid}, fsm.StatusOK)
		if held := c.Leader().Machine().HeldCount(); held != 200 {
			t.Fatalf("after %d ms: %d leases held, want 200", (step+1)*500, held)
		}
	}
	// Renewals stop. Just before the deadline all are held; at it the
	// leader's tick ends them all in one entry.
	clock.Advance(1999 * time.Millisecond)
	mustApply(t, c, fsm.Command{Op: fsm.OpRenew, Name: "none", LeaseID: "nobody-0123456789abcdef"}, fsm.StatusNotHolder)
	if held := c.Leader().Machine().HeldCount(); held != 200 {
		t.Fatalf("1999 ms after the last renew: %d held", held)
	}
	clock.Advance(time.Millisecond)
	leader := c.Leader()
	testenv.WaitFor(t, 10*time.Second, "the session's locks to end", func() bool { return leader.Machine().HeldCount() == 0 })
	ended := leader.Machine().Index(sessionLock(0))
	for i := 0; i < 200; i++ {
		if idx := leader.Machine().Index(sessionLock(i)); idx != ended {
			t.Fatalf("%s ended at index %d, %s at %d: not one index", sessionLock(i), idx, sessionLock(0), ended)
		}
	}
	if _, ok := leader.Machine().Session(sid); ok {
		t.Fatal("the session outlived its TTL")
	}
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionRenew, SessionID: sid}, fsm.StatusNoSession)

	// Close frees at once.
	sid = "session-two-0123456789abcdef"
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "worker", TTL: 2000}, fsm.StatusOK)
	for i := 0; i < 50; i++ {
		mustApply(t, c, fsm.Command{Op: fsm.OpAcquire, Name: sessionLock(i), Owner: "worker", LeaseID: fmt.Sprintf("again-%03d-0123456789abcdef", i), SessionID: sid}, fsm.StatusOK)
	}
	if r := mustApply(t, c, fsm.Command{Op: fsm.OpSessionClose, SessionID: sid}, fsm.StatusOK); r.Ended != 50 {
		t.Fatalf("close ended %d, want 50", r.Ended)
	}
	if held := c.Leader().Machine().HeldCount(); held != 0 {
		t.Fatalf("after close: %d held", held)
	}
}

// A leader killed while a session holds locks: the new leader has the
// session and its locks with the same tokens, and renews it.
func TestSessionSurvivesLeaderKill(t *testing.T) {
	c, _ := startFormat5(t)
	sid := "session-kill-0123456789abcdef"
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "worker", TTL: 60_000, LockDelay: 500}, fsm.StatusOK)
	tokens := map[string]uint64{}
	for i := 0; i < 20; i++ {
		tokens[sessionLock(i)] = mustApply(t, c, fsm.Command{Op: fsm.OpAcquire, Name: sessionLock(i), Owner: "worker", LeaseID: fmt.Sprintf("lease-%03d-0123456789abcdef", i), SessionID: sid}, fsm.StatusOK).Lock.Token
	}
	old := c.Leader()
	old.Kill()
	leader := c.WaitForNewLeader(old)
	// A linearizable read: the new leader has applied every committed entry.
	var s fsm.Session
	var ok bool
	testenv.WaitFor(t, 15*time.Second, "a linearizable read on the new leader", func() bool {
		r, err := leader.Read(testenv.Context(t, 5*time.Second), false)
		if err == nil {
			s, ok = r.Session(sid)
		}
		return err == nil
	})
	if !ok || len(s.Leases) != 20 {
		t.Fatalf("the new leader's session: %d leases, %v", len(s.Leases), ok)
	}
	for _, l := range s.Leases {
		if l.Token != tokens[l.Name] {
			t.Fatalf("%s: token %d, was %d", l.Name, l.Token, tokens[l.Name])
		}
	}
	// The new leader writes format 5 only once it has heard every member
	// (cmdversion.go): bring the old one back.
	old.Restart()
	testenv.WaitFor(t, 15*time.Second, "the new leader to write format 5", func() bool {
		return c.Leader().CommandVersion() == fsm.MaxCommandVersion
	})
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionRenew, SessionID: sid}, fsm.StatusOK)
	r := mustApply(t, c, fsm.Command{Op: fsm.OpAcquire, Name: sessionLock(3), LeaseID: "other-0123456789abcdef", TTL: 1000}, fsm.StatusHeld)
	if r.Holder.Token != tokens[sessionLock(3)] {
		t.Fatalf("holder token %d, want %d", r.Holder.Token, tokens[sessionLock(3)])
	}
}

type acquired struct {
	r   fsm.Result
	err error
}

// parkAcquire starts an acquire that waits and returns once the leader
// has parked it (its waiter count rose).
func parkAcquire(t *testing.T, c *testenv.Cluster, ctx context.Context, cmd fsm.Command) <-chan acquired {
	t.Helper()
	leader := c.Leader()
	before := leader.Waiters()
	out := make(chan acquired, 1)
	go func() {
		r, err := leader.Acquire(ctx, cmd, 20*time.Second)
		out <- acquired{r, err}
	}()
	testenv.WaitFor(t, 10*time.Second, "the acquire to park", func() bool { return leader.Waiters() == before+1 })
	return out
}

func granted(t *testing.T, ch <-chan acquired, what string) fsm.Lock {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil || a.r.Status != fsm.StatusOK {
			t.Fatalf("%s: %+v, %v", what, a.r, a.err)
		}
		return a.r.Lock
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: not granted", what)
	}
	return fsm.Lock{}
}

func notYet(t *testing.T, ch <-chan acquired, what string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s answered early: %+v, %v", what, a.r, a.err)
	default:
	}
}

func semCmd(lease string) fsm.Command {
	return fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 2, Owner: lease, LeaseID: lease + "-0123456789abcdef", TTL: 60_000}
}

// Semaphore waiters are granted in arrival order; two permits freed at
// once (a session's close) grant the first two waiters in one run; an
// acquire that does not wait does not jump them.
func TestSemaphoreWaitersFIFO(t *testing.T) {
	c, _ := startFormat5(t)
	ctx := testenv.Context(t, time.Minute)
	sid := "session-holders-0123456789abcdef"
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionCreate, SessionID: sid, Owner: "holders", TTL: 60_000}, fsm.StatusOK)
	for _, h := range []string{"h1", "h2"} {
		cmd := semCmd(h)
		cmd.TTL, cmd.SessionID = 0, sid
		mustApply(t, c, cmd, fsm.StatusOK)
	}
	full := mustApply(t, c, semCmd("x"), fsm.StatusFull)
	if len(full.Holders) != 2 {
		t.Fatalf("full answer lists %d holders", len(full.Holders))
	}
	w1 := parkAcquire(t, c, ctx, semCmd("w1"))
	w2 := parkAcquire(t, c, ctx, semCmd("w2"))
	w3 := parkAcquire(t, c, ctx, semCmd("w3"))
	if n := c.Leader().Waiters(); n != 3 {
		t.Fatalf("%d parked", n)
	}
	mustApply(t, c, fsm.Command{Op: fsm.OpSessionClose, SessionID: sid}, fsm.StatusOK)
	p1, p2 := granted(t, w1, "w1"), granted(t, w2, "w2")
	if p1.Token >= p2.Token || p1.Slot == p2.Slot {
		t.Fatalf("w1 %+v, w2 %+v", p1, p2)
	}
	notYet(t, w3, "w3")
	// A free permit appears only through the queue: a non-waiting acquire
	// while w3 waits is full even after a release, until w3 has it.
	mustApply(t, c, fsm.Command{Op: fsm.OpSemRelease, Name: "pool", LeaseID: p1.LeaseID}, fsm.StatusOK)
	p3 := granted(t, w3, "w3")
	if p3.Slot != p1.Slot || p3.Token <= p2.Token {
		t.Fatalf("w3 %+v after w1 %+v", p3, p1)
	}
	mustApply(t, c, semCmd("late"), fsm.StatusFull)
}

func sharedCmd(lease string, mode fsm.Mode) fsm.Command {
	return fsm.Command{Op: fsm.OpAcquire, Name: "rw", Mode: mode, Owner: lease, LeaseID: lease + "-0123456789abcdef", TTL: 60_000}
}

// Two readers hold together; a writer waits for both and gets a larger
// token; readers arriving behind the writer neither jump it nor are
// granted one at a time: when the writer leaves they are granted as a run.
func TestSharedReadersThenWriter(t *testing.T) {
	c, _ := startFormat5(t)
	ctx := testenv.Context(t, time.Minute)
	r1 := mustApply(t, c, sharedCmd("r1", fsm.ModeShared), fsm.StatusOK).Lock
	r2 := mustApply(t, c, sharedCmd("r2", fsm.ModeShared), fsm.StatusOK).Lock
	if held := mustApply(t, c, sharedCmd("w", fsm.ModeExclusive), fsm.StatusHeld); len(held.Holders) != 2 {
		t.Fatalf("held answer lists %d holders", len(held.Holders))
	}
	w := parkAcquire(t, c, ctx, sharedCmd("w", fsm.ModeExclusive))
	// A reader that does not wait is refused while the writer waits.
	mustApply(t, c, sharedCmd("r3", fsm.ModeShared), fsm.StatusHeld)
	r3 := parkAcquire(t, c, ctx, sharedCmd("r3", fsm.ModeShared))
	r4 := parkAcquire(t, c, ctx, sharedCmd("r4", fsm.ModeShared))
	mustApply(t, c, fsm.Command{Op: fsm.OpRelease, Name: "rw", LeaseID: r1.LeaseID}, fsm.StatusOK)
	notYet(t, w, "the writer, with one reader left")
	mustApply(t, c, fsm.Command{Op: fsm.OpRelease, Name: "rw", LeaseID: r2.LeaseID}, fsm.StatusOK)
	wl := granted(t, w, "the writer")
	if wl.Token <= r2.Token || wl.Mode != fsm.ModeExclusive {
		t.Fatalf("writer %+v after readers %d, %d", wl, r1.Token, r2.Token)
	}
	notYet(t, r3, "r3 behind the writer")
	mustApply(t, c, fsm.Command{Op: fsm.OpRelease, Name: "rw", LeaseID: wl.LeaseID}, fsm.StatusOK)
	l3, l4 := granted(t, r3, "r3"), granted(t, r4, "r4")
	if l3.Token <= wl.Token || l4.Token <= l3.Token {
		t.Fatalf("readers %d, %d after writer %d", l3.Token, l4.Token, wl.Token)
	}
	if h := c.Leader().Machine().Holders("rw"); len(h) != 2 {
		t.Fatalf("holders after the run: %+v", h)
	}
}
