package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
	"github.com/raftlock/raftlock/internal/testenv/httpfault"
)

// writeRequests are the requests a follower must forward, one per endpoint
// that changes state.
var writeRequests = append([]struct{ path, body string }{
	{"/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"` + leaseA + `"}`},
	{"/v1/locks/renew", `{"name":"orders/89041","lease_id":"` + leaseA + `"}`},
	{"/v1/locks/release", `{"name":"orders/89041","lease_id":"` + leaseA + `"}`},
	{"/v1/cluster/join", `{"id":"n4","raft_addr":"127.0.0.1:9004","http_addr":"127.0.0.1:8004"}`},
	{"/v1/cluster/leave", `{"id":"n4"}`},
	{"/v1/cluster/transfer-leadership", `{}`},
}, issue15Writes...)

// issue15Writes are the writes of sessions, shared locks and semaphores
// (command format 5), one per endpoint and lock acquire variant.
var issue15Writes = []struct{ path, body string }{
	{"/v1/sessions", `{"owner":"worker-a","ttl_ms":10000,"session_id":"` + sessA + `"}`},
	{"/v1/sessions/renew", `{"session_id":"` + sessA + `"}`},
	{"/v1/sessions/close", `{"session_id":"` + sessA + `"}`},
	{"/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-a","session_id":"` + sessA + `"}`},
	{"/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"mode":"shared"}`},
	{"/v1/semaphores/acquire", `{"name":"pool/a","limit":3,"owner":"worker-a","ttl_ms":10000,"lease_id":"` + leaseA + `"}`},
	{"/v1/semaphores/renew", `{"name":"pool/a","lease_id":"` + leaseA + `"}`},
	{"/v1/semaphores/release", `{"name":"pool/a","lease_id":"` + leaseA + `"}`},
}

// A store failing every call with err, while thinking leader leads.
func failingStore(err error, leader string) *fakeStore {
	f := newLeader("n2")
	f.leader = func() (string, string) { return leader, "" }
	f.apply = func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, err }
	f.read = func(context.Context, bool) (nodeapi.LockReader, error) { return nil, err }
	f.join = func(context.Context, string, string, string) error { return err }
	f.leave = func(context.Context, string) error { return err }
	f.transfer = func(context.Context, string) error { return err }
	return f
}

