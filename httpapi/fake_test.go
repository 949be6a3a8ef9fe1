package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// fakeStore is a Store made of function fields (after hraftd and rqlite's
// handler tests): each test sets only what it needs. A nil field falls back
// to a leader that applies commands to a real fsm.Machine with no Raft.
type fakeStore struct {
	id string

	leader        func() (id, httpAddr string)
	waitForLeader func(ctx context.Context) (id, httpAddr string, err error)
	apply         func(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	read          func(ctx context.Context, stale bool) (nodeapi.LockReader, error)
	ready         func() bool
	status        func() (nodeapi.Status, error)
	join          func(ctx context.Context, id, raftAddr, httpAddr string) error
	leave         func(ctx context.Context, id string) error
	transfer      func(ctx context.Context, id string) error
	checkState    func(ctx context.Context) (uint64, error)

	mu      sync.Mutex
	machine *fsm.Machine
	index   uint64
	nowMs   int64 // the leader's monotonic clock, moved by hand
	cmds    []fsm.Command
	stales  []bool
	waits   []time.Duration
	calls   int // every call that could change state: apply, join, leave, transfer
}

// newLeader returns a store that leads, as node id, over an empty machine.
func newLeader(id string) *fakeStore {
	return &fakeStore{id: id, machine: fsm.New()}
}

func (f *fakeStore) ID() string { return f.id }

func (f *fakeStore) Leader() (string, string) {
	if f.leader != nil {
		return f.leader()
	}
	return f.id, ""
}

func (f *fakeStore) WaitForLeader(ctx context.Context) (string, string, error) {
	if f.waitForLeader != nil {
		return f.waitForLeader(ctx)
	}
	id, addr := f.Leader()
	return id, addr, nil
}

func (f *fakeStore) Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	f.mu.Lock()
	f.cmds = append(f.cmds, cmd)
	f.calls++
	f.mu.Unlock()
	if f.apply != nil {
		return f.apply(ctx, cmd)
	}
	return f.applyLocal(cmd), nil
}

// applyLocal does what raftnode's leader does, minus the replication: fill
// in a lease id, stamp the entry with the leader's clock, apply it at the
// next index.
func (f *fakeStore) applyLocal(cmd fsm.Command) fsm.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if (cmd.Op == fsm.OpAcquire || cmd.Op == fsm.OpSemAcquire) && cmd.LeaseID == "" {
		cmd.LeaseID = api.NewLeaseID()
	}
	if cmd.Op == fsm.OpSessionCreate && cmd.SessionID == "" {
		cmd.SessionID = api.NewLeaseID()
	}
	if fsm.MinVersion(cmd) > 1 {
		cmd.Version = fsm.MaxCommandVersion // as a leader whose members all read it
	}
	cmd.StampTerm = 1 // the term ApplyCommand is given below: the stamp counts
	cmd.Stamp = f.nowMs * int64(time.Millisecond)
	f.index++
	return f.machine.ApplyCommand(f.index, 1, cmd)
}

// advance moves the leader's clock; the FSM sees it with the next entry.
func (f *fakeStore) advance(d time.Duration) {
	f.mu.Lock()
	f.nowMs += d.Milliseconds()
	f.mu.Unlock()
}

// Acquire is Apply for an acquire that may wait; the fake records the wait
// and answers at once, so its failures are Apply's.
func (f *fakeStore) Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error) {
	f.mu.Lock()
	f.waits = append(f.waits, wait)
	f.mu.Unlock()
	return f.Apply(ctx, cmd)
}

func (f *fakeStore) Read(ctx context.Context, stale bool) (nodeapi.LockReader, error) {
	f.mu.Lock()
	f.stales = append(f.stales, stale)
	f.mu.Unlock()
	if f.read != nil {
		return f.read(ctx, stale)
	}
	return f.machine, nil
}

func (f *fakeStore) Ready() bool {
	if f.ready != nil {
		return f.ready()
	}
	return true
}

func (f *fakeStore) Status() (nodeapi.Status, error) {
	if f.status != nil {
		return f.status()
	}
	return nodeapi.Status{Leader: f.id}, nil
}

func (f *fakeStore) Join(ctx context.Context, id, raftAddr, httpAddr string) error {
	f.count()
	if f.join != nil {
		return f.join(ctx, id, raftAddr, httpAddr)
	}
	return nil
}

func (f *fakeStore) Leave(ctx context.Context, id string) error {
	f.count()
	if f.leave != nil {
		return f.leave(ctx, id)
	}
	return nil
}

func (f *fakeStore) TransferLeadership(ctx context.Context, id string) error {
	f.count()
	if f.transfer != nil {
		return f.transfer(ctx, id)
	}
	return nil
}

func (f *fakeStore) CheckState(ctx context.Context) (uint64, error) {
	f.count()
	if f.checkState != nil {
		return f.checkState(ctx)
	}
	return 0, nil
}

func (f *fakeStore) count() {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
}

func (f *fakeStore) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeStore) commands() []fsm.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fsm.Command(nil), f.cmds...)
}

var _ Store = (*fakeStore)(nil)

// noLeaderEver waits like raftnode.Node.WaitForLeader while quorum is lost:
// until the context ends.
func noLeaderEver(ctx context.Context) (string, string, error) {
	<-ctx.Done()
	return "", "", nodeapi.ErrNoLeader
}

// testLeaderWait keeps the no-leader cases quick. Tests that expect success
// after a wait use a long one instead, so a slow machine cannot fail them.
const testLeaderWait = 50 * time.Millisecond

func newServer(f *fakeStore) *Server {
	return New(f, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler()})
}

// do sends one request to h and returns the recorded answer.
func do(t *testing.T, h http.Handler, method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if body != "" || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errorBody is the contract's error shape.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// wantError checks status, error code and that the message contains msg.
func wantError(t *testing.T, rec *httptest.ResponseRecorder, status int, code, msg string) errorBody {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", rec.Body, err)
	}
	if e.Error != code {
		t.Errorf("error code %q, want %q; body %s", e.Error, code, rec.Body)
	}
	if e.Message == "" || !strings.Contains(e.Message, msg) {
		t.Errorf("message %q does not contain %q", e.Message, msg)
	}
	return e
}

// wantRetryAfter checks the header that 503 and 429 must carry.
func wantRetryAfter(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	v := rec.Header().Get("Retry-After")
	if n, err := strconv.Atoi(v); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want a positive number of seconds", v)
	}
}

// wantJSON checks that the body is exactly want: the same keys, no more, with
// the same values.
func wantJSON(t *testing.T, rec *httptest.ResponseRecorder, status int, want string) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	wantJSONBody(t, rec.Body.Bytes(), want)
}

func wantJSONBody(t *testing.T, body []byte, want string) {
	t.Helper()
	var got, exp any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("body\n %s\nwant\n %s", bytes.TrimSpace(body), want)
	}
}

// lease is the 200 body of acquire and renew.
type lease struct {
	Name         string `json:"name"`
	Owner        string `json:"owner"`
	LeaseID      string `json:"lease_id"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
}

// mustAcquire takes a lock through h and returns the lease.
func mustAcquire(t *testing.T, h http.Handler, body string) lease {
	t.Helper()
	rec := do(t, h, http.MethodPost, "/v1/locks/acquire", body)
	if rec.Code != http.StatusOK {
		t.Fatalf("acquire %s: status %d, body %s", body, rec.Code, rec.Body)
	}
	var l lease
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	return l
}
