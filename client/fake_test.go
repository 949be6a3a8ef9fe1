package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// fakeCluster is an in-process stand-in for a raftlock cluster: n HTTP
// servers sharing one lock table. Followers "forward" writes by serving them
// from the shared table, so tests see which node a request went to. hook
// lets a test inject faults before the normal handling.
type fakeCluster struct {
	mu      sync.Mutex
	nodes   []*fakeNode
	leader  string
	term    uint64
	index   uint64
	locks   map[string]*fakeLock
	freed   map[string]uint64 // lock -> index of the change that freed it (fake_watch_test.go)
	changed chan struct{}     // closed and replaced when locks change
	closing chan struct{}
	reqs    []fakeReq
	// sessions and semaphores (fake_session_test.go)
	sessions map[string]*fakeSession
	sems     map[string]*fakeSem
	hook     func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool
}

type fakeNode struct {
	id  string
	fc  *fakeCluster
	srv *httptest.Server
}

type fakeLock struct {
	owner   string
	leaseID string
	token   uint64
	ttlMs   int64
	value   string
	idx     uint64 // index of the lock's last change
	session string // the session that keeps it, if any
}

type fakeReq struct {
	Node   string
	Method string
	Path   string
	Body   map[string]any
}

func (r fakeReq) str(k string) string { s, _ := r.Body[k].(string); return s }

func (r fakeReq) num(k string) int64 { f, _ := r.Body[k].(float64); return int64(f) }

func newFakeCluster(n int) *fakeCluster {
	fc := &fakeCluster{
		locks:    map[string]*fakeLock{},
		sessions: map[string]*fakeSession{},
		sems:     map[string]*fakeSem{},
		freed:    map[string]uint64{},
		changed:  make(chan struct{}),
		closing:  make(chan struct{}),
		index:    10480,
		term:     3,
	}
	for i := 1; i <= n; i++ {
		node := &fakeNode{id: fmt.Sprintf("n%d", i), fc: fc}
		node.srv = httptest.NewServer(node)
		fc.nodes = append(fc.nodes, node)
	}
	fc.leader = "n1"
	return fc
}

// Close stops all nodes, ending handlers that wait.
func (fc *fakeCluster) Close() {
	fc.mu.Lock()
	select {
	case <-fc.closing:
	default:
		close(fc.closing)
	}
	fc.mu.Unlock()
	for _, n := range fc.nodes {
		n.srv.Close()
	}
}

func (fc *fakeCluster) Endpoints() []string {
	var eps []string
	for _, n := range fc.nodes {
		eps = append(eps, n.srv.URL)
	}
	return eps
}

func (fc *fakeCluster) node(id string) *fakeNode {
	for _, n := range fc.nodes {
		if n.id == id {
			return n
		}
	}
	panic("no node " + id)
}

func (fc *fakeCluster) setLeader(id string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.leader = id
	fc.term++
}

func (fc *fakeCluster) setHook(h func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.hook = h
}

// requests returns the requests received so far that match pred.
func (fc *fakeCluster) requests(pred func(fakeReq) bool) []fakeReq {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []fakeReq
	for _, r := range fc.reqs {
		if pred == nil || pred(r) {
			out = append(out, r)
		}
	}
	return out
}

func path(p string) func(fakeReq) bool { return func(r fakeReq) bool { return r.Path == p } }

// hold makes another client hold lock name.
func (fc *fakeCluster) hold(name, owner, leaseID string) uint64 {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.index++
	fc.locks[name] = &fakeLock{owner: owner, leaseID: leaseID, token: fc.index, ttlMs: 10000, idx: fc.index}
	fc.notifyLocked()
	return fc.index
}

// drop removes lock name, as an expiry would.
func (fc *fakeCluster) drop(name string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.freeLocked(name)
}

func (fc *fakeCluster) holder(name string) (fakeLock, bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	l, ok := fc.locks[name]
	if !ok {
		return fakeLock{}, false
	}
	return *l, true
}

func (fc *fakeCluster) notifyLocked() {
	close(fc.changed)
	fc.changed = make(chan struct{})
}

func (n *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fc := n.fc
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	req := fakeReq{Node: n.id, Method: r.Method, Path: r.URL.Path}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &req.Body)
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	fc.mu.Lock()
	fc.reqs = append(fc.reqs, req)
	hook, leader := fc.hook, fc.leader
	fc.mu.Unlock()
	w.Header().Set("X-Raftlock-Node", n.id)
	if leader != "" {
		w.Header().Set("X-Raftlock-Leader", leader)
	}
	if hook != nil && hook(n, req, w, r) {
		return
	}
	n.serve(w, r)
}

