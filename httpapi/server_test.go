package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

func TestHealthz(t *testing.T) {
	f := failingStore(nodeapi.ErrNoLeader, "")
	f.ready = func() bool { return false }
	// The process serves: healthy, even without a leader.
	wantJSON(t, do(t, newServer(f), http.MethodGet, "/healthz", ""), http.StatusOK, `{"status":"ok"}`)
}

func TestReadyz(t *testing.T) {
	f := newLeader("n1")
	ready := true
	f.ready = func() bool { return ready }
	s := newServer(f)
	wantJSON(t, do(t, s, http.MethodGet, "/readyz", ""), http.StatusOK, `{"ready":true}`)
	ready = false
	wantJSON(t, do(t, s, http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable, `{"ready":false}`)
}

func TestNotFound(t *testing.T) {
	for _, target := range []string{"/v1", "/v2/locks/a", "/v1/lock/a", "/v1/locks/", "/v1/cluster/nodes", "/metricsx"} {
		t.Run(target, func(t *testing.T) {
			rec := do(t, newServer(newLeader("n1")), http.MethodGet, target, "")
			wantError(t, rec, http.StatusNotFound, api.CodeNotFound, target)
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	cases := []struct{ method, target string }{
		{http.MethodGet, "/v1/cluster/join"},
		{http.MethodPut, "/v1/locks/acquire"},
		{http.MethodDelete, "/v1/locks/orders%2F89041"},
		{http.MethodPost, "/v1/locks"},
		{http.MethodPost, "/v1/cluster"},
		{http.MethodPost, "/healthz"},
		{http.MethodDelete, "/readyz"},
	}
	for _, tc := range cases {
		t.Run(tc.method+tc.target, func(t *testing.T) {
			f := newLeader("n1")
			rec := do(t, newServer(f), tc.method, tc.target, `{"name":"a","ttl_ms":1000}`)
			wantError(t, rec, http.StatusMethodNotAllowed, api.CodeBadRequest, tc.method)
			if f.writes() != 0 || len(f.stales) != 0 {
				t.Error("a request with the wrong method reached the store")
			}
		})
	}
}

// Every answer names the node that gave it and, when known, the leader:
// successes and errors alike, routed or not.
func TestIdentityHeaders(t *testing.T) {
	overloaded := func(f *fakeStore) {
		f.apply = func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, nodeapi.ErrOverloaded }
	}
	cases := []struct {
		name, method, target, body string
		setup                      func(*fakeStore)
		status                     int
	}{
		{"acquire", http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`, nil, 200},
		{"held", http.MethodPost, "/v1/locks/acquire", `{"name":"held","ttl_ms":1000}`, nil, 409},
		{"not holder", http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"` + leaseB + `"}`, nil, 409},
		{"get", http.MethodGet, "/v1/locks/a", "", nil, 200},
		{"list", http.MethodGet, "/v1/locks", "", nil, 200},
		{"bad request", http.MethodPost, "/v1/locks/acquire", `{`, nil, 400},
		{"too large", http.MethodPost, "/v1/locks/acquire", strings.Repeat(" ", api.MaxBody+1), nil, 413},
		{"overloaded", http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`, overloaded, 429},
		{"cluster", http.MethodGet, "/v1/cluster", "", nil, 200},
		{"healthz", http.MethodGet, "/healthz", "", nil, 200},
		{"readyz", http.MethodGet, "/readyz", "", nil, 200},
		{"not found", http.MethodGet, "/nope", "", nil, 404},
		{"method not allowed", http.MethodDelete, "/v1/locks/acquire", "", nil, 405},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeader("n1")
			s := newServer(f)
			mustAcquire(t, s, `{"name":"held","ttl_ms":1000,"lease_id":"`+leaseA+`"}`)
			if tc.setup != nil {
				tc.setup(f)
			}
			rec := do(t, s, tc.method, tc.target, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tc.status, rec.Body)
			}
			if got := rec.Header().Get(api.HeaderNode); got != "n1" {
				t.Errorf("%s %q, want n1", api.HeaderNode, got)
			}
			if got := rec.Header().Get(api.HeaderLeader); got != "n1" {
				t.Errorf("%s %q, want n1", api.HeaderLeader, got)
			}
		})
	}

	// On a follower both are set, to different nodes; without a leader,
	// only the node's own.
	rec := do(t, newServer(follower("127.0.0.1:1")), http.MethodGet, "/nope", "")
	if rec.Header().Get(api.HeaderNode) != "n2" || rec.Header().Get(api.HeaderLeader) != "n1" {
		t.Errorf("follower's 404 headers: %v", rec.Header())
	}
	f := failingStore(nodeapi.ErrNoLeader, "")
	f.waitForLeader = noLeaderEver
	rec = do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(api.HeaderNode) != "n2" {
		t.Errorf("no leader: %d %v", rec.Code, rec.Header())
	}
	if _, ok := rec.Header()[api.HeaderLeader]; ok {
		t.Errorf("%s set while no leader is known: %v", api.HeaderLeader, rec.Header())
	}
}

func TestClusterStatus(t *testing.T) {
	version := strconv.Itoa(fsm.MaxCommandVersion) // what this build reads; core raises it
	f := newLeader("n1")
	f.status = func() (nodeapi.Status, error) {
		return nodeapi.Status{ID: "n1", Leader: "n1", Term: 7, LastIndex: 124, CommitIndex: 123, AppliedIndex: 122, Nodes: []nodeapi.NodeInfo{
			{ID: "n1", RaftAddr: "127.0.0.1:9001", HTTPAddr: "127.0.0.1:8001", Voter: true, Leader: true},
			{ID: "n2", RaftAddr: "127.0.0.1:9002", HTTPAddr: "", Voter: false},
		}}, nil
	}
	wantJSON(t, do(t, newServer(f), http.MethodGet, "/v1/cluster", ""), http.StatusOK, `{"id":"n1","leader":"n1","term":7,"last_index":124,"commit_index":123,"applied_index":122,"command_version":`+version+`,"nodes":[
		{"id":"n1","raft_addr":"127.0.0.1:9001","http_addr":"127.0.0.1:8001","voter":true,"leader":true},
		{"id":"n2","raft_addr":"127.0.0.1:9002","http_addr":"","voter":false,"leader":false}]}`)

	// Any node answers from its own view, without a leader too.
	f.status = func() (nodeapi.Status, error) { return nodeapi.Status{Term: 8}, nil }
	wantJSON(t, do(t, newServer(f), http.MethodGet, "/v1/cluster", ""), http.StatusOK,
		`{"id":"","leader":"","term":8,"last_index":0,"commit_index":0,"applied_index":0,"command_version":`+version+`,"nodes":[]}`)

	f.status = func() (nodeapi.Status, error) { return nodeapi.Status{}, nodeapi.ErrShutdown }
	rec := do(t, newServer(f), http.MethodGet, "/v1/cluster", "")
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "")
	wantRetryAfter(t, rec)
}

func TestClusterChanges(t *testing.T) {
	f := newLeader("n1")
	var got []string
	f.join = func(_ context.Context, id, raftAddr, httpAddr string) error {
		got = append(got, "join "+id+" "+raftAddr+" "+httpAddr)
		return nil
	}
	f.leave = func(_ context.Context, id string) error { got = append(got, "leave "+id); return nil }
	f.transfer = func(_ context.Context, id string) error { got = append(got, "transfer "+id); return nil }
	s := newServer(f)

	wantJSON(t, do(t, s, http.MethodPost, "/v1/cluster/join", `{"id":"n4","raft_addr":"127.0.0.1:9004","http_addr":"127.0.0.1:8004"}`),
		http.StatusOK, `{"joined":"n4"}`)
	wantJSON(t, do(t, s, http.MethodPost, "/v1/cluster/leave", `{"id":"n4"}`), http.StatusOK, `{"left":"n4"}`)
	f.leader = func() (string, string) { return "n2", "" } // the transfer happened
	wantJSON(t, do(t, s, http.MethodPost, "/v1/cluster/transfer-leadership", `{"id":"n2"}`), http.StatusOK, `{"leader":"n2"}`)
	wantJSON(t, do(t, s, http.MethodPost, "/v1/cluster/transfer-leadership", `{}`), http.StatusOK, `{"leader":"n2"}`)

	want := []string{"join n4 127.0.0.1:9004 127.0.0.1:8004", "leave n4", "transfer n2", "transfer "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("store got %q, want %q", got, want)
	}
}

func TestMetrics(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte("raftlock_up 1\n"))
	})
	s := New(newLeader("n1"), Options{Metrics: metrics})
	rec := do(t, s, http.MethodGet, "/metrics", "")
	if rec.Code != http.StatusOK || rec.Body.String() != "raftlock_up 1\n" || rec.Header().Get(api.HeaderNode) != "n1" {
		t.Errorf("metrics: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
}