// The store's sentinel errors map to the contract's statuses, for every
// endpoint that reaches the store, and a 503, 504 or 429 says when to retry.
// A 503 or 429 promises that nothing was applied, so an error that leaves
// that open is a 504 on a write; a read applies nothing, so there it is 503.
func TestStoreErrors(t *testing.T) {
	inFlightShutdown := fmt.Errorf("apply release: %w: raft shut down with the entry in flight (%w)", nodeapi.ErrIndeterminate, nodeapi.ErrShutdown)
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		readStatus int // 0: status
	}{
		{"indeterminate", nodeapi.ErrIndeterminate, http.StatusGatewayTimeout, api.CodeUnknownOutcome, http.StatusServiceUnavailable},
		{"wrapped indeterminate", fmt.Errorf("apply acquire: %w", nodeapi.ErrIndeterminate), http.StatusGatewayTimeout, api.CodeUnknownOutcome, http.StatusServiceUnavailable},
		{"shutdown in flight", inFlightShutdown, http.StatusGatewayTimeout, api.CodeUnknownOutcome, http.StatusServiceUnavailable},
		{"shutdown", nodeapi.ErrShutdown, http.StatusServiceUnavailable, api.CodeNoLeader, 0},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, api.CodeUnknownOutcome, http.StatusServiceUnavailable},
		{"canceled", context.Canceled, http.StatusGatewayTimeout, api.CodeUnknownOutcome, http.StatusServiceUnavailable},
		{"leader changed", nodeapi.ErrLeaderChanged, http.StatusServiceUnavailable, api.CodeNoLeader, 0},
		{"overloaded", nodeapi.ErrOverloaded, http.StatusTooManyRequests, api.CodeOverloaded, 0},
		{"wrapped overloaded", fmt.Errorf("x: %w", nodeapi.ErrOverloaded), http.StatusTooManyRequests, api.CodeOverloaded, 0},
		{"diverged", nodeapi.ErrDiverged, http.StatusServiceUnavailable, api.CodeDiverged, 0},
		{"storage", fmt.Errorf("apply acquire: %w", nodeapi.ErrStorage), http.StatusInternalServerError, api.CodeStorage, 0},
		{"unexpected", errors.New("disk on fire"), http.StatusInternalServerError, api.CodeInternal, 0},
	}
	reads := []string{"/v1/locks/a", "/v1/locks", "/v1/locks/a?stale=true", "/v1/sessions/" + sessA, "/v1/semaphores/a", "/v1/semaphores/a?stale=true"}
	for _, tc := range cases {
		for _, w := range writeRequests {
			t.Run(tc.name+w.path, func(t *testing.T) {
				// Here n2 leads: the error is its own, not a reason to forward.
				rec := do(t, newServer(failingStore(tc.err, "n2")), http.MethodPost, w.path, w.body)
				wantError(t, rec, tc.status, tc.code, "")
				if tc.code != api.CodeInternal {
					wantRetryAfter(t, rec)
				}
			})
		}
		for _, r := range reads {
			t.Run(tc.name+r, func(t *testing.T) {
				status, code := tc.status, tc.code
				if tc.readStatus != 0 {
					status, code = tc.readStatus, api.CodeNoLeader
				}
				rec := do(t, newServer(failingStore(tc.err, "n2")), http.MethodGet, r, "")
				wantError(t, rec, status, code, "")
			})
		}
	}
}

// A parked acquire whose request deadline (the server's own: wait_ms plus
// RequestTimeout) ends while its grant is in flight gets the context's error
// from the store: the grant may have committed, so the answer is 504, never
// 200 and never 503.
func TestParkedAcquireDeadlineIsUnknown(t *testing.T) {
	f := newLeader("n1")
	f.apply = func(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
		<-ctx.Done() // the grant is in flight when the deadline comes
		return fsm.Result{}, ctx.Err()
	}
	s := New(f, Options{LeaderWait: testLeaderWait, RequestTimeout: 20 * time.Millisecond, Metrics: http.NotFoundHandler()})
	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"wait_ms":10,"lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusGatewayTimeout, api.CodeUnknownOutcome, "deadline")
	wantRetryAfter(t, rec)
}

func TestUnknownNodeIsNotFound(t *testing.T) {
	f := failingStore(fmt.Errorf("leave n9: %w", nodeapi.ErrUnknownNode), "n2")
	rec := do(t, newServer(f), http.MethodPost, "/v1/cluster/leave", `{"id":"n9"}`)
	wantError(t, rec, http.StatusNotFound, api.CodeNotFound, "n9")
}

// While quorum is lost no leader is known: after LeaderWait every request
// that needs the leader is 503 no_leader with Retry-After, and nothing was
// forwarded anywhere.
func TestNoLeader(t *testing.T) {
	for _, err := range []error{nodeapi.ErrNoLeader, nodeapi.ErrNotLeader} {
		for _, w := range writeRequests {
			t.Run(fmt.Sprintf("%v%s", err, w.path), func(t *testing.T) {
				t.Parallel() // each waits out LeaderWait
				f := failingStore(err, "")
				f.waitForLeader = noLeaderEver
				rec := do(t, newServer(f), http.MethodPost, w.path, w.body)
				wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "no leader")
				wantRetryAfter(t, rec)
				if rec.Header().Get(api.HeaderLeader) != "" {
					t.Errorf("%s %q while no leader is known", api.HeaderLeader, rec.Header().Get(api.HeaderLeader))
				}
			})
		}
		for _, r := range []string{"/v1/locks/orders%2F89041", "/v1/locks?prefix=a"} {
			t.Run(fmt.Sprintf("%v%s", err, r), func(t *testing.T) {
				t.Parallel()
				f := failingStore(err, "")
				f.waitForLeader = noLeaderEver
				rec := do(t, newServer(f), http.MethodGet, r, "")
				wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "no leader")
				wantRetryAfter(t, rec)
			})
		}
	}
}

