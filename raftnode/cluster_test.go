package raftnode_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// call sends one JSON request and decodes the answer into a map.
func call(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func acquire(t *testing.T, node *testenv.Node, name, owner, lease string, ttlMs int) (int, map[string]any) {
	t.Helper()
	return call(t, "POST", node.URL()+"/v1/locks/acquire", map[string]any{"name": name, "owner": owner, "lease_id": lease, "ttl_ms": ttlMs})
}

func token(t *testing.T, body map[string]any) uint64 {
	t.Helper()
	f, ok := body["fencing_token"].(float64)
	if !ok {
		t.Fatalf("no fencing_token in %v", body)
	}
	return uint64(f)
}

const (
	leaseA = "lease-a-0123456789abcdef"
	leaseB = "lease-b-0123456789abcdef"
)

// A lock taken through a follower survives a
// kill -9 of the leader with its holder and token.
func TestLockSurvivesLeaderKill(t *testing.T) {
	c := testenv.Start(t, 3)
	followers := c.Followers()

	status, body := acquire(t, followers[0], "orders/89041", "worker-a", leaseA, 60000)
	if status != 200 {
		t.Fatalf("acquire through follower: %d %v", status, body)
	}
	tok := token(t, body)

	status, body = acquire(t, followers[1], "orders/89041", "worker-b", leaseB, 60000)
	holder, _ := body["holder"].(map[string]any)
	if status != 409 || body["error"] != "held" || holder["owner"] != "worker-a" || uint64(holder["fencing_token"].(float64)) != tok {
		t.Fatalf("conflicting acquire: %d %v", status, body)
	}
	status, body = call(t, "POST", followers[1].URL()+"/v1/locks/renew", map[string]any{"name": "orders/89041", "lease_id": leaseA})
	if status != 200 || token(t, body) != tok {
		t.Fatalf("renew: %d %v", status, body)
	}

	old := c.Leader()
	old.Kill()
	leader := c.WaitForNewLeader(old)
	status, body = call(t, "GET", leader.URL()+"/v1/locks/"+url.PathEscape("orders/89041"), nil)
	if status != 200 || body["held"] != true || body["owner"] != "worker-a" || token(t, body) != tok {
		t.Fatalf("after failover: %d %v", status, body)
	}
	if _, ok := body["lease_id"]; ok {
		t.Fatal("a read showed the lease_id")
	}

	other := c.Followers()[0]
	if status, body = call(t, "POST", other.URL()+"/v1/locks/release", map[string]any{"name": "orders/89041", "lease_id": leaseB}); status != 409 || body["error"] != "not_holder" {
		t.Fatalf("release by non-holder: %d %v", status, body)
	}
	if status, body = call(t, "POST", other.URL()+"/v1/locks/release", map[string]any{"name": "orders/89041", "lease_id": leaseA}); status != 200 || body["released"] != true {
		t.Fatalf("release: %d %v", status, body)
	}
	status, body = acquire(t, other, "orders/89041", "worker-b", leaseB, 60000)
	if status != 200 || token(t, body) <= tok {
		t.Fatalf("re-acquire after release: %d %v (old token %d)", status, body, tok)
	}
	c.EnsureSame(t)
}

func TestIdempotentAcquireReturnsSameToken(t *testing.T) {
	c := testenv.Start(t, 3)
	f := c.Followers()[0]
	_, first := acquire(t, f, "jobs/1", "w", leaseA, 5000)
	status, again := acquire(t, c.Leader(), "jobs/1", "w", leaseA, 5000)
	if status != 200 || token(t, again) != token(t, first) || again["lease_id"] != leaseA {
		t.Fatalf("retried acquire: %d %v, first %v", status, again, first)
	}
}

func TestRestartedNodeCatchesUp(t *testing.T) {
	c := testenv.Start(t, 3)
	lagging := c.Followers()[0]
	lagging.Kill()
	leader := c.Leader()
	for i := 0; i < 20; i++ {
		if status, body := acquire(t, leader, "restart/"+strconv.Itoa(i), "w", leaseA, 60000); status != 200 {
			t.Fatalf("acquire %d: %d %v", i, status, body)
		}
	}
	lagging.Restart()
	c.WaitApplied(leader.Raft().LastIndex())
	status, body := call(t, "GET", lagging.URL()+"/v1/locks?stale=true&prefix=restart/", nil)
	if locks, _ := body["locks"].([]any); status != 200 || len(locks) != 20 {
		t.Fatalf("restarted node sees %d locks (%d)", len(locks), status)
	}
	c.EnsureSame(t)
}

func TestLaggingNodeCatchesUpBySnapshot(t *testing.T) {
	c := testenv.Start(t, 3, testenv.Options{SnapshotThreshold: 32, TrailingLogs: 8})
	lagging := c.Followers()[0]
	lagging.Kill()
	leader := c.Leader()
	for i := 0; i < 100; i++ {
		if status, body := acquire(t, leader, "snap/"+strconv.Itoa(i), "w", leaseA, 60000); status != 200 {
			t.Fatalf("acquire %d: %d %v", i, status, body)
		}
	}
	if err := leader.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	lagging.Restart()
	c.WaitApplied(leader.Raft().LastIndex())
	if got := lagging.Raft().Stats()["last_snapshot_index"]; got == "0" {
		t.Fatal("the lagging node caught up without installing a snapshot")
	}
	if lagging.Machine().HeldCount() != 100 {
		t.Fatalf("lagging node holds %d locks, want 100", lagging.Machine().HeldCount())
	}
	c.EnsureSame(t)
}

func held(n *testenv.Node, name string) bool {
	_, ok := n.Machine().Get(name)
	return ok
}

// contend tries to take name with leaseB through node. The leader decides
// at the manual clock's current reading: a refusal from its own clock, a
// grant through an entry stamped now, so the answer shows exactly what the
// log decides at that moment, whatever the tick loop does.
func contend(t *testing.T, node *testenv.Node, name string) int {
	t.Helper()
	status, _ := acquire(t, node, name, "b", leaseB, 1000)
	return status
}

func TestLeaseExpiresAtTTLAndNotBefore(t *testing.T) {
	clock := &testenv.ManualClock{}
	c := testenv.Start(t, 3, testenv.Options{Clock: clock})
	leader := c.Leader()
	if status, body := acquire(t, leader, "exp", "a", leaseA, 1000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	clock.Advance(999 * time.Millisecond)
	if got := contend(t, leader, "exp"); got != 409 {
		t.Fatalf("999ms into a 1000ms lease: acquire by another lease got %d, want 409", got)
	}
	clock.Advance(time.Millisecond)
	if got := contend(t, leader, "exp"); got != 200 {
		t.Fatalf("at the deadline: acquire by another lease got %d, want 200", got)
	}

	// With no traffic at all, the leader's ticks expire leases on time.
	// Polling nudges the clock so a timer armed just after an Advance fires.
	clock.Advance(time.Second)
	testenv.WaitFor(t, 10*time.Second, "expiry by tick on every node", func() bool {
		clock.Advance(time.Millisecond)
		for _, n := range c.Nodes {
			if held(n, "exp") {
				return false
			}
		}
		return true
	})
	c.EnsureSame(t)
}

// A failover neither restarts the TTL nor shortens it: what the old leader
// measured still counts, and the election (during which no manual time
// passes here) adds nothing.
func TestLeaderChangeNeitherRestartsNorShortensTTL(t *testing.T) {
	clock := &testenv.ManualClock{}
	c := testenv.Start(t, 3, testenv.Options{Clock: clock})
	old := c.Leader()
	if status, body := acquire(t, old, "failover", "a", leaseA, 1000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	clock.Advance(600 * time.Millisecond)
	// A grant of another lock puts an entry stamped 600ms into the log.
	if status, body := acquire(t, old, "probe", "b", leaseB, 60000); status != 200 {
		t.Fatalf("probe: %d %v", status, body)
	}
	if got := contend(t, old, "failover"); got != 409 {
		t.Fatalf("600ms in: %d", got)
	}

	old.Kill()
	leader := c.WaitForNewLeader(old)
	testenv.WaitFor(t, 10*time.Second, "the new leader's first tick", func() bool {
		return leader.Machine().Clock().Term == leader.Raft().CurrentTerm()
	})
	clock.Advance(399 * time.Millisecond)
	if got := contend(t, leader, "failover"); got != 409 {
		t.Fatalf("999ms in, after failover: %d, want 409 (failover shortened the lease)", got)
	}
	clock.Advance(time.Millisecond)
	if got := contend(t, leader, "failover"); got != 200 {
		t.Fatalf("1000ms in, after failover: %d, want 200 (failover restarted the TTL)", got)
	}
}

// With no traffic at all, a failover still lengthens a lease by at most
// TickInterval beyond the time the cluster had no leader: while deadlines
// run, the leader stamps the FSM clock at least every TickInterval, and a
// new leader counts on from the last stamp. (A leader that wrote a tick only
// once a deadline fell due left the FSM clock at the acquire, and the new
// leader restarted the lease.) No manual time passes during the election
// here, so the lock must be free at exactly TTL + TickInterval.
func TestLeaderChangeWithNoTrafficLengthensLeaseByAtMostTickInterval(t *testing.T) {
	const tick = 50 * time.Millisecond // testenv's TickInterval
	clock := &testenv.ManualClock{}
	c := testenv.Start(t, 3, testenv.Options{Clock: clock})
	old := c.Leader()
	// Followers announce their HTTP addresses through the leader: let those
	// entries land first, so that nothing but the leader loop writes below.
	testenv.WaitFor(t, 10*time.Second, "every member's HTTP address", func() bool {
		for _, n := range c.Nodes {
			if addr, _ := old.Machine().NodeAddr(n.ID); addr == "" {
				return false
			}
		}
		return true
	})
	if status, body := acquire(t, old, "idle", "a", leaseA, 1000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	acquiredAt := clock.Now()
	deadline := old.Machine().Holders("idle")[0].Deadline // FSM time: the acquire's stamp + 1 s
	clock.Advance(600 * time.Millisecond)
	// The leader loop's wake-up is due: within TickInterval of the leader's
	// clock, its FSM clock moves although no deadline is near.
	testenv.WaitFor(t, 10*time.Second, "a tick 600 ms after the acquire", func() bool {
		return old.Machine().Clock().Now >= deadline-int64(400*time.Millisecond+tick)
	})
	c.WaitApplied(old.Raft().LastIndex())

	old.Kill()
	leader := c.WaitForNewLeader(old)
	testenv.WaitFor(t, 10*time.Second, "the new leader's first tick", func() bool {
		return leader.Machine().Clock().Term == leader.Raft().CurrentTerm()
	})
	clock.Advance(time.Duration(acquiredAt + int64(time.Second+tick) - clock.Now()))
	if got := contend(t, leader, "idle"); got != 200 {
		t.Fatalf("TTL + TickInterval after the acquire, after a failover with no traffic: %d, want 200 (the failover lengthened the lease by more than TickInterval)", got)
	}
}

func TestNoLeaderWhenQuorumLost(t *testing.T) {
	c := testenv.Start(t, 3)
	survivor := c.Followers()[0]
	for _, n := range c.Nodes {
		if n != survivor {
			n.Kill()
		}
	}
	req, _ := http.NewRequest("POST", survivor.URL()+"/v1/locks/acquire", bytes.NewReader([]byte(`{"name":"q","ttl_ms":1000}`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 503 || body["error"] != "no_leader" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("without quorum: %d %v Retry-After=%q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if survivor.Machine().HeldCount() != 0 {
		t.Fatal("a write without quorum changed the state")
	}
}

func TestJoinLeaveAndTransfer(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	status, body := acquire(t, leader, "members", "w", leaseA, 60000)
	if status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	tok := token(t, body)

	n4 := c.AddNode(c.Followers()[0].URL())
	testenv.WaitFor(t, 15*time.Second, "n4 to join, learn the lock and be promoted to voter", func() bool {
		st, _ := leader.Status()
		voter := false
		for _, m := range st.Nodes {
			voter = voter || m.ID == n4.ID && m.Voter
		}
		return voter && held(n4, "members") && n4.Raft().AppliedIndex() >= leader.Raft().CommitIndex()
	})
	status, body = call(t, "GET", n4.URL()+"/v1/cluster", nil)
	if nodes, _ := body["nodes"].([]any); status != 200 || len(nodes) != 4 {
		t.Fatalf("cluster after join: %d %v", status, body)
	}

	if status, body = call(t, "POST", n4.URL()+"/v1/cluster/transfer-leadership", map[string]any{"id": "n4"}); status != 200 {
		t.Fatalf("transfer: %d %v", status, body)
	}
	if got := c.WaitForNewLeader(leader); got != n4 {
		t.Fatalf("leader is %s, want n4", got.ID)
	}
	if status, body = call(t, "POST", n4.URL()+"/v1/cluster/leave", map[string]any{"id": leader.ID}); status != 200 {
		t.Fatalf("leave: %d %v", status, body)
	}
	leader.Kill()
	status, body = call(t, "GET", n4.URL()+"/v1/locks/members", nil)
	if status != 200 || token(t, body) != tok {
		t.Fatalf("lock after membership changes: %d %v", status, body)
	}
	if status, body = call(t, "POST", n4.URL()+"/v1/cluster/leave", map[string]any{"id": "nope"}); status != 404 {
		t.Fatalf("leave of unknown node: %d %v", status, body)
	}
}

// metricValue scrapes node's /metrics and returns the sample named exactly
// by series (name with labels), or -1 when absent.
func metricValue(t *testing.T, node *testenv.Node, series string) float64 {
	t.Helper()
	resp, err := http.Get(node.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func TestMetricsMoveUnderWorkload(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	follower := c.Followers()[0]
	series := []string{
		`raftlock_commands_applied_total{op="acquire",outcome="ok"}`,
		`raftlock_commands_applied_total{op="release",outcome="ok"}`,
		`raftlock_http_requests_total{code="200",method="POST",route="/v1/locks/acquire"}`,
	}
	for i := 0; i < 5; i++ {
		lease := fmt.Sprintf("metrics-lease-%04d-abcdef", i)
		acquire(t, follower, "m/"+strconv.Itoa(i), "w", lease, 60000)
		call(t, "POST", follower.URL()+"/v1/locks/release", map[string]any{"name": "m/" + strconv.Itoa(i), "lease_id": lease})
	}
	acquire(t, follower, "m/held", "w", leaseA, 60000)
	c.WaitApplied(leader.Raft().LastIndex())
	for _, s := range series {
		if v := metricValue(t, leader, s); v < 5 {
			t.Errorf("leader %s = %v, want >= 5", s, v)
		}
	}
	if v := metricValue(t, follower, `raftlock_http_forwarded_total{route="/v1/locks/acquire"}`); v < 6 {
		t.Errorf("follower forwarded %v acquires, want 6", v)
	}
	if v := metricValue(t, leader, "raftlock_leases_held"); v != 1 {
		t.Errorf("leases held %v, want 1", v)
	}
	if v := metricValue(t, leader, "raftlock_is_leader"); v != 1 {
		t.Errorf("leader's raftlock_is_leader = %v", v)
	}
	applied := float64(leader.Raft().AppliedIndex())
	testenv.WaitFor(t, 10*time.Second, "the follower's applied-index gauge to catch up", func() bool {
		return metricValue(t, follower, "raftlock_raft_applied_index") >= applied
	})
}

// A restarted node is not ready before it has applied what it held when it
// went down: readiness must never expose state older than it served before.
func TestRestartedNodeNotReadyBeforeCatchingUp(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	if status, body := acquire(t, leader, "ready/1", "w", leaseA, 60000); status != 200 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	node := c.Followers()[0]
	c.WaitApplied(leader.Raft().LastIndex())
	node.Kill()
	node.Restart()
	testenv.WaitFor(t, 15*time.Second, "the restarted node to be ready", func() bool {
		if !node.Ready() {
			return false
		}
		if !held(node, "ready/1") {
			t.Fatal("ready before it had applied the lock it held before the restart")
		}
		return true
	})
}
