package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Lease is a held lock. A watchdog goroutine renews it about every TTL/3
// until Release (or Detach); if a renewal is refused (not_holder) or none
// succeeds before the deadline, the lease is lost: Lost is closed and Context
// is cancelled at once.
//
// Pass Token to the storage the lock protects, so that it can refuse writes
// from a holder that lost the lock (fencing).
type Lease struct {
	c     *Client
	name  string
	owner string
	id    string
	token uint64
	ttl   time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}
	stop   chan struct{} // closed to stop the watchdog
	done   chan struct{} // closed when the watchdog has returned

	mu       sync.Mutex
	deadline time.Time // local clock; only moves forward
	sent     time.Time // send time of the acquire/renew that set deadline
	err      error     // why the lease was lost
	value    string    // the value last published (AcquireOptions.Value, SetValue)
	ended    bool      // Release or Detach ran

	stopOnce sync.Once
	lostOnce sync.Once

	releaseMu  sync.Mutex
	releaseErr error
}

func (c *Client) newLease(name, owner, id string, token uint64, ttl time.Duration, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		c: c, name: name, owner: owner, id: id, token: token, ttl: ttl,
		ctx: ctx, cancel: cancel,
		lost: make(chan struct{}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.sent = sent
	l.deadline = sent.Add(c.validFor(ttl))
	go l.watchdog()
	return l
}

// validFor is how long after the send time of an acquire or renew the client
// may trust the lease: TTL × (1 − drift), per the contract's guarantee 2.
func (c *Client) validFor(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * (1 - c.drift))
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner string given at acquire.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: the same for the whole lease, and larger
// than the token of every earlier holder of the lock.
func (l *Lease) Token() uint64 { return l.token }

// LeaseID returns the lease's secret id, which proves ownership to renew and
// release. Do not log it.
func (l *Lease) LeaseID() string { return l.id }

// TTL returns the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Deadline returns the time, on the client's clock, until which the lease is
// known to be held: the send time of the last successful acquire or renew
// plus TTL × (1 − drift).
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns a context that is cancelled when the lease is lost, its
// deadline passes, or it is released or detached; context.Cause tells which
// (ErrLeaseLost, ErrReleased, ErrDetached).
func (l *Lease) Context() context.Context { return l.ctx }

// Lost returns a channel closed when the lease is lost. It is not closed by
// Release or Detach.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Value returns the value this lease last published with the lock.
func (l *Lease) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// SetValue replaces the value published with the lock (POST
// /v1/locks/update); the fencing token stays. It returns an error matching
// ErrNotHolder if this lease no longer holds the lock. Resending the same
// value is harmless, so it is retried across nodes until ctx ends.
func (l *Lease) SetValue(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	_, err := l.c.do(ctx, request{
		method: http.MethodPost, path: "/v1/locks/update",
		body:   api.UpdateRequest{Name: l.name, LeaseID: l.id, Value: value},
		leader: true, idempotent: true, lock: l.name,
	}, nil)
	if err != nil {
		return fmt.Errorf("raftlock: update value of %q: %w", l.name, err)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// Err returns why the lease was lost (it matches ErrLeaseLost), or nil.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release stops the watchdog and releases the lock. If the lease was lost
// before, Release returns the error that lost it (matching ErrLeaseLost), after
// still trying to release the lock when the server may hold it. After Release
// returns, the lease is no longer renewed, whatever the result; calling it
// again returns the same result.
func (l *Lease) Release(ctx context.Context) error {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	l.stopWatchdog()
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return l.releaseErr
	}
	l.ended = true
	lostErr := l.err
	l.mu.Unlock()

	var err error
	if lostErr == nil || !errors.Is(lostErr, ErrNotHolder) {
		err = l.c.Release(ctx, l.name, l.id)
	}
	l.cancel(ErrReleased)
	switch {
	case lostErr != nil:
		l.releaseErr = lostErr
	case err != nil:
		l.releaseErr = fmt.Errorf("raftlock: release %q: %w", l.name, err)
	}
	return l.releaseErr
}

// Detach stops the watchdog without releasing the lock, which stays held
// until its TTL runs out or someone renews or releases it by LeaseID (see
// Client.Renew, Client.Release). The lease's Context is cancelled.
func (l *Lease) Detach() {
	l.releaseMu.Lock()
	defer l.releaseMu.Unlock()
	l.stopWatchdog()
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
	l.cancel(ErrDetached)
}

func (l *Lease) stopWatchdog() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// lose marks the lease lost, once.
func (l *Lease) lose(cause error) {
	l.mu.Lock()
	if l.err != nil || l.ended {
		l.mu.Unlock()
		return
	}
	l.err = cause
	l.mu.Unlock()
	l.lostOnce.Do(func() { close(l.lost) })
	l.cancel(cause)
	l.c.log.Warn("lease lost", "lock", l.name, "token", l.token, "error", cause)
}

// extend records a successful renew sent at sent.
func (l *Lease) extend(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := sent.Add(l.c.validFor(l.ttl)); d.After(l.deadline) {
		l.deadline, l.sent = d, sent
	}
}

// renewInterval is TTL/3 with ±10% jitter, so that many leases taken at once
// do not renew in lockstep.
func (l *Lease) renewInterval() time.Duration {
	d := l.ttl / 3
	return d*9/10 + rand.N(d/5+1)
}

func (l *Lease) watchdog() {
	defer close(l.done)
	clk := l.c.clock
	for {
		l.mu.Lock()
		deadline, sent := l.deadline, l.sent
		l.mu.Unlock()
		now := clk.Now()
		if !now.Before(deadline) {
			l.lose(fmt.Errorf("%w: deadline passed before a renewal succeeded", ErrLeaseLost))
			return
		}
		if wait := sent.Add(l.renewInterval()).Sub(now); wait > 0 {
			t := clk.NewTimer(wait)
			select {
			case <-l.stop:
				t.Stop()
				return
			case <-t.C():
			}
		}
		if !l.renewBeforeDeadline() {
			return
		}
	}
}

// renewBeforeDeadline renews, retrying across nodes, until a renewal
// succeeds (true), or the lease is lost or stopped (false).
func (l *Lease) renewBeforeDeadline() bool {
	clk := l.c.clock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- l.renewLoop(ctx) }()
	t := clk.NewTimer(l.Deadline().Sub(clk.Now()))
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			l.lose(err)
			return false
		}
		return true
	case <-l.stop:
		cancel()
		<-res
		return false
	case <-t.C():
		// Lost at once: the work under the lock must stop now, not after
		// the renewal in flight gives up. Unless that renewal just
		// succeeded and moved the deadline.
		if clk.Now().Before(l.Deadline()) {
			return l.renewResult(<-res)
		}
		l.lose(fmt.Errorf("%w: deadline passed before a renewal succeeded", ErrLeaseLost))
		cancel()
		<-res
		return false
	}
}

func (l *Lease) renewResult(err error) bool {
	if err != nil {
		l.lose(err)
		return false
	}
	return true
}

// renewLoop renews until success, a refusal, or ctx ends.
func (l *Lease) renewLoop(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		info, tried, err := l.c.renew(ctx, l.name, l.id, 0)
		switch {
		case err == nil && info.Token != l.token:
			return fmt.Errorf("%w: renew answered fencing token %d, lease has %d", ErrLeaseLost, info.Token, l.token)
		case err == nil:
			l.extend(tried.sent)
			return nil
		case errors.Is(err, ErrNotHolder):
			return fmt.Errorf("%w: %w", ErrLeaseLost, err)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		l.c.log.Debug("renew failed", "lock", l.name, "error", err)
		if l.c.sleep(ctx, l.c.backoff(attempt)) != nil {
			return ctx.Err()
		}
	}
}
