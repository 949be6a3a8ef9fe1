package client

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// Waiters parked on a leader that loses leadership get 503 and the client
// re-enters the wait on the new leader with the same lease id: every waiter
// is granted exactly once, with tokens increasing in grant order. (Mutual
// exclusion itself is the checker's and the FSM tests' business.)
func TestClusterWaitersSurviveLeaderChange(t *testing.T) {
	cl := testenv.Start(t, 3)
	c := newClusterClient(t, cl.Endpoints())
	ctx := testenv.Context(t, 60*time.Second)
	holder, err := c.TryAcquire(ctx, "queue", AcquireOptions{TTL: 30 * time.Second, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}

	const n = 5
	type grant struct {
		who   int
		token uint64
		lease string
	}
	var mu sync.Mutex
	var grants []grant
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			lease, err := c.Acquire(ctx, "queue", AcquireOptions{TTL: 30 * time.Second, Owner: fmt.Sprint("waiter-", i)})
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			mu.Lock()
			grants = append(grants, grant{i, lease.Token(), lease.LeaseID()})
			mu.Unlock()
			errs <- lease.Release(ctx)
		}(i)
	}
	old := cl.Leader()
	testenv.WaitFor(t, 10*time.Second, "all waiters parked", func() bool { return old.Waiters() == n })

	to, err := c.TransferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	leader := cl.WaitForNewLeader(old)
	if to != leader.ID {
		t.Fatalf("transfer reported %q as the new leader, the cluster says %s", to, leader.ID)
	}
	testenv.WaitFor(t, 10*time.Second, "waiters to re-park on the new leader", func() bool { return leader.Waiters() == n })
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("release holder: %v", err)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(grants) != n {
		t.Fatalf("%d grants, want %d", len(grants), n)
	}
	seen := map[int]bool{}
	leases := map[string]bool{}
	for i, g := range grants {
		if seen[g.who] || leases[g.lease] {
			t.Fatalf("waiter %d granted twice: %+v", g.who, grants)
		}
		seen[g.who], leases[g.lease] = true, true
		if i > 0 && g.token <= grants[i-1].token {
			t.Fatalf("tokens not increasing in grant order: %+v", grants)
		}
		if g.token <= holder.Token() {
			t.Fatalf("waiter token %d not above the holder's %d", g.token, holder.Token())
		}
	}
}
