package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/nodeapi"
	"github.com/raftlock/raftlock/raftnode"
)

// flakyLeader is an httpapi.Store that leads alone over a real state
// machine. fail, when set, decides per command whether to answer with an
// error after applying it (the entry committed, the answer was lost).
type flakyLeader struct {
	mu      sync.Mutex
	machine *fsm.Machine
	index   uint64
	cmds    []fsm.Command
	fail    func(cmd fsm.Command, n int) error // n: commands of this op so far, from 1
}

func (f *flakyLeader) ID() string                       { return "n1" }
func (f *flakyLeader) Leader() (string, string)         { return "n1", "" }
func (f *flakyLeader) Ready() bool                      { return true }
func (f *flakyLeader) Status() (raftnode.Status, error) { return raftnode.Status{Leader: "n1"}, nil }
func (f *flakyLeader) WaitForLeader(context.Context) (string, string, error) {
	return "n1", "", nil
}
func (f *flakyLeader) Join(context.Context, string, string, string) error { return nil }
func (f *flakyLeader) Leave(context.Context, string) error                { return nil }
func (f *flakyLeader) TransferLeadership(context.Context, string) error   { return nil }
func (f *flakyLeader) CheckState(context.Context) (uint64, error)         { return 0, nil }

func (f *flakyLeader) Read(context.Context, bool) (nodeapi.LockReader, error) { return f.machine, nil }

func (f *flakyLeader) Acquire(ctx context.Context, cmd fsm.Command, _ time.Duration) (fsm.Result, error) {
	return f.Apply(ctx, cmd)
}

func (f *flakyLeader) Apply(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, cmd)
	n := 0
	for _, c := range f.cmds {
		if c.Op == cmd.Op {
			n++
		}
	}
	f.index++
	res := f.machine.ApplyCommand(f.index, 1, cmd)
	if f.fail != nil {
		if err := f.fail(cmd, n); err != nil {
			return fsm.Result{}, err
		}
	}
	return res, nil
}

func (f *flakyLeader) commands(op fsm.Op) []fsm.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fsm.Command
	for _, c := range f.cmds {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// startFlaky serves the real HTTP API over f.
func startFlaky(t *testing.T, f *flakyLeader) *Client {
	t.Helper()
	f.machine = fsm.New()
	srv := httptest.NewServer(httpapi.New(f, httpapi.Options{Metrics: http.NotFoundHandler()}))
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A release that committed while the leader lost leadership was
// answered 503 no_leader, which promises nothing was applied; the client
// resent it, got not_holder and reported ErrNotHolder. The server now says
// 504 unknown_outcome, and not_holder after an unknown release is success.
func TestReleaseCommittedDuringLeadershipLossSucceeds(t *testing.T) {
	f := &flakyLeader{}
	c := startFlaky(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lease.Detach()
	f.mu.Lock()
	f.fail = func(cmd fsm.Command, n int) error {
		if cmd.Op == fsm.OpRelease && n == 1 {
			return raftnode.ErrIndeterminate
		}
		return nil
	}
	f.mu.Unlock()
	if err := c.Release(ctx, "a", lease.LeaseID()); err != nil {
		t.Fatalf("Release = %v, want success: the first attempt committed", err)
	}
	if n := len(f.commands(fsm.OpRelease)); n != 2 {
		t.Errorf("%d release attempts, want 2", n)
	}
}

// An acquire whose outcome is unknown is resent with the same lease id,
// and gets the lease the first attempt created.
func TestAcquireRetriedAfterUnknownOutcome(t *testing.T) {
	f := &flakyLeader{fail: func(cmd fsm.Command, n int) error {
		if cmd.Op == fsm.OpAcquire && n == 1 {
			return raftnode.ErrIndeterminate
		}
		return nil
	}}
	c := startFlaky(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.TryAcquire(ctx, "a", AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	acq := f.commands(fsm.OpAcquire)
	if len(acq) != 2 || acq[0].LeaseID != acq[1].LeaseID || acq[0].LeaseID != lease.LeaseID() {
		t.Fatalf("acquires %+v, lease %q: want two with the lease's id", acq, lease.LeaseID())
	}
	if lease.Token() != 1 {
		t.Errorf("token %d, want 1 (the first attempt's grant)", lease.Token())
	}
}

// When every attempt's outcome is unknown, the error says so once the
// caller's context ends, along with the deadline and the server's answer.
func TestUnknownOutcomeWhenRetriesRunOut(t *testing.T) {
	f := &flakyLeader{}
	c := startFlaky(t, f)
	lease, err := c.TryAcquire(context.Background(), "a", AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	lease.Detach()
	f.mu.Lock()
	f.fail = func(cmd fsm.Command, _ int) error {
		if cmd.Op == fsm.OpRenew {
			return raftnode.ErrIndeterminate
		}
		return nil
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Renew(ctx, "a", lease.LeaseID(), 0)
	var ae *APIError
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) ||
		!errors.As(err, &ae) || ae.Status != http.StatusGatewayTimeout || ae.Code != CodeUnknownOutcome {
		t.Fatalf("Renew = %v, want ErrUnknownOutcome, the deadline and the 504", err)
	}
	if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotHolder) {
		t.Errorf("Renew = %v: matches a sentinel that promises nothing was applied", err)
	}
}

// A request that is not resent (transfer-leadership) returns the unknown
// outcome at once.
func TestUnknownOutcomeNotResent(t *testing.T) {
	fc := startFake(t, 1)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		w.Write([]byte(`{"error":"unknown_outcome","message":"outcome unknown"}`))
		return true
	})
	c, _ := newTestClient(t, fc.Endpoints())
	_, err := c.TransferLeadership(context.Background(), "n2")
	if !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("TransferLeadership = %v, want ErrUnknownOutcome", err)
	}
	if n := len(fc.requests(nil)); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// A connection that fails after the request went out is an unknown outcome
// too, once the context ends.
func TestDroppedConnectionIsUnknownOutcome(t *testing.T) {
	fc := startFake(t, 1)
	fc.setHook(func(n *fakeNode, req fakeReq, w http.ResponseWriter, r *http.Request) bool {
		if req.Path != "/v1/locks/release" {
			return false
		}
		dropConnection(w)
		return true
	})
	c, err := New(fc.Endpoints(), WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Release(ctx, "a", "lease-A_0123456789"); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("Release = %v, want ErrUnknownOutcome", err)
	}
}
