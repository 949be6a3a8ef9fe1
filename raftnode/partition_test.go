package raftnode_test

import (
	"net/url"
	"testing"

	"github.com/raftlock/raftlock/internal/testenv"
)

// A leader cut off from the majority cannot renew a lease: a renew sent to
// it fails (it can commit nothing and steps down), the majority elects a new
// leader that serves the lock with the same holder and token and renews it,
// and once the partition heals every node holds the same state (the
// minority's uncommitted renew left no trace).
func TestPartitionedLeaderCannotRenew(t *testing.T) {
	c := testenv.Start(t, 3)
	old := c.Leader()
	status, body := acquire(t, old, "part/1", "worker-a", leaseA, 60000)
	if status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	tok := token(t, body)

	c.Partition(old)
	renew := map[string]any{"name": "part/1", "lease_id": leaseA}
	if status, body = call(t, "POST", old.URL()+"/v1/locks/renew", renew); status == 200 {
		t.Fatalf("renew through the cut-off leader succeeded: %v", body)
	}
	t.Logf("renew through the cut-off leader: %d %v", status, body)

	leader := c.WaitForNewLeader(old)
	if old.IsLeader() {
		t.Fatal("the cut-off leader still claims to lead")
	}
	status, body = call(t, "GET", leader.URL()+"/v1/locks/"+url.PathEscape("part/1"), nil)
	if status != 200 || body["held"] != true || body["owner"] != "worker-a" || token(t, body) != tok {
		t.Fatalf("lock on the new leader: %d %v", status, body)
	}
	if status, body = acquire(t, leader, "part/1", "worker-b", leaseB, 60000); status != 409 {
		t.Fatalf("contender through the new leader: %d %v", status, body)
	}
	if status, body = call(t, "POST", leader.URL()+"/v1/locks/renew", renew); status != 200 || token(t, body) != tok {
		t.Fatalf("renew through the new leader: %d %v", status, body)
	}

	c.Heal()
	if got := c.Leader(); got == old {
		t.Logf("the healed node %s leads again", old.ID)
	}
	c.EnsureSame(t)
}
