package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestElectionCampaignProclaimResign(t *testing.T) {
	fc := startFake(t, 1)
	c := newWatchClient(t, fc.Endpoints())
	ctx := context.Background()
	e1 := NewElection(c, "leader", ElectionOptions{TTL: 10 * time.Second, Owner: "one"})
	e2 := NewElection(c, "leader", ElectionOptions{TTL: 10 * time.Second, Owner: "two"})

	if st, err := e1.Leader(ctx); !errors.Is(err, ErrNoLeaderElected) || st.Held {
		t.Fatalf("Leader before any campaign: %+v, %v; want ErrNoLeaderElected", st, err)
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("Proclaim before leading: %v, want ErrNotLeading", err)
	}
	l1, err := e1.Campaign(ctx, "addr-1")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e2.Leader(ctx); err != nil || st.Value != "addr-1" || st.Token != l1.Token() {
		t.Fatalf("Leader: %+v, %v; want addr-1 with token %d", st, err, l1.Token())
	}
	if err := e1.Proclaim(ctx, "addr-1b"); err != nil {
		t.Fatal(err)
	}
	if st, _ := e2.Leader(ctx); st.Value != "addr-1b" || st.Token != l1.Token() {
		t.Fatalf("Leader after Proclaim: %+v; want addr-1b, same token", st)
	}

	won := make(chan *Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := e2.Campaign(ctx, "addr-2")
		errc <- err
		won <- l
	}()
	// e2 waits in the server's queue: wait for its acquire to arrive.
	waitFor(t, func() bool { return len(fc.requests(path("/v1/locks/acquire"))) >= 2 })
	select {
	case <-errc:
		t.Fatal("second candidate won while the first leads")
	default:
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	l2 := <-won
	if l2.Token() <= l1.Token() {
		t.Fatalf("second leader's token %d not above the first's %d", l2.Token(), l1.Token())
	}
	if st, _ := e1.Leader(ctx); st.Value != "addr-2" {
		t.Fatalf("Leader after resign: %+v, want addr-2", st)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// events records RunElection's callbacks in order.
type events struct {
	mu  sync.Mutex
	evs []string
}

func (e *events) add(s string) { e.mu.Lock(); e.evs = append(e.evs, s); e.mu.Unlock() }

func (e *events) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.evs {
		if x == s {
			return true
		}
	}
	return false
}

func TestRunElectionLeadershipContextEndsOnLoss(t *testing.T) {
	fc := startFake(t, 1)
	c := newWatchClient(t, fc.Endpoints())
	var ev events
	started := make(chan struct{})
	var cause error
	done := make(chan error, 1)
	go func() {
		done <- RunElection(context.Background(), c, "leader", "me", Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				close(started)
				<-ctx.Done()
				cause = context.Cause(ctx)
				ev.add("ctx ended")
			},
			OnStoppedLeading: func() { ev.add("stopped") },
			OnNewLeader:      func(v string) { ev.add("leader " + v) },
			OnNoLeader:       func() { ev.add("no leader") },
		}, ElectionOptions{TTL: 600 * time.Millisecond})
	}()
	<-started
	waitFor(t, func() bool { return ev.has("leader me") })
	fc.drop("leader") // expired behind our back: the next renew is refused
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("RunElection did not return after the lease was lost")
	}
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("RunElection: %v, leader's ctx cause %v; both want ErrLeaseLost", err, cause)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	last2 := ev.evs[len(ev.evs)-2:]
	if last2[0] != "ctx ended" || last2[1] != "stopped" {
		t.Fatalf("events %v: want the leader's ctx to end, then OnStoppedLeading", ev.evs)
	}
}

func TestRunElectionResignsOnCancel(t *testing.T) {
	fc := startFake(t, 1)
	c := newWatchClient(t, fc.Endpoints())
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- RunElection(ctx, c, "leader", "me", Callbacks{
			OnStartedLeading: func(ctx context.Context) { close(started); <-ctx.Done() },
			OnStoppedLeading: func() { close(stopped) },
		}, ElectionOptions{})
	}()
	<-started
	if _, held := fc.holder("leader"); !held {
		t.Fatal("leader's lock not held while it leads")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunElection after cancel: %v, want nil", err)
	}
	<-stopped
	if _, held := fc.holder("leader"); held {
		t.Fatal("lock still held after RunElection returned: not resigned")
	}
}
