package raftnode_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// Tokens of the secured clusters in these tests.
const (
	testAdminToken = "admin-0123456789abcdef0123"
	testRWToken    = "writer-0123456789abcdef012"
)

const testTokenFile = "# test tokens\n" + testAdminToken + " admin\n" + testRWToken + " read-write\n"

// api calls a test cluster's HTTP API as one client: over https when the
// cluster has TLS, with a bearer token when it has auth.
type api struct {
	t     *testing.T
	hc    *http.Client
	token string
}

func (a api) call(method, u string, body any) (int, map[string]any) {
	a.t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (a api) must(method, u string, body any) map[string]any {
	a.t.Helper()
	status, out := a.call(method, u, body)
	if status != http.StatusOK {
		a.t.Fatalf("%s %s %v: %d %v", method, u, body, status, out)
	}
	return out
}

// heldLock is what a test holds: the lease and the token it was granted.
type heldLock struct {
	name, lease string
	token       uint64
}

// membership drives one cluster through join, leave and promotion and checks,
// after each, that every lock is still held by its lease with its token.
type membership struct {
	t     *testing.T
	c     *testenv.Cluster
	api   api
	locks []heldLock
}

func (m *membership) acquire(via *testenv.Node, i int) {
	m.t.Helper()
	l := heldLock{name: fmt.Sprintf("members/%d", i), lease: fmt.Sprintf("lease-%02d-0123456789abcdef", i)}
	out := m.api.must("POST", via.URL()+"/v1/locks/acquire", map[string]any{"name": l.name, "owner": "w", "lease_id": l.lease, "ttl_ms": 120000})
	l.token = uint64(out["fencing_token"].(float64))
	for _, prev := range m.locks {
		if l.token <= prev.token {
			m.t.Fatalf("token %d of %s is not above %d of %s", l.token, l.name, prev.token, prev.name)
		}
	}
	m.locks = append(m.locks, l)
}

// check reads every lock linearizably on the leader, and waits until the
// voters are exactly want and every running node has caught up.
func (m *membership) check(step string, want ...string) {
	m.t.Helper()
	leader := m.c.Leader()
	for _, l := range m.locks {
		out := m.api.must("GET", leader.URL()+"/v1/locks/"+url.PathEscape(l.name), nil)
		if out["held"] != true || uint64(out["fencing_token"].(float64)) != l.token {
			m.t.Fatalf("after %s: %s is %v, want held with token %d", step, l.name, out, l.token)
		}
	}
	testenv.WaitFor(m.t, 15*time.Second, "voters "+fmt.Sprint(want)+" after "+step, func() bool {
		_, out := m.api.call("GET", leader.URL()+"/v1/cluster", nil)
		nodes, _ := out["nodes"].([]any)
		if len(nodes) != len(want) {
			return false
		}
		for i, n := range nodes {
			n := n.(map[string]any)
			if n["id"] != want[i] || n["voter"] != true || n["http_addr"] == "" {
				return false
			}
		}
		return true
	})
	m.c.WaitApplied(leader.Raft().CommitIndex())
	for _, n := range m.c.Nodes {
		for _, l := range m.locks {
			if got, ok := n.Machine().Get(l.name); n.Running() && (!ok || got.Token != l.token) {
				m.t.Fatalf("after %s: %s sees %s as %+v (held %v), want token %d", step, n.ID, l.name, got, ok, l.token)
			}
		}
	}
	m.t.Logf("after %s: leader %s, voters %v, %d locks intact", step, leader.ID, want, len(m.locks))
}

func (m *membership) follower(not ...*testenv.Node) *testenv.Node {
	m.t.Helper()
outer:
	for _, f := range m.c.Followers() {
		for _, n := range not {
			if f == n {
				continue outer
			}
		}
		return f
	}
	m.t.Fatal("no such follower")
	return nil
}

// Grow 3 → 5 by joins, remove a node by leave, move leadership, and replace
// a dead node with a new one, while locks are held; no lock and no fencing
// token is lost, and tokens keep growing. Plain, and with TLS and tokens
// (where every join, announce and forwarded change carries the admin token
// over https).
func TestMembershipChangesKeepLocks(t *testing.T) {
	for _, secured := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls+auth"}[secured], func(t *testing.T) {
			var opts testenv.Options
			logs := &lockedBuffer{}
			if secured {
				opts = testenv.Options{TLS: tlstest.NewCA(t, "raftlock test CA"), Tokens: testTokenFile,
					Configure: func(cfg *raftnode.Config) {
						// Every node's logs, at the most verbose level, also go
						// to logs, to check that no token is ever in them.
						cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Trace,
							Output: &teeWriter{logs, cfg.Logger.StandardWriter(&hclog.StandardLoggerOptions{})}})
					}}
			}
			c := testenv.Start(t, 3, opts)
			m := &membership{t: t, c: c, api: api{t: t, hc: c.HTTPClient()}}
			if secured {
				m.api.token = testAdminToken
			}
			m.acquire(c.Leader(), 1)
			m.acquire(m.follower(), 2)
			m.check("start", "n1", "n2", "n3")

			// Grow to five, each new node joining through a follower.
			n4 := c.AddNode(m.follower().URL())
			m.check("n4 joined", "n1", "n2", "n3", "n4")
			m.acquire(n4, 3)
			n5 := c.AddNode(m.follower().URL())
			m.check("n5 joined", "n1", "n2", "n3", "n4", "n5")
			m.acquire(n5, 4)

			// Remove a follower, asking another follower (forwarded).
			gone := m.follower(n4, n5)
			m.api.must("POST", n5.URL()+"/v1/cluster/leave", map[string]any{"id": gone.ID})
			gone.Stop()
			var rest []string
			for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
				if id != gone.ID {
					rest = append(rest, id)
				}
			}
			m.check("leave of "+gone.ID, rest...)

			// Hand leadership to a joined node.
			old := c.Leader()
			m.api.must("POST", n5.URL()+"/v1/cluster/transfer-leadership", map[string]any{"id": "n4"})
			if got := c.WaitForNewLeader(old); got != n4 && old != n4 {
				t.Fatalf("leader is %s, want n4", got.ID)
			}
			m.check("transfer to n4", rest...)
			m.acquire(m.follower(), 5)

			// A follower dies; a new node (new id) replaces it, then the
			// dead one is removed.
			dead := m.follower()
			dead.Kill()
			n6 := c.AddNode(c.Leader().URL())
			var replaced []string
			for _, id := range append(rest, "n6") {
				if id != dead.ID {
					replaced = append(replaced, id)
				}
			}
			testenv.WaitFor(t, 15*time.Second, "n6 to catch up", func() bool {
				return n6.Raft().AppliedIndex() >= c.Leader().Raft().CommitIndex()
			})
			m.api.must("POST", n6.URL()+"/v1/cluster/leave", map[string]any{"id": dead.ID})
			m.check("replacing "+dead.ID+" by n6", replaced...)

			// Every lease still works: renewals keep their tokens, and a
			// competing acquire sees the holder.
			for _, l := range m.locks {
				out := m.api.must("POST", n6.URL()+"/v1/locks/renew", map[string]any{"name": l.name, "lease_id": l.lease})
				if uint64(out["fencing_token"].(float64)) != l.token {
					t.Fatalf("renew of %s: token %v, want %d", l.name, out["fencing_token"], l.token)
				}
				if status, out := m.api.call("POST", n6.URL()+"/v1/locks/acquire", map[string]any{"name": l.name, "owner": "x", "ttl_ms": 1000}); status != http.StatusConflict {
					t.Fatalf("competing acquire of %s: %d %v", l.name, status, out)
				}
			}
			m.acquire(n6, 6)

			if secured {
				if status, _ := (api{t: t, hc: c.HTTPClient()}).call("GET", n6.URL()+"/v1/locks", nil); status != http.StatusUnauthorized {
					t.Errorf("a request without a token: %d, want 401", status)
				}
				if status, _ := (api{t: t, hc: c.HTTPClient(), token: testRWToken}).call("POST", n6.URL()+"/v1/cluster/leave", map[string]any{"id": "n3"}); status != http.StatusForbidden {
					t.Errorf("leave with a read-write token: %d, want 403", status)
				}
				// Go's TLS server answers plain HTTP with a bare 400.
				if resp, err := http.Get("http://" + n6.HTTPAddr + "/v1/locks"); err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadRequest {
						t.Errorf("a TLS node answered plain HTTP with %d", resp.StatusCode)
					}
				}
				l := logs.String()
				if !strings.Contains(l, "adding non-voter") || !strings.Contains(l, "promoting non-voter to voter") {
					t.Fatalf("the log capture caught nothing: %q", l)
				}
				for _, tok := range []string{testAdminToken, testRWToken} {
					if strings.Contains(l, tok) {
						t.Errorf("a token is in the nodes' logs")
					}
				}
			}
		})
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// teeWriter writes to both; the second one's errors are ignored.
type teeWriter struct {
	a *lockedBuffer
	b interface{ Write([]byte) (int, error) }
}

