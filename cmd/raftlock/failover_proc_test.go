package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// A leader change must not restart leases. Three real nodes; a lock, a
// session holding a lock, and a semaphore permit, each with a 60 s TTL and
// never renewed; the leader is killed with SIGKILL 10 s in. Each must end no
// earlier than its send + TTL (the lease promise) and no later than send +
// TTL + the leaderless gap + TickInterval + 0.5 s (the leader loop keeps
// the FSM clock within TickInterval of real time while deadlines run, and
// a new leader counts from the last stamp). With ticks written only when a
// deadline falls due, the new leader counted from the acquire itself and
// every lease ended about 10 s late.
func TestLeasesEndOnTimeAfterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 s lease across a leader kill: real processes, about 70 s")
	}
	t.Parallel()
	const (
		ttl      = 60 * time.Second
		killAt   = 10 * time.Second
		tick     = 250 * time.Millisecond // --tick-interval's default
		slack    = 500 * time.Millisecond
		deadline = 2 * time.Minute
	)
	c := testenv.StartProcs(t, procs.Options{})
	httpc := &http.Client{Timeout: 2 * time.Second}
	call := func(method, base, path string, body any) (int, map[string]any) {
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	// write sends body until it is answered 200, retrying transient answers
	// with the same ids, and returns the send time of the earliest attempt
	// that may have been applied (the lease promise counts from it): a 503
	// or 429 applied nothing, a timeout may have.
	write := func(base, path string, body map[string]any) (time.Time, map[string]any) {
		t.Helper()
		var first time.Time
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			sent := time.Now()
			if first.IsZero() {
				first = sent
			}
			switch code, out := call(http.MethodPost, base, path, body); code {
			case http.StatusOK:
				return first, out
			case http.StatusServiceUnavailable, http.StatusTooManyRequests:
				first = time.Time{}
			case 0:
			default:
				t.Fatalf("%s %v: %d %v", path, body, code, out)
			}
		}
		t.Fatalf("%s %v: no 200 within 20 s", path, body)
		return first, nil
	}

	leader := waitProcLeader(t, c, nil)
	base := leader.URL()
	lockSent, _ := write(base, "/v1/locks/acquire", map[string]any{
		"name": "failover/lock", "owner": "gone", "ttl_ms": ttl.Milliseconds(), "lease_id": "failover-lock-lease-0001"})
	sessSent, _ := write(base, "/v1/sessions", map[string]any{
		"owner": "gone", "ttl_ms": ttl.Milliseconds(), "session_id": "failover-session-0001"})
	t.Logf("sent: lock at 0, session at %v", sessSent.Sub(lockSent))
	write(base, "/v1/locks/acquire", map[string]any{
		"name": "failover/session-lock", "owner": "gone", "session_id": "failover-session-0001", "lease_id": "failover-sess-lease-0001"})
	permSent, _ := write(base, "/v1/semaphores/acquire", map[string]any{
		"name": "failover/sem", "limit": 2, "owner": "gone", "ttl_ms": ttl.Milliseconds(), "lease_id": "failover-permit-lease-1"})

	time.Sleep(time.Until(lockSent.Add(killAt))) // the scenario's schedule, not a wait for a condition
	if code, out := call(http.MethodGet, base, "/v1/locks/failover%2Flock", nil); code == http.StatusOK {
		t.Logf("before the kill: %v", out)
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	newLeader := waitProcLeader(t, c, leader)
	gap := time.Since(killed) // an upper bound on the leaderless gap: polled from outside
	t.Logf("leader %s killed; %s leads after %v", leader.ID, newLeader.ID, gap)
	if code, out := call(http.MethodGet, newLeader.URL(), "/v1/locks/failover%2Flock", nil); code == http.StatusOK {
		t.Logf("on the new leader: %v", out)
	}

	type lease struct {
		what string
		sent time.Time
		path string
		free func(code int, body map[string]any) bool
	}
	leases := []lease{
		{"lock", lockSent, "/v1/locks/failover%2Flock", func(code int, b map[string]any) bool { return code == 200 && b["held"] == false }},
		{"session", sessSent, "/v1/locks/failover%2Fsession-lock", func(code int, b map[string]any) bool { return code == 200 && b["held"] == false }},
		{"session itself", sessSent, "/v1/sessions/failover-session-0001", func(code int, _ map[string]any) bool { return code == http.StatusNotFound }},
		{"permit", permSent, "/v1/semaphores/failover%2Fsem", func(code int, b map[string]any) bool {
			h, _ := b["holders"].([]any)
			return code == 200 && len(h) == 0
		}},
	}
	for _, l := range leases {
		earliest := l.sent.Add(ttl)
		latest := l.sent.Add(ttl + gap + tick + slack)
		for {
			sent := time.Now()
			code, body := call(http.MethodGet, newLeader.URL(), l.path, nil)
			answered := time.Now()
			switch {
			case code != 0 && l.free(code, body):
				if answered.Before(earliest) {
					t.Fatalf("%s ended early: free %v after its send, TTL %v", l.what, answered.Sub(l.sent), ttl)
				}
				t.Logf("%s ended %v after its send + TTL (bound %v)", l.what, sent.Sub(earliest).Round(time.Millisecond), latest.Sub(earliest))
			case sent.After(latest):
				t.Fatalf("%s still held %v after its send + TTL, bound %v (leaderless gap %v + tick %v + slack %v): %d %v",
					l.what, sent.Sub(earliest).Round(time.Millisecond), latest.Sub(earliest), gap, tick, slack, code, body)
			case time.Since(killed) > deadline:
				t.Fatalf("%s: no answer from %s", l.what, newLeader.ID)
			default:
				time.Sleep(50 * time.Millisecond) // poll interval
				continue
			}
			break
		}
	}
}

// waitProcLeader polls the running nodes until one of them, other than
// old, is named leader by every running node, and returns it.
func waitProcLeader(t *testing.T, c *procs.Cluster, old *procs.Node) *procs.Node {
	t.Helper()
	httpc := &http.Client{Timeout: time.Second}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		agreed := ""
		for _, n := range c.Nodes {
			if n == old || !n.Running() {
				continue
			}
			resp, err := httpc.Get(n.URL() + "/v1/cluster")
			if err != nil {
				agreed = "?"
				break
			}
			var cs struct{ Leader string }
			json.NewDecoder(resp.Body).Decode(&cs)
			resp.Body.Close()
			if cs.Leader == "" || (old != nil && cs.Leader == old.ID) || (agreed != "" && agreed != cs.Leader) {
				agreed = "?"
				break
			}
			agreed = cs.Leader
		}
		if l := c.Node(agreed); l != nil && l.Running() {
			return l
		}
	}
	t.Fatalf("no leader other than %v within 30 s", old)
	return nil
}
