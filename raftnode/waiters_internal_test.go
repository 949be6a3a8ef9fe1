package raftnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// waitRig drives a waitQueue without Raft: grants block in apply until the
// test lets them finish, and the wait's timer fires when the test says.
type waitRig struct {
	q       *waitQueue
	timer   chan time.Time // the wait's timer: a send fires it
	left    chan struct{}  // closed once wait has tried to leave its queue
	granted chan struct{}  // closed when a grant's apply starts
	finish  chan struct{}  // close to let the grant's apply return OK

	mu      sync.Mutex
	held    bool
	applied []fsm.Command
}

func newWaitRig(t *testing.T) *waitRig {
	r := &waitRig{timer: make(chan time.Time), left: make(chan struct{}), granted: make(chan struct{}), finish: make(chan struct{}), held: true}
	apply := func(c fsm.Command) (fsm.Result, error) {
		r.mu.Lock()
		r.applied = append(r.applied, c)
		r.mu.Unlock()
		if c.Op == fsm.OpAcquire {
			close(r.granted)
			<-r.finish
			return fsm.Result{Status: fsm.StatusOK, Lock: fsm.Lock{Name: c.Name, LeaseID: c.LeaseID, Token: 7}}, nil
		}
		return fsm.Result{Status: fsm.StatusOK}, nil
	}
	holder := func(string) (fsm.Lock, bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return fsm.Lock{LeaseID: "holder"}, r.held
	}
	r.q = newWaitQueue(apply, holder, 10, 10)
	r.q.after = func(time.Duration) <-chan time.Time { return r.timer }
	var once sync.Once
	r.q.left = func() { once.Do(func() { close(r.left) }) }
	r.q.open()
	return r
}

type waitAnswer struct {
	res fsm.Result
	err error
}

// park starts a wait and returns once it is parked; the lock is then freed
// and the grant for it starts (and blocks in apply).
func (r *waitRig) parkAndGrant(t *testing.T, ctx context.Context) <-chan waitAnswer {
	t.Helper()
	out := make(chan waitAnswer, 1)
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: "L", LeaseID: "waiter", TTL: 3000}
	go func() {
		res, err := r.q.wait(ctx, cmd, fsm.Result{Status: fsm.StatusHeld}, time.Hour)
		out <- waitAnswer{res, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for r.q.size() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never parked")
		}
		time.Sleep(time.Millisecond)
	}
	r.mu.Lock()
	r.held = false
	r.mu.Unlock()
	r.q.freed([]string{"L"})
	<-r.granted
	return out
}

func (r *waitRig) releases() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.applied {
		if c.Op == fsm.OpRelease {
			n++
		}
	}
	return n
}

// The wait ran out while the head's grant was in flight. The grant
// must stand and be the answer; the old code released it and still answered
// OK, so the caller held a lock that another client was granted next.
func TestWaitRunsOutDuringGrantAnswersTheGrant(t *testing.T) {
	r := newWaitRig(t)
	answer := r.parkAndGrant(t, context.Background())
	r.timer <- time.Now() // the wait runs out while the grant is in apply
	<-r.left
	close(r.finish)
	a := <-answer
	if a.err != nil || a.res.Status != fsm.StatusOK || a.res.Lock.Token != 7 {
		t.Fatalf("answer %+v, %v: want the grant (OK, token 7)", a.res, a.err)
	}
	if n := r.releases(); n != 0 {
		t.Fatalf("%d releases applied: the grant answered OK was released", n)
	}
	if n := r.q.size(); n != 0 {
		t.Fatalf("%d waiters left parked", n)
	}
}

// The request's context ended while its grant was in flight: the caller gets
// the context's error, never the grant (errors come before results
// everywhere: a zero Result with an error is no answer). The grant is not
// released: the caller may be retrying with the same lease id on another
// node, and a release racing that retry would free a lock it was just told
// it holds. It ends by the client's release or at its TTL.
func TestCancelledDuringGrantNeverAnswersOKNorReleases(t *testing.T) {
	r := newWaitRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	answer := r.parkAndGrant(t, ctx)
	cancel()
	<-r.left
	close(r.finish)
	a := <-answer
	if !errors.Is(a.err, context.Canceled) || a.res.Lock.Token != 0 {
		t.Fatalf("answer %+v, %v: want context.Canceled and no grant", a.res, a.err)
	}
	if n := r.releases(); n != 0 {
		t.Fatalf("%d releases applied: a release could free the lock under the same lease's retry", n)
	}
}