func (w *teeWriter) Write(p []byte) (int, error) {
	w.b.Write(p)
	return w.a.Write(p)
}

// Malformed joins are refused with 400 naming
// the field, through a follower too, and change nothing. The old code took
// "not-an-address" and made it a voter at once.
func TestJoinRejectsMalformedMembers(t *testing.T) {
	c := testenv.Start(t, 3)
	a := api{t: t, hc: c.HTTPClient()}
	follower := c.Followers()[0]
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"id": "bad1", "raft_addr": "not-an-address"}, "raft_addr"},
		{map[string]any{"id": "bad1", "raft_addr": "0.0.0.0:9000"}, "raft_addr"},
		{map[string]any{"id": "bad1", "raft_addr": "127.0.0.1:0"}, "raft_addr"},
		{map[string]any{"id": "bad1", "raft_addr": "host_name:9000"}, "raft_addr"},
		{map[string]any{"id": strings.Repeat("x", 65), "raft_addr": "127.0.0.1:9000"}, "id"},
		{map[string]any{"id": "bad id", "raft_addr": "127.0.0.1:9000"}, "id"},
		{map[string]any{"id": "bad1", "raft_addr": "127.0.0.1:9000", "http_addr": "nope"}, "http_addr"},
	} {
		for _, via := range []*testenv.Node{c.Leader(), follower} {
			status, out := a.call("POST", via.URL()+"/v1/cluster/join", tc.body)
			if msg, _ := out["message"].(string); status != http.StatusBadRequest || !strings.HasPrefix(msg, tc.field+":") {
				t.Errorf("join %v via %s: %d %v, want 400 naming %s", tc.body, via.ID, status, out, tc.field)
			}
		}
	}
	st, err := c.Leader().Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 3 {
		t.Fatalf("members after refused joins: %+v", st.Nodes)
	}
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	ln := testenv.Listen(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// members returns the voters and the non-voters in node's GET /v1/cluster.
func (a api) members(node *testenv.Node) (voters, nonvoters []string) {
	a.t.Helper()
	out := a.must("GET", node.URL()+"/v1/cluster", nil)
	nodes, _ := out["nodes"].([]any)
	for _, n := range nodes {
		n := n.(map[string]any)
		if n["voter"] == true {
			voters = append(voters, n["id"].(string))
		} else {
			nonvoters = append(nonvoters, n["id"].(string))
		}
	}
	return voters, nonvoters
}

// Joins of nodes that never come up must not wedge the
// cluster. Two joins to Raft addresses where nothing listens (one with no
// HTTP address, one whose http_addr is a live node's API, which answers as
// that node) leave non-voters that are never promoted, while a real node
// joining after them is; and once a real follower dies, the four voters
// left with three alive still have a leader that grants locks. On the old
// code the ghosts became voters at once: 6 voters, 3 alive, no leader ever
// again.
func TestBogusJoinsDoNotWedgeTheCluster(t *testing.T) {
	c := testenv.Start(t, 3)
	a := api{t: t, hc: c.HTTPClient()}
	follower := c.Followers()[0]
	a.must("POST", c.Leader().URL()+"/v1/cluster/join", map[string]any{"id": "ghost1", "raft_addr": deadAddr(t)})
	a.must("POST", follower.URL()+"/v1/cluster/join", map[string]any{"id": "ghost2", "raft_addr": deadAddr(t), "http_addr": follower.HTTPAddr})

	// The promoter surveys every non-voter in each round, the ghosts (which
	// come first in the configuration) included, so once n4 is promoted the
	// ghosts have been turned down at least once.
	n4 := c.AddNode(follower.URL())
	testenv.WaitFor(t, 15*time.Second, "n4 to become a voter", func() bool {
		v, _ := a.members(c.Leader())
		return slices.Contains(v, n4.ID)
	})
	if v, o := a.members(c.Leader()); fmt.Sprint(v) != "[n1 n2 n3 n4]" || fmt.Sprint(o) != "[ghost1 ghost2]" {
		t.Fatalf("voters %v, non-voters %v; want n1-n4 and the two ghosts", v, o)
	}

	// A real follower dies: three of the four voters still elect and commit.
	var victim *testenv.Node
	for _, f := range c.Followers() {
		if f != n4 {
			victim = f
		}
	}
	victim.Kill()
	leader := c.Leader()
	out := a.must("POST", leader.URL()+"/v1/locks/acquire", map[string]any{"name": "after-ghosts", "owner": "t", "ttl_ms": 5000})
	if out["fencing_token"] == nil {
		t.Fatalf("acquire: %v", out)
	}
	if v, o := a.members(leader); len(v) != 4 || fmt.Sprint(o) != "[ghost1 ghost2]" {
		t.Fatalf("after the kill: voters %v, non-voters %v", v, o)
	}
	// A ghost is a non-voter: it can go whatever else is down.
	a.must("POST", leader.URL()+"/v1/cluster/leave", map[string]any{"id": "ghost1"})
}

// A change that would leave fewer healthy voters than a quorum is refused
// with 409 unsafe_change, through a follower too, and changes nothing; the
// dead voter itself may go.
func TestLeaveRefusesUnsafeChange(t *testing.T) {
	c := testenv.Start(t, 3)
	a := api{t: t, hc: c.HTTPClient()}
	// The leader asks members for their progress at their HTTP addresses,
	// which followers announce just after the start.
	testenv.WaitFor(t, 15*time.Second, "every node's HTTP address", func() bool {
		_, out := a.call("GET", c.Leader().URL()+"/v1/cluster", nil)
		nodes, _ := out["nodes"].([]any)
		for _, n := range nodes {
			if n.(map[string]any)["http_addr"] == "" {
				return false
			}
		}
		return len(nodes) == 3
	})
	fs := c.Followers()
	dead, live := fs[0], fs[1]
	dead.Kill()
	leader := c.Leader()
	for _, via := range []*testenv.Node{leader, live} {
		status, out := a.call("POST", via.URL()+"/v1/cluster/leave", map[string]any{"id": live.ID})
		if status != http.StatusConflict || out["error"] != "unsafe_change" {
			t.Fatalf("leave of %s (with %s dead) via %s: %d %v, want 409 unsafe_change", live.ID, dead.ID, via.ID, status, out)
		}
	}
	// A join that would replace the live follower (same Raft address, new
	// id) is refused the same way.
	status, out := a.call("POST", leader.URL()+"/v1/cluster/join", map[string]any{"id": "impostor", "raft_addr": live.RaftAddr})
	if status != http.StatusConflict || out["error"] != "unsafe_change" {
		t.Fatalf("join replacing live %s: %d %v, want 409 unsafe_change", live.ID, status, out)
	}
	if v, o := a.members(leader); len(v) != 3 || len(o) != 0 {
		t.Fatalf("after refused changes: voters %v, non-voters %v", v, o)
	}
	a.must("POST", leader.URL()+"/v1/cluster/leave", map[string]any{"id": dead.ID})
	a.must("POST", leader.URL()+"/v1/locks/acquire", map[string]any{"name": "after-leave", "owner": "t", "ttl_ms": 5000})
}