// A node that has just won an election answers ErrNoLeader until its
// Barrier is through; the request waits for that instead of failing.
func TestNewLeaderNotReadyYet(t *testing.T) {
	f := newLeader("n1")
	var mu sync.Mutex
	refusals := 2
	f.apply = func(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return fsm.Result{}, nodeapi.ErrNoLeader
		}
		return f.applyLocal(cmd), nil
	}
	s := New(f, Options{LeaderWait: time.Minute}) // long: success must not race the deadline
	l := mustAcquire(t, s, `{"name":"a","ttl_ms":1000}`)
	if l.FencingToken != 1 || len(f.commands()) != 3 {
		t.Errorf("token %d after %d attempts, want 1 after 3", l.FencingToken, len(f.commands()))
	}

	// It never becomes ready: 503 once LeaderWait is over.
	f.apply = func(context.Context, fsm.Command) (fsm.Result, error) { return fsm.Result{}, nodeapi.ErrNoLeader }
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/acquire", `{"name":"b","ttl_ms":1000}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "")
	wantRetryAfter(t, rec)
}

// recordingLeader is an httptest server standing in for the leader: it
// records what reached it and answers with a fixed reply.
type recordingLeader struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, uri, forwardedBy, contentType, body string
}

func newRecordingLeader(t *testing.T, status int, reply string, hdr ...string) *recordingLeader {
	l := &recordingLeader{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.reqs = append(l.reqs, recorded{r.Method, r.RequestURI, r.Header.Get(api.HeaderForwardedBy), r.Header.Get("Content-Type"), string(body)})
		l.mu.Unlock()
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, reply)
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *recordingLeader) addr() string { return strings.TrimPrefix(l.URL, "http://") }

func (l *recordingLeader) requests() []recorded {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]recorded(nil), l.reqs...)
}

// follower is node n2 whose store refuses with ErrNotLeader and knows that
// n1 leads at addr.
func follower(addr string) *fakeStore {
	f := failingStore(nodeapi.ErrNotLeader, "n1")
	f.leader = func() (string, string) { return "n1", addr }
	return f
}

// A follower relays a write to the leader, one hop, with the original body
// and its own name in X-Raftlock-Forwarded-By, and relays the answer back.
func TestForwardWrites(t *testing.T) {
	for _, w := range writeRequests {
		t.Run(w.path, func(t *testing.T) {
			// Odd spacing: the leader must get the client's bytes, not a re-encoding.
			body := strings.Replace(w.body, "{", "{ ", 1)
			reply := `{"whatever":"the leader said"}`
			leader := newRecordingLeader(t, http.StatusOK, reply, api.HeaderLeader, "n1", "X-Other", "x")
			f := follower(leader.addr())
			rec := do(t, newServer(f), http.MethodPost, w.path, body)

			if rec.Code != http.StatusOK || rec.Body.String() != reply {
				t.Errorf("relayed %d %q, want 200 %q", rec.Code, rec.Body, reply)
			}
			if got := rec.Header().Get(api.HeaderLeader); got != "n1" {
				t.Errorf("%s %q, want n1", api.HeaderLeader, got)
			}
			if got := rec.Header().Get(api.HeaderNode); got != "n2" {
				t.Errorf("%s %q, want n2 (the node that answered the client)", api.HeaderNode, got)
			}
			want := []recorded{{http.MethodPost, w.path, "n2", "application/json", body}}
			if got := leader.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the leader got %+v, want %+v", got, want)
			}
		})
	}
}