// A grant answered just as the context ends (whichever the select sees
// first) is never returned, and never released behind the caller's back.
func TestEndedContextNeverGetsTheGrant(t *testing.T) {
	for i := 0; i < 50; i++ {
		r := newWaitRig(t)
		r.held = false // the lock is free at parking: wait grants at once
		close(r.finish)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := r.q.wait(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "L", LeaseID: "waiter"}, fsm.Result{Status: fsm.StatusHeld}, time.Hour)
		if !errors.Is(err, context.Canceled) || res.Lock.Token != 0 {
			t.Fatalf("run %d: answer %+v, %v: want context.Canceled", i, res, err)
		}
		if n := r.releases(); n != 0 {
			t.Fatalf("run %d: %d releases applied, want none", i, n)
		}
	}
}

// scriptedQueue is a waitQueue whose apply answers from script, one call at
// a time, and whose holder the test sets; the wait's timer fires on a send.
type scriptedQueue struct {
	q     *waitQueue
	timer chan time.Time

	mu      sync.Mutex
	holder  fsm.Lock
	held    bool
	applied []fsm.Command
	script  func(call int, c fsm.Command) (fsm.Result, error)
}

func newScriptedQueue(script func(call int, c fsm.Command) (fsm.Result, error)) *scriptedQueue {
	s := &scriptedQueue{timer: make(chan time.Time), script: script}
	apply := func(c fsm.Command) (fsm.Result, error) {
		s.mu.Lock()
		s.applied = append(s.applied, c)
		call := len(s.applied)
		s.mu.Unlock()
		return s.script(call, c)
	}
	holder := func(string) (fsm.Lock, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.holder, s.held
	}
	s.q = newWaitQueue(apply, holder, 10, 10)
	s.q.after = func(time.Duration) <-chan time.Time { return s.timer }
	s.q.open()
	return s
}

func (s *scriptedQueue) setHolder(l fsm.Lock, held bool) {
	s.mu.Lock()
	s.holder, s.held = l, held
	s.mu.Unlock()
}

// park starts a wait for lease on L and returns once the queue holds want.
func (s *scriptedQueue) park(t *testing.T, lease string, want int) <-chan waitAnswer {
	t.Helper()
	out := make(chan waitAnswer, 1)
	go func() {
		res, err := s.q.wait(context.Background(), fsm.Command{Op: fsm.OpAcquire, Name: "L", LeaseID: lease}, fsm.Result{Status: fsm.StatusHeld}, time.Hour)
		out <- waitAnswer{res, err}
	}()
	waitFor(t, "the waiter to park", func() bool { return s.q.size() == want })
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func receive(t *testing.T, what string, ch <-chan waitAnswer) waitAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return waitAnswer{}
	}
}

// Review finding: leadership ended while the head's grant was in flight and
// the grant answered held (a lock-delay, say). The head was left parked on a
// node that no longer leads until its wait ran out (up to 300 s), and, were
// the node elected again, it still sat in the queue making every
// non-waiting acquire of the lock answer held.
func TestGrantAnsweredHeldAfterCloseSendsHeadToNewLeader(t *testing.T) {
	started, finish := make(chan struct{}), make(chan struct{})
	s := newScriptedQueue(func(int, fsm.Command) (fsm.Result, error) {
		close(started)
		<-finish
		return fsm.Result{Status: fsm.StatusHeld}, nil
	})
	out := s.park(t, "w", 1) // the lock looks free at parking: the grant starts at once
	<-started
	s.q.close(ErrLeaderChanged)
	close(finish)
	if a := receive(t, "head after close", out); !errors.Is(a.err, ErrLeaderChanged) {
		t.Fatalf("head answered %+v, %v; want ErrLeaderChanged so it re-enters on the new leader", a.res, a.err)
	}
	s.q.open()
	if s.q.queued("L") || s.q.size() != 0 {
		t.Fatalf("a waiter of the previous term is still queued (size %d)", s.q.size())
	}
}