// serve is the normal handling, without hook.
func (n *fakeNode) serve(w http.ResponseWriter, r *http.Request) {
	fc := n.fc
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/locks/acquire":
		fc.acquire(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/locks/renew":
		var q struct {
			Name    string `json:"name"`
			LeaseID string `json:"lease_id"`
			TTLMs   int64  `json:"ttl_ms"`
		}
		if !decode(w, r, &q) {
			return
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		l, ok := fc.locks[q.Name]
		if !ok || l.leaseID != q.LeaseID {
			writeErr(w, http.StatusConflict, "not_holder", "lease does not hold the lock")
			return
		}
		if q.TTLMs != 0 {
			l.ttlMs = q.TTLMs
		}
		writeJSON(w, 200, fc.leaseJSON(q.Name, l))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/locks/release":
		var q struct {
			Name    string `json:"name"`
			LeaseID string `json:"lease_id"`
		}
		if !decode(w, r, &q) {
			return
		}
		fc.mu.Lock()
		defer fc.mu.Unlock()
		l, ok := fc.locks[q.Name]
		if !ok || l.leaseID != q.LeaseID {
			writeErr(w, http.StatusConflict, "not_holder", "lease does not hold the lock")
			return
		}
		fc.freeLocked(q.Name)
		writeJSON(w, 200, map[string]any{"released": true})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/locks/"):
		fc.getLock(w, r, strings.TrimPrefix(r.URL.Path, "/v1/locks/"))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/locks":
		fc.listLocks(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/locks/update":
		fc.update(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/cluster":
		fc.mu.Lock()
		defer fc.mu.Unlock()
		var nodes []map[string]any
		for _, x := range fc.nodes {
			nodes = append(nodes, map[string]any{
				"id": x.id, "raft_addr": "127.0.0.1:1", "voter": true, "leader": x.id == fc.leader,
				"http_addr": strings.TrimPrefix(x.srv.URL, "http://"),
			})
		}
		writeJSON(w, 200, map[string]any{"leader": fc.leader, "term": fc.term, "commit_index": fc.index, "applied_index": fc.index, "nodes": nodes})
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/cluster/join" || r.URL.Path == "/v1/cluster/leave"):
		writeJSON(w, 200, map[string]any{})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/cluster/transfer-leadership":
		var q struct {
			ID string `json:"id"`
		}
		if !decode(w, r, &q) {
			return
		}
		fc.mu.Lock()
		if q.ID == "" {
			for _, x := range fc.nodes {
				if x.id != fc.leader {
					q.ID = x.id
					break
				}
			}
		}
		fc.leader = q.ID
		fc.term++
		fc.mu.Unlock()
		w.Header().Set("X-Raftlock-Leader", q.ID)
		writeJSON(w, 200, map[string]any{})
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		writeJSON(w, 200, map[string]any{})
	case r.Method == http.MethodGet && r.URL.Path == "/readyz":
		fc.mu.Lock()
		leader := fc.leader
		fc.mu.Unlock()
		if leader == "" {
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusServiceUnavailable, "no_leader", "no leader")
			return
		}
		writeJSON(w, 200, map[string]any{})
	default:
		if !fc.serveSessions(w, r) {
			writeErr(w, http.StatusNotFound, "not_found", r.Method+" "+r.URL.Path)
		}
	}
}

func (fc *fakeCluster) acquire(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Name        string `json:"name"`
		Owner       string `json:"owner"`
		TTLMs       int64  `json:"ttl_ms"`
		LeaseID     string `json:"lease_id"`
		WaitMs      int64  `json:"wait_ms"`
		LockDelayMs int64  `json:"lock_delay_ms"`
		Value       string `json:"value"`
		SessionID   string `json:"session_id"`
		Mode        string `json:"mode"`
	}
	if !decode(w, r, &q) {
		return
	}
	switch {
	case q.Name == "":
		writeErr(w, 400, "bad_request", "name: required")
		return
	case q.SessionID != "" && q.TTLMs != 0:
		writeErr(w, 400, "bad_request", "ttl_ms and session_id exclude each other")
		return
	case q.SessionID != "" && !fc.liveSession(q.SessionID):
		writeErr(w, 404, "no_session", "no such session")
		return
	case q.SessionID == "" && (q.TTLMs < 500 || q.TTLMs > 3600000):
		writeErr(w, 400, "bad_request", "ttl_ms: out of range")
		return
	case q.WaitMs < 0 || q.WaitMs > 300000:
		writeErr(w, 400, "bad_request", "wait_ms: out of range")
		return
	case q.LeaseID != "" && !api.ValidLeaseID(q.LeaseID):
		writeErr(w, 400, "bad_request", "lease_id: invalid")
		return
	}
	if q.LeaseID == "" {
		q.LeaseID = NewLeaseID()
	}
	waitUntil := time.Now().Add(time.Duration(q.WaitMs) * time.Millisecond)
	for {
		fc.mu.Lock()
		l, held := fc.locks[q.Name]
		if !held {
			fc.index++
			l = &fakeLock{owner: q.Owner, leaseID: q.LeaseID, token: fc.index, ttlMs: q.TTLMs, value: q.Value, idx: fc.index, session: q.SessionID}
			fc.locks[q.Name] = l
			fc.notifyLocked()
		}
		if l.leaseID == q.LeaseID {
			body := fc.leaseJSON(q.Name, l)
			fc.mu.Unlock()
			writeJSON(w, 200, body)
			return
		}
		holder := map[string]any{"owner": l.owner, "fencing_token": l.token}
		changed := fc.changed
		fc.mu.Unlock()
		wait := time.Until(waitUntil)
		if wait <= 0 {
			writeJSON(w, http.StatusConflict, map[string]any{"error": "held", "message": "lock is held", "holder": holder})
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		case <-fc.closing:
		}
		t.Stop()
		if r.Context().Err() != nil {
			return
		}
		select {
		case <-fc.closing:
			return
		default:
		}
	}
}

func (fc *fakeCluster) leaseJSON(name string, l *fakeLock) map[string]any {
	if s := fc.sessions[l.session]; s != nil {
		return map[string]any{"name": name, "owner": l.owner, "lease_id": l.leaseID, "fencing_token": l.token, "ttl_ms": s.ttlMs, "session_id": s.id}
	}
	return map[string]any{"name": name, "owner": l.owner, "lease_id": l.leaseID, "fencing_token": l.token, "ttl_ms": l.ttlMs}
}

// decode reads the request strictly, as the contract demands.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		writeErr(w, 400, "bad_request", err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": code, "message": msg})
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// StartFakeCluster starts an in-process fake raftlock cluster of n nodes for
// the examples; it exists only in tests.
func StartFakeCluster(n int) (endpoints []string, stop func()) {
	fc := newFakeCluster(n)
	return fc.Endpoints(), fc.Close
}