// Errors and Retry-After come back from the leader as they were.
func TestForwardRelaysErrors(t *testing.T) {
	cases := []struct {
		status int
		reply  string
		hdr    []string
	}{
		{http.StatusConflict, `{"error":"held","message":"m","holder":{"owner":"worker-b","fencing_token":10481}}`, nil},
		{http.StatusConflict, `{"error":"not_holder","message":"m"}`, nil},
		{http.StatusBadRequest, `{"error":"bad_request","message":"name: m"}`, nil},
		{http.StatusServiceUnavailable, `{"error":"no_leader","message":"m"}`, []string{"Retry-After", "3"}},
		{http.StatusTooManyRequests, `{"error":"overloaded","message":"m"}`, []string{"Retry-After", "2"}},
	}
	for _, tc := range cases {
		t.Run(tc.reply, func(t *testing.T) {
			leader := newRecordingLeader(t, tc.status, tc.reply, tc.hdr...)
			rec := do(t, newServer(follower(leader.addr())), http.MethodPost, writeRequests[0].path, writeRequests[0].body)
			if rec.Code != tc.status || rec.Body.String() != tc.reply {
				t.Errorf("relayed %d %q, want %d %q", rec.Code, rec.Body, tc.status, tc.reply)
			}
			if len(tc.hdr) > 0 && rec.Header().Get("Retry-After") != tc.hdr[1] {
				t.Errorf("Retry-After %q, want %q", rec.Header().Get("Retry-After"), tc.hdr[1])
			}
		})
	}
}

// Linearizable reads go to the leader with their path escaping and query
// intact; stale reads are answered where they land.
func TestForwardReads(t *testing.T) {
	leader := newRecordingLeader(t, http.StatusOK, `{"name":"orders/89041","held":false}`)
	f := follower(leader.addr())
	s := newServer(f)
	for _, uri := range []string{"/v1/locks/orders%2F89041", "/v1/locks/orders/89041", "/v1/locks?prefix=orders%2F&limit=3"} {
		rec := do(t, s, http.MethodGet, uri, "")
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", uri, rec.Code, rec.Body)
		}
	}
	got := leader.requests()
	if len(got) != 3 || got[0].uri != "/v1/locks/orders%2F89041" || got[1].uri != "/v1/locks/orders/89041" ||
		got[2].uri != "/v1/locks?prefix=orders%2F&limit=3" || got[0].method != http.MethodGet || got[0].forwardedBy != "n2" {
		t.Errorf("the leader got %+v", got)
	}

	// A stale read is this node's own: it never travels.
	own := newLeader("n2")
	own.leader = f.leader
	own.apply = f.apply
	own.read = func(_ context.Context, stale bool) (nodeapi.LockReader, error) {
		if !stale {
			return nil, nodeapi.ErrNotLeader
		}
		return fsm.New(), nil
	}
	rec := do(t, newServer(own), http.MethodGet, "/v1/locks/x?stale=true", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"x","held":false,"index":0}`)
	if n := len(leader.requests()); n != 3 {
		t.Errorf("a stale read was forwarded (%d requests at the leader)", n)
	}
}

// End to end through two real Servers: a follower relays an acquire to a
// leader Server backed by a state machine.
func TestForwardToLeaderServer(t *testing.T) {
	lf := newLeader("n1")
	leader := httptest.NewServer(newServer(lf))
	defer leader.Close()
	f := follower(strings.TrimPrefix(leader.URL, "http://"))
	s := newServer(f)

	rec := do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-a","ttl_ms":10000,"lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"name":"orders/89041","owner":"worker-a","lease_id":"`+leaseA+`","fencing_token":1,"ttl_ms":10000}`)
	if rec.Header().Get(api.HeaderLeader) != "n1" || rec.Header().Get(api.HeaderNode) != "n2" {
		t.Errorf("headers %v", rec.Header())
	}
	rec = do(t, s, http.MethodPost, "/v1/locks/acquire", `{"name":"orders/89041","owner":"worker-b","ttl_ms":10000}`)
	wantJSON(t, rec, http.StatusConflict, `{"error":"held","message":"lock \"orders/89041\" is held by \"worker-a\" (fencing token 1)","holder":{"owner":"worker-a","fencing_token":1}}`)
	rec = do(t, s, http.MethodGet, "/v1/locks/orders%2F89041", "")
	wantJSON(t, rec, http.StatusOK, `{"name":"orders/89041","held":true,"owner":"worker-a","fencing_token":1,"ttl_ms":10000,"index":1}`)
	if len(lf.commands()) != 2 {
		t.Errorf("the leader applied %d commands, want 2", len(lf.commands()))
	}
}

