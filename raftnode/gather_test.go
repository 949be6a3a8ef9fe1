package raftnode_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
)

// The calls of a gathering are answered as they would be alone: grants
// with tokens of their own, a refusal decided without an entry (the call
// leaves for its leadership round), an outcome of the log, and a call that
// never reaches the node, all at once, and none waits on another for ever.
func TestGatheredCallsAnswerAsAlone(t *testing.T) {
	cl := testenv.Start(t, 3)
	leader := cl.Leader()
	ctx := testenv.Context(t, 30*time.Second)
	const lease = "gather-holder-0123456789abcdef"
	if r, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "g/held", Owner: "h", LeaseID: lease, TTL: 60_000}); err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("hold g/held: %v %v", r.Status, err)
	}
	for round := range 20 {
		const grants = 6
		ctxs, done := leader.Gather(ctx, grants+3)
		results := make([]fsm.Result, grants+3)
		errs := make([]error, grants+3)
		var wg sync.WaitGroup
		call := func(i int, f func(context.Context) (fsm.Result, error)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = f(ctxs[i])
				done(i)
			}()
		}
		for i := range grants {
			call(i, func(ctx context.Context) (fsm.Result, error) {
				return leader.Acquire(ctx, fsm.Command{Op: fsm.OpAcquire, Name: fmt.Sprintf("g/%d/%d", round, i), Owner: "w",
					LeaseID: fmt.Sprintf("gather-%03d-%03d-0123456789", round, i), TTL: 60_000}, 0)
			})
		}
		call(grants, func(ctx context.Context) (fsm.Result, error) { // refused by this leader, no entry
			return leader.Acquire(ctx, fsm.Command{Op: fsm.OpAcquire, Name: "g/held", Owner: "o", LeaseID: "gather-other-0123456789abcdef", TTL: 60_000}, 0)
		})
		call(grants+1, func(ctx context.Context) (fsm.Result, error) { // an entry whose answer is a refusal
			return leader.Apply(ctx, fsm.Command{Op: fsm.OpRelease, Name: "g/free", LeaseID: "gather-none-0123456789abcdef"})
		})
		call(grants+2, func(context.Context) (fsm.Result, error) { // answered before the node: a bad request, a forward
			return fsm.Result{Status: fsm.StatusInvalid}, nil
		})
		wg.Wait()
		tokens := map[uint64]bool{}
		for i := range grants {
			if errs[i] != nil || results[i].Status != fsm.StatusOK {
				t.Fatalf("round %d: acquire %d: %v %v", round, i, results[i].Status, errs[i])
			}
			if want := fmt.Sprintf("g/%d/%d", round, i); results[i].Lock.Name != want {
				t.Fatalf("round %d: acquire %d was answered for %q, want %q", round, i, results[i].Lock.Name, want)
			}
			if tok := results[i].Lock.Token; tok == 0 || tokens[tok] {
				t.Fatalf("round %d: acquire %d: token %d is zero or another grant's", round, i, tok)
			}
			tokens[results[i].Lock.Token] = true
		}
		if errs[grants] != nil || results[grants].Status != fsm.StatusHeld || results[grants].Holder.LeaseID != lease {
			t.Fatalf("round %d: acquire of a held lock: %v %+v %v", round, results[grants].Status, results[grants].Holder, errs[grants])
		}
		if errs[grants+1] != nil || results[grants+1].Status != fsm.StatusNotHolder {
			t.Fatalf("round %d: release of a free lock: %v %v", round, results[grants+1].Status, errs[grants+1])
		}
	}
	// Every replica holds every grant.
	cl.WaitApplied(leader.Machine().Clock().Index)
	for _, n := range cl.Nodes {
		if got := n.Machine().HeldCount(); got != 20*6+1 {
			t.Fatalf("%s holds %d leases, want %d", n.ID, got, 20*6+1)
		}
	}
}
