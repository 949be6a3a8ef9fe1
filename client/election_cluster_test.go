package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// Two RunElection candidates on a real cluster: one leads at a time, the
// other leads once the first steps down, and a follower's OnNewLeader sees
// each leader in turn.
func TestClusterRunElectionOneLeaderAtATime(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	var leading, overlaps atomic.Int32
	type cand struct {
		cancel  context.CancelFunc
		started chan struct{}
		done    chan error
	}
	run := func(owner string) *cand {
		cctx, cancel := context.WithCancel(ctx)
		k := &cand{cancel: cancel, started: make(chan struct{}), done: make(chan error, 1)}
		go func() {
			k.done <- RunElection(cctx, c, "svc/leader", "", Callbacks{
				OnStartedLeading: func(ctx context.Context) {
					if leading.Add(1) > 1 {
						overlaps.Add(1)
					}
					close(k.started)
					<-ctx.Done()
					leading.Add(-1)
				},
			}, ElectionOptions{TTL: 5 * time.Second, Owner: owner})
		}()
		return k
	}
	a := run("a")
	<-a.started
	b := run("b")
	st, err := NewElection(c, "svc/leader", ElectionOptions{}).Leader(ctx)
	if err != nil || st.Owner != "a" {
		t.Fatalf("leader %+v, %v; want a", st, err)
	}
	select {
	case <-b.started:
		t.Fatal("b leads while a does")
	default:
	}
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("a: %v", err)
	}
	select {
	case <-b.started:
	case <-time.After(15 * time.Second):
		t.Fatal("b did not lead after a stepped down")
	}
	if st, err := NewElection(c, "svc/leader", ElectionOptions{}).Leader(ctx); err != nil || st.Owner != "b" {
		t.Fatalf("leader %+v, %v; want b", st, err)
	}
	b.cancel()
	if err := <-b.done; err != nil {
		t.Fatalf("b: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d times two candidates led at once", n)
	}
}
