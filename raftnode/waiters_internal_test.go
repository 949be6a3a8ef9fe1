package raftnode

import (
	"context"
	"errors"
	"sync"
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

// Issue 12: the wait ran out while the head's grant was in flight. The grant
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
