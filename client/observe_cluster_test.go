package client

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// A watch, linearizable or stale, survives the loss of the leader's node:
// it resumes on the new leader (or any node) from the last index it
// delivered, reports the release that follows, and never goes back.
func TestClusterObserveSurvivesLeaderLoss(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watches := map[string]<-chan LockState{
		"linearizable": c.Observe(wctx, "svc", ObserveOptions{Wait: 5 * time.Second}),
		"stale":        c.Observe(wctx, "svc", ObserveOptions{Stale: true, Wait: 5 * time.Second}),
	}
	for kind, ch := range watches {
		if s := next(t, ch); s.Held {
			t.Fatalf("%s: first state %+v, want free", kind, s)
		}
	}
	lease, err := c.TryAcquire(ctx, "svc", AcquireOptions{TTL: 30 * time.Second, Owner: "one"})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]LockState{}
	for kind, ch := range watches {
		s := next(t, ch)
		if !s.Held || s.Token != lease.Token() || s.Index < lease.Token() {
			t.Fatalf("%s: after acquire %+v, want held with token %d", kind, s, lease.Token())
		}
		held[kind] = s
	}
	old := cl.Leader()
	old.Kill()
	cl.WaitForNewLeader(old)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release after the leader's loss: %v", err)
	}
	for kind, ch := range watches {
		// A renew that changed nothing visible may wake the watch first:
		// skip states that still show the lease, but never an older one.
		for {
			s := next(t, ch)
			if s.Index < held[kind].Index {
				t.Fatalf("%s: went back from index %d to %+v", kind, held[kind].Index, s)
			}
			if !s.Held {
				break
			}
			if s.Token != lease.Token() {
				t.Fatalf("%s: unexpected holder %+v", kind, s)
			}
		}
	}
}