// Review finding: the head's grant failed with an error that leaves the
// lock free (the apply queue was full). The rest of the queue stayed parked
// though the lock was free: no free event would come for them.
func TestGrantErrorServesTheNextWaiter(t *testing.T) {
	s := newScriptedQueue(func(call int, c fsm.Command) (fsm.Result, error) {
		if call == 1 {
			return fsm.Result{}, ErrOverloaded
		}
		return fsm.Result{Status: fsm.StatusOK, Lock: fsm.Lock{Name: c.Name, LeaseID: c.LeaseID, Token: 9}}, nil
	})
	s.setHolder(fsm.Lock{LeaseID: "A"}, true)
	w1 := s.park(t, "w1", 1)
	w2 := s.park(t, "w2", 2)
	s.setHolder(fsm.Lock{}, false)
	s.q.freed([]string{"L"})
	if a := receive(t, "w1", w1); !errors.Is(a.err, ErrOverloaded) {
		t.Fatalf("w1 answered %+v, %v; want ErrOverloaded", a.res, a.err)
	}
	if a := receive(t, "w2", w2); a.err != nil || a.res.Status != fsm.StatusOK || a.res.Lock.LeaseID != "w2" {
		t.Fatalf("w2 answered %+v, %v; want the grant", a.res, a.err)
	}
}

// Review finding: two parked acquires of one lease (a raw client that
// retried while its first attempt was parked). The first is granted; the
// second's wait then ran out and it was told the lock is held by its own
// lease, while the same acquire without wait_ms would answer 200.
func TestWaiterWhoseLeaseHoldsIsAnsweredAsTheHolder(t *testing.T) {
	s := newScriptedQueue(func(_ int, c fsm.Command) (fsm.Result, error) {
		return fsm.Result{Status: fsm.StatusOK, Lock: fsm.Lock{Name: c.Name, LeaseID: c.LeaseID, Token: 7}}, nil
	})
	s.setHolder(fsm.Lock{LeaseID: "A"}, true)
	first := s.park(t, "B", 1)
	second := s.park(t, "B", 2)
	s.setHolder(fsm.Lock{LeaseID: "B", Token: 7}, true)
	s.q.freed([]string{"L"}) // serve grants the head, then stops: the lock is taken
	if a := receive(t, "first", first); a.err != nil || a.res.Lock.Token != 7 {
		t.Fatalf("first answered %+v, %v; want the grant", a.res, a.err)
	}
	s.timer <- time.Now() // the second attempt's wait runs out
	a := receive(t, "second", second)
	if a.err != nil || a.res.Status != fsm.StatusOK || a.res.Lock.Token != 7 {
		t.Fatalf("second attempt of the holding lease answered %+v, %v; want OK with token 7", a.res, a.err)
	}
}