// A request that was already forwarded, reaching a node that does not lead
// (leadership moved meanwhile), gets 503: never a second hop, never a loop.
func TestForwardedRequestIsNotForwardedAgain(t *testing.T) {
	other := newRecordingLeader(t, http.StatusOK, `{}`)
	for _, w := range writeRequests {
		t.Run(w.path, func(t *testing.T) {
			f := follower(other.addr())
			rec := do(t, newServer(f), http.MethodPost, w.path, w.body, api.HeaderForwardedBy, "n3")
			wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "n3")
			wantRetryAfter(t, rec)
		})
	}
	rec := do(t, newServer(follower(other.addr())), http.MethodGet, "/v1/locks/a", "", api.HeaderForwardedBy, "n3")
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, "n3")
	if n := len(other.requests()); n != 0 {
		t.Errorf("a forwarded request was forwarded again (%d requests)", n)
	}

	// Two followers that each believe the other leads: one hop, then 503.
	var a, b *httptest.Server
	a = httptest.NewServer(newServer(followerOf("na", func() string { return b.URL })))
	defer a.Close()
	b = httptest.NewServer(newServer(followerOf("nb", func() string { return a.URL })))
	defer b.Close()
	resp, err := http.Post(a.URL+"/v1/locks/acquire", "application/json", strings.NewReader(`{"name":"a","ttl_ms":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		body, _ := io.ReadAll(resp.Body)
		t.Errorf("two nodes pointing at each other: %d %s", resp.StatusCode, body)
	}
}

// followerOf is a node that believes "the-other" leads at url().
func followerOf(id string, url func() string) *fakeStore {
	f := failingStore(nodeapi.ErrNotLeader, "the-other")
	f.id = id
	f.leader = func() (string, string) { return "the-other", strings.TrimPrefix(url(), "http://") }
	return f
}

// A leader that cannot be reached is, for the client, no leader: 503.
func TestForwardLeaderUnreachable(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(gone.URL, "http://")
	gone.Close()
	for _, w := range writeRequests {
		t.Run(w.path, func(t *testing.T) {
			rec := do(t, newServer(follower(addr)), http.MethodPost, w.path, w.body)
			wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, addr)
			wantRetryAfter(t, rec)
		})
	}
	rec := do(t, newServer(follower(addr)), http.MethodGet, "/v1/locks/a", "")
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, addr)
}

// A follower that still names a leader that was killed sends the write on
// to its successor as soon as it learns of it, within LeaderWait, rather
// than answering 503 (and a Retry-After of a second) on top of the
// election. Nothing had reached the dead leader, so one request arrives.
func TestForwardUnreachableLeaderRetriedOnItsSuccessor(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	deadAddr := strings.TrimPrefix(gone.URL, "http://")
	gone.Close()
	leader := newRecordingLeader(t, http.StatusOK, `{"released":true}`)
	var asks atomic.Int32
	f := failingStore(nodeapi.ErrNotLeader, "old")
	f.waitForLeader = func(context.Context) (string, string, error) {
		if asks.Add(1) < 3 {
			return "old", deadAddr, nil // not yet noticed
		}
		return "new", leader.addr(), nil
	}
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"released":true}`)
	if n := len(leader.requests()); n != 1 {
		t.Errorf("%d requests at the new leader, want 1", n)
	}
}

