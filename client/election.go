package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// ErrNoLeaderElected: nobody leads the election (its lock is free). Unlike
// ErrNoLeader, it is an answer about the election, not a cluster failure.
var ErrNoLeaderElected = errors.New("raftlock: nobody leads the election")

// ErrNotLeading: Proclaim was called on an Election that does not lead.
var ErrNotLeading = errors.New("raftlock: this election does not lead")

// ElectionOptions are the options of an Election.
type ElectionOptions struct {
	// TTL, Owner, LockDelay and Wait are those of the leader's lease (see
	// AcquireOptions). A leader that dies is replaced within about TTL.
	TTL       time.Duration
	Owner     string
	LockDelay time.Duration
	Wait      time.Duration
	// Stale lets Leader and Observe read from any node (see
	// ObserveOptions.Stale); by default they read from the leader.
	Stale bool
}

// Election is a leader election on one lock: the leader is the lease that
// holds it, and publishes its value (say, its address) with the lock.
// Candidates wait their turn first come, first served, as Acquire's waiters
// do. It is safe for concurrent use.
type Election struct {
	c    *Client
	name string
	opts ElectionOptions

	mu    sync.Mutex
	lease *Lease // while this Election leads (or until Resign)
}

// NewElection returns an election on lock name.
func NewElection(c *Client, name string, opts ElectionOptions) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Campaign waits until this candidate leads, publishing value, or ctx ends.
// The returned lease renews itself; its Context ends, and its Lost channel
// is closed, when leadership can no longer be trusted. If this Election
// already leads, Campaign proclaims value and returns its lease.
func (e *Election) Campaign(ctx context.Context, value string) (*Lease, error) {
	if l := e.Lease(); l != nil && l.Context().Err() == nil {
		return l, l.SetValue(ctx, value)
	}
	l, err := e.c.Acquire(ctx, e.name, AcquireOptions{
		TTL: e.opts.TTL, Owner: e.opts.Owner, LockDelay: e.opts.LockDelay, Wait: e.opts.Wait, Value: value,
	})
	if err != nil {
		return nil, fmt.Errorf("raftlock: campaign for %q: %w", e.name, err)
	}
	e.mu.Lock()
	e.lease = l
	e.mu.Unlock()
	return l, nil
}

// Lease returns the lease of this Election's leadership, or nil.
func (e *Election) Lease() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease
}

// Proclaim publishes a new value while this Election leads. It returns an
// error matching ErrNotLeading if it never led (or resigned), or
// ErrNotHolder if its lease was lost.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l := e.Lease()
	if l == nil {
		return ErrNotLeading
	}
	return l.SetValue(ctx, value)
}

// Resign gives up leadership, if this Election leads, so that the next
// candidate leads now rather than after the TTL.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

// Leader returns the current leader's state (Value is what it published).
// When nobody leads it returns the free lock's state and an error matching
// ErrNoLeaderElected.
func (e *Election) Leader(ctx context.Context) (LockState, error) {
	st, err := e.c.readState(ctx, e.name, e.opts.Stale)
	if err != nil {
		return st, err
	}
	if !st.Held {
		return st, ErrNoLeaderElected
	}
	return st, nil
}

// Observe reports each change of leader (or of its value), and "no leader"
// (Held false), in index order, never going back to an older leader; see
// Client.Observe.
func (e *Election) Observe(ctx context.Context) <-chan LockState {
	return e.c.Observe(ctx, e.name, ObserveOptions{Stale: e.opts.Stale})
}

// readState reads lock name once, with its value and index.
func (c *Client) readState(ctx context.Context, name string, stale bool) (LockState, error) {
	r := request{method: http.MethodGet, path: "/v1/locks/" + url.PathEscape(name), leader: !stale, idempotent: true}
	if stale {
		r.query = "stale=true"
	}
	var j api.Lock
	if _, err := c.do(ctx, r, &j); err != nil {
		return LockState{}, err
	}
	return lockState(&j), nil
}

// Callbacks are what RunElection calls. OnStartedLeading is required; the
// others may be nil. OnNewLeader and OnNoLeader are called in index order,
// from their own goroutine, possibly while OnStartedLeading runs.
type Callbacks struct {
	// OnStartedLeading runs once this candidate leads. Its ctx ends when
	// leadership can no longer be trusted (the lease was lost: the cause
	// matches ErrLeaseLost) or RunElection's ctx ends; it must then stop its
	// leader's work and return. Its returning ends the leadership.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading runs after OnStartedLeading has returned and the
	// leadership was given up.
	OnStoppedLeading func()
	// OnNewLeader is called with the value of each new leader (or a
	// leader's new value), this candidate included.
	OnNewLeader func(value string)
	// OnNoLeader is called when nobody leads any more.
	OnNoLeader func()
}

// RunElection campaigns for lock name with value and, once it leads, runs
// cb.OnStartedLeading; when that returns, or its ctx ends, it resigns (even
// when ctx has ended, so that the next candidate need not wait for the TTL)
// and calls cb.OnStoppedLeading. It runs one term: it returns nil when ctx
// ended or OnStartedLeading returned, an error matching ErrLeaseLost when
// the leadership was lost, or the campaign's error. Run it in a loop to
// stand again.
func RunElection(ctx context.Context, c *Client, name, value string, cb Callbacks, opts ElectionOptions) error {
	if cb.OnStartedLeading == nil {
		return errors.New("raftlock: RunElection needs OnStartedLeading")
	}
	octx, stopObserve := context.WithCancel(ctx)
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		if cb.OnNewLeader != nil || cb.OnNoLeader != nil {
			reportLeaders(octx, c, name, opts.Stale, cb)
		}
	}()
	defer func() { stopObserve(); <-observed }()

	e := NewElection(c, name, opts)
	lease, err := e.Campaign(ctx, value)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	cb.OnStartedLeading(lctx)
	stop()
	cancel(nil)
	lostErr := lease.Err()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.requestTimeout)
	rerr := e.Resign(rctx)
	rcancel()
	if rerr != nil && lostErr == nil {
		c.log.Warn("resign failed; the lock frees itself after its TTL", "lock", name, "error", rerr)
	}
	if cb.OnStoppedLeading != nil {
		cb.OnStoppedLeading()
	}
	return lostErr
}

// reportLeaders calls OnNewLeader / OnNoLeader for each change of leader
// or value that Observe reports.
func reportLeaders(ctx context.Context, c *Client, name string, stale bool, cb Callbacks) {
	var last LockState
	first := true
	for st := range c.Observe(ctx, name, ObserveOptions{Stale: stale}) {
		switch {
		case st.Held && (first || !last.Held || st.Token != last.Token || st.Value != last.Value):
			if cb.OnNewLeader != nil {
				cb.OnNewLeader(st.Value)
			}
		case !st.Held && (first || last.Held):
			if cb.OnNoLeader != nil {
				cb.OnNoLeader()
			}
		}
		last, first = st, false
	}
}