// A writer parked behind two shared holders is served when the second
// leaves while the serve started by the first one's leaving is deciding
// (it read holders [B], then B's release was applied and its free event
// came while the serve held lq.granting). Before, that event was dropped,
// the serve found the head not grantable and returned: the lock was free,
// the writer parked until its wait_ms ran out, and every acquire that does
// not wait was refused held (queued) with no holder at all.
func TestWriterServedWhenLastReaderLeavesDuringDecision(t *testing.T) {
	m := fsm.New()
	var mu sync.Mutex
	var index uint64
	var q *waitQueue
	apply := func(c fsm.Command) (fsm.Result, error) {
		mu.Lock()
		index++
		c.Version, c.StampTerm = fsm.MaxCommandVersion, 1
		r := m.ApplyCommand(index, 1, c)
		mu.Unlock()
		q.freed(r.Freed) // as Node.onApplied, on the FSM goroutine, before the proposer hears back
		return r, nil
	}
	q = newNodeWaiters(apply, m, 10, 10)
	timer := make(chan time.Time)
	q.after = func(time.Duration) <-chan time.Time { return timer }
	q.open()

	reader := func(id string) fsm.Command {
		return fsm.Command{Op: fsm.OpAcquire, Name: "x", Owner: id, LeaseID: id, TTL: 60_000, Mode: fsm.ModeShared}
	}
	for _, id := range []string{"reader-A", "reader-B"} {
		if r, _ := apply(reader(id)); r.Status != fsm.StatusOK {
			t.Fatalf("%s: %v", id, r.Status)
		}
	}
	writer := fsm.Command{Op: fsm.OpAcquire, Name: "x", Owner: "writer", LeaseID: "writer", TTL: 60_000}
	held, _ := apply(writer)
	if held.Status != fsm.StatusHeld {
		t.Fatalf("writer: %v, want held", held.Status)
	}
	// The interleaving: reader A's release starts a serve; it reads the
	// holders ([B]: the writer cannot be granted yet) and just then reader
	// B's release is applied. (Installed before the writer parks: it
	// fires only once a single reader is left.)
	var fired atomic.Bool
	orig := q.grantable
	q.grantable = func(c fsm.Command) bool {
		g := orig(c)
		if c.LeaseID == "writer" && len(m.Holders("x")) == 1 && fired.CompareAndSwap(false, true) {
			apply(fsm.Command{Op: fsm.OpRelease, Name: "x", LeaseID: "reader-B"})
		}
		return g
	}
	answer := make(chan waitResult, 1)
	go func() {
		r, err := q.wait(context.Background(), writer, held, time.Hour)
		answer <- waitResult{r, err}
	}()
	for q.size() != 1 {
		time.Sleep(time.Millisecond)
	}

	apply(fsm.Command{Op: fsm.OpRelease, Name: "x", LeaseID: "reader-A"})

	select {
	case a := <-answer:
		if a.err != nil || a.r.Status != fsm.StatusOK {
			t.Fatalf("writer answered %+v, %v; want the grant", a.r, a.err)
		}
		return // served: no bug
	case <-time.After(3 * time.Second):
	}
	if !fired.Load() {
		t.Fatal("the interleaving did not happen")
	}
	free := len(m.Holders("x")) == 0
	queued := q.queued("x")
	timer <- time.Now() // the writer's wait_ms runs out
	a := <-answer
	t.Fatalf("lock free: %v, writer still parked (non-waiting acquires refused as queued: %v) for 3 s; at the end of its wait it got %v (holder token %d), not the free lock",
		free, queued, a.r.Status, a.r.Holder.Token)
}

// A semaphore waiter whose wait runs out while nobody holds a permit (its
// free event was missed, as a restore missed it) is answered by the log,
// here with the grant, never full with no holder: a full answer lists who
// holds the permits.
func TestSemaphoreWaitEndingOnAFreeSemaphoreIsAnsweredByTheLog(t *testing.T) {
	m := fsm.New()
	var index uint64
	apply := func(c fsm.Command) (fsm.Result, error) {
		index++
		c.Version, c.StampTerm = fsm.MaxCommandVersion, 1
		return m.ApplyCommand(index, 1, c), nil
	}
	q := newNodeWaiters(apply, m, 10, 10)
	timer := make(chan time.Time)
	q.sems.after = func(time.Duration) <-chan time.Time { return timer }
	q.open()
	permit := func(id string) fsm.Command {
		return fsm.Command{Op: fsm.OpSemAcquire, Name: "pool", Limit: 1, Owner: id, LeaseID: id, TTL: 60_000}
	}
	if r, _ := apply(permit("h1")); r.Status != fsm.StatusOK {
		t.Fatal(r.Status)
	}
	full, _ := apply(permit("w1"))
	if full.Status != fsm.StatusFull {
		t.Fatalf("w1: %v, want full", full.Status)
	}
	answer := make(chan waitResult, 1)
	go func() {
		r, err := q.sems.wait(context.Background(), permit("w1"), full, time.Hour)
		answer <- waitResult{r, err}
	}()
	for q.size() != 1 {
		time.Sleep(time.Millisecond)
	}
	// The permit frees with no free event reaching the queue.
	if r, _ := apply(fsm.Command{Op: fsm.OpSemRelease, Name: "pool", LeaseID: "h1"}); r.Status != fsm.StatusOK {
		t.Fatal(r.Status)
	}
	timer <- time.Now() // the wait runs out
	a := <-answer
	if a.err != nil || a.r.Status != fsm.StatusOK || a.r.Lock.LeaseID != "w1" {
		t.Fatalf("wait ended on a free semaphore: %v %v (%d holders), want the grant", a.r.Status, a.err, len(a.r.Holders))
	}
}