// A follower that learns of the leader only while waiting forwards then.
func TestForwardAfterElection(t *testing.T) {
	leader := newRecordingLeader(t, http.StatusOK, `{"released":true}`)
	f := failingStore(nodeapi.ErrNoLeader, "")
	f.waitForLeader = func(context.Context) (string, string, error) { return "n1", leader.addr(), nil }
	rec := do(t, newServer(f), http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantJSON(t, rec, http.StatusOK, `{"released":true}`)
	if n := len(leader.requests()); n != 1 {
		t.Errorf("%d requests at the leader, want 1", n)
	}
}

// A forwarded write that fails after the request went out leaves the
// leader's decision unknown: 504 unknown_outcome, never 503. A read that
// fails the same way applied nothing: 503.
func TestForwardFailureAfterSendIsUnknown(t *testing.T) {
	leader := httpfault.BreakingLeader(t, "")
	addr := strings.TrimPrefix(leader.URL, "http://")
	for _, w := range writeRequests {
		t.Run(w.path, func(t *testing.T) {
			rec := do(t, newServer(follower(addr)), http.MethodPost, w.path, w.body)
			wantError(t, rec, http.StatusGatewayTimeout, api.CodeUnknownOutcome, addr)
			wantRetryAfter(t, rec)
		})
	}
	rec := do(t, newServer(follower(addr)), http.MethodGet, "/v1/locks/a", "")
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoLeader, addr)
}

// The request's deadline passing while the leader works on a forwarded
// write is also unknown.
func TestForwardTimeoutAfterSendIsUnknown(t *testing.T) {
	release := make(chan struct{})
	got := make(chan struct{}, 1)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		got <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer leader.Close()
	defer close(release)
	f := follower(strings.TrimPrefix(leader.URL, "http://"))
	s := New(f, Options{LeaderWait: testLeaderWait, RequestTimeout: 50 * time.Millisecond, Metrics: http.NotFoundHandler()})
	rec := do(t, s, http.MethodPost, "/v1/locks/release", `{"name":"a","lease_id":"`+leaseA+`"}`)
	wantError(t, rec, http.StatusGatewayTimeout, api.CodeUnknownOutcome, "deadline")
	select {
	case <-got:
	default:
		t.Error("the leader never got the request")
	}
}

// Linearizable reads of sessions and semaphores go to the leader as lock
// reads do, path escaping intact; stale ones are answered where they land.
func TestForwardIssue15Reads(t *testing.T) {
	leader := newRecordingLeader(t, http.StatusOK, `{}`)
	f := follower(leader.addr())
	f.read = func(_ context.Context, stale bool) (nodeapi.LockReader, error) {
		if !stale {
			return nil, nodeapi.ErrNotLeader
		}
		return fsm.New(), nil
	}
	s := newServer(f)
	for _, uri := range []string{"/v1/semaphores/pool%2Fa", "/v1/semaphores/pool/a", "/v1/sessions/" + sessA} {
		if rec := do(t, s, http.MethodGet, uri, ""); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", uri, rec.Code, rec.Body)
		}
	}
	got := leader.requests()
	if len(got) != 3 || got[0].uri != "/v1/semaphores/pool%2Fa" || got[1].uri != "/v1/semaphores/pool/a" ||
		got[2].uri != "/v1/sessions/"+sessA || got[2].forwardedBy != "n2" {
		t.Errorf("the leader got %+v", got)
	}
	wantJSON(t, do(t, s, http.MethodGet, "/v1/semaphores/pool%2Fa?stale=true", ""), http.StatusOK, `{"name":"pool/a","limit":0,"holders":[],"index":0}`)
	wantError(t, do(t, s, http.MethodGet, "/v1/sessions/"+sessA+"?stale=true", ""), http.StatusNotFound, api.CodeNoSession, "")
	if n := len(leader.requests()); n != 3 {
		t.Errorf("a stale read was forwarded (%d requests at the leader)", n)
	}
}
