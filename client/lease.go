package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Lease is a held lock. A watchdog goroutine renews it about every TTL/3
// until Release (or Detach); if a renewal is refused (not_holder) or none
// succeeds before the deadline, the lease is lost: Lost is closed and Context
// is cancelled at once. A lease taken through a Session has no watchdog of
// its own: it lives, and is lost, with its session.
//
// Pass Token to the storage the lock protects, so that it can refuse writes
// from a holder that lost the lock (fencing).
type Lease struct {
	grant
	shared bool
	value  string // the value last published (AcquireOptions.Value, SetValue); under mu
}

// grant is what a Lease and a Permit share: a lease on the cluster, kept
// alive by its own watchdog or by a Session, and the ways it ends.
type grant struct {
	c     *Client
	kind  string // "lock" or "semaphore", in logs
	name  string
	owner string
	id    string
	token uint64
	ttl   time.Duration
	sess  *Session   // the session that keeps it alive, if any
	ka    *keepalive // its own watchdog; nil when sess keeps it alive
	// release is the server-side release by lease id.
	release func(ctx context.Context) error

	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}
	done   chan struct{} // closed when the watchdog has returned (at once without one)

	mu    sync.Mutex
	err   error // why it was lost
	ended bool  // Release or Detach ran, or its session was closed

	lostOnce sync.Once

	releaseMu  sync.Mutex
	releaseErr error
}

// initGrant fills in the parts every grant has; the caller then sets ka or
// binds it to a session.
func (g *grant) initGrant(c *Client, kind, name, owner, id string, token uint64, ttl time.Duration) {
	g.c, g.kind, g.name, g.owner, g.id, g.token, g.ttl = c, kind, name, owner, id, token, ttl
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	g.lost = make(chan struct{})
	g.done = make(chan struct{})
	close(g.done) // until keepAlive gives it a watchdog
}

// keepAlive gives the grant its own watchdog, trusting it from sent, with
// renew as one renewal.
func (g *grant) keepAlive(sent time.Time, renew func(ctx context.Context) (time.Time, bool, error)) {
	g.ka = g.c.newKeepalive(g.ttl, sent, ErrLeaseLost, g.kind, g.name)
	g.ka.renew, g.ka.lose = renew, g.lose
	g.done = g.ka.done
	g.ka.start()
}

func (c *Client) newLease(name, owner, id string, token uint64, ttl time.Duration, sent time.Time) *Lease {
	l := &Lease{}
	l.initGrant(c, "lock", name, owner, id, token, ttl)
	l.release = func(ctx context.Context) error { return c.Release(ctx, name, id) }
	l.keepAlive(sent, func(ctx context.Context) (time.Time, bool, error) {
		info, tried, err := c.renew(ctx, name, id, 0)
		switch {
		case err == nil && info.Token != token:
			return time.Time{}, true, fmt.Errorf("%w: renew answered fencing token %d, lease has %d", ErrLeaseLost, info.Token, token)
		case err == nil:
			return tried.sent, false, nil
		case errors.Is(err, ErrNotHolder):
			return time.Time{}, true, fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
		return time.Time{}, false, err
	})
	return l
}

// newSessionLease returns a lease that sess keeps alive, or the session's
// loss if it ended meanwhile.
func (c *Client) newSessionLease(sess *Session, name, owner, id string, token uint64, ttl time.Duration) (*Lease, error) {
	l := &Lease{}
	l.initGrant(c, "lock", name, owner, id, token, ttl)
	l.release = func(ctx context.Context) error { return c.Release(ctx, name, id) }
	if err := sess.bind(&l.grant); err != nil {
		return nil, err
	}
	return l, nil
}

// Name returns the lock's (or semaphore's) name.
func (g *grant) Name() string { return g.name }

// Owner returns the owner string given at acquire.
func (g *grant) Owner() string { return g.owner }

// Token returns the fencing token: the same for the whole lease, and larger
// than the token of every earlier holder of the lock (of a permit: of every
// earlier holder of its slot).
func (g *grant) Token() uint64 { return g.token }

// LeaseID returns the lease's secret id, which proves ownership to renew and
// release. Do not log it.
func (g *grant) LeaseID() string { return g.id }

// TTL returns the lease's time to live (its session's, if it has one).
func (g *grant) TTL() time.Duration { return g.ttl }

// Session returns the session that keeps the lease alive, or nil if it
// renews itself.
func (g *grant) Session() *Session { return g.sess }

// Deadline returns the time, on the client's clock, until which the lease is
// known to be held: the send time of the last successful acquire or renew
// (of the session, for a lease taken through one) plus TTL × (1 − drift).
func (g *grant) Deadline() time.Time {
	if g.sess != nil {
		return g.sess.Deadline()
	}
	return g.ka.Deadline()
}

// Context returns a context that is cancelled when the lease is lost, its
// deadline passes, or it is released or detached; context.Cause tells which
// (ErrLeaseLost, ErrReleased, ErrDetached).
func (g *grant) Context() context.Context { return g.ctx }

// Done returns a channel closed when the lease ends for any reason: lost,
// released, detached, or its session lost or closed. It is Context().Done().
func (g *grant) Done() <-chan struct{} { return g.ctx.Done() }

// Lost returns a channel closed when the lease is lost. It is not closed by
// Release or Detach, nor by closing its session.
func (g *grant) Lost() <-chan struct{} { return g.lost }

// Err returns why the lease was lost (it matches ErrLeaseLost), or nil.
func (g *grant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Shared reports whether the lease holds the lock in shared mode.
func (l *Lease) Shared() bool { return l.shared }

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
	if l.shared {
		return fmt.Errorf("raftlock: update value of %q: a shared hold publishes no value", l.name)
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

// Release stops the watchdog and releases the lock. If the lease was lost
// before, Release returns the error that lost it (matching ErrLeaseLost), after
// still trying to release the lock when the server may hold it. After Release
// returns, the lease is no longer renewed, whatever the result; calling it
// again returns the same result. Releasing a lease of a session leaves the
// session and its other leases alone.
func (g *grant) Release(ctx context.Context) error {
	g.releaseMu.Lock()
	defer g.releaseMu.Unlock()
	g.stopWatchdog()
	g.mu.Lock()
	if g.ended {
		g.mu.Unlock()
		return g.releaseErr
	}
	g.ended = true
	lostErr := g.err
	g.mu.Unlock()
	if g.sess != nil {
		g.sess.unbind(g)
	}

	var err error
	// not_holder and no_session both say the server holds nothing for it.
	if lostErr == nil || !(errors.Is(lostErr, ErrNotHolder) || errors.Is(lostErr, ErrNoSession)) {
		err = g.release(ctx)
	}
	g.cancel(ErrReleased)
	switch {
	case lostErr != nil:
		g.releaseErr = lostErr
	case err != nil:
		g.releaseErr = fmt.Errorf("raftlock: release %q: %w", g.name, err)
	}
	return g.releaseErr
}

// Detach stops the watchdog without releasing the lock, which stays held
// until its TTL runs out (or its session ends) or someone renews or releases
// it by LeaseID (see Client.Renew, Client.Release). The lease's Context is
// cancelled.
func (g *grant) Detach() {
	g.releaseMu.Lock()
	defer g.releaseMu.Unlock()
	g.stopWatchdog()
	g.mu.Lock()
	g.ended = true
	g.mu.Unlock()
	if g.sess != nil {
		g.sess.unbind(g)
	}
	g.cancel(ErrDetached)
}

func (g *grant) stopWatchdog() {
	if g.ka != nil {
		g.ka.stopAndWait()
	}
}

// lose marks the lease lost, once.
func (g *grant) lose(cause error) {
	g.mu.Lock()
	if g.err != nil || g.ended {
		g.mu.Unlock()
		return
	}
	g.err = cause
	g.mu.Unlock()
	// Context first: whoever wakes on Lost must find its cause set.
	g.cancel(cause)
	g.lostOnce.Do(func() { close(g.lost) })
	g.c.log.Warn("lease lost", g.kind, g.name, "token", g.token, "error", cause)
}

// closedWithSession ends the lease because its session was closed, which
// released it on the server: as a Release, without a request.
func (g *grant) closedWithSession() {
	g.mu.Lock()
	if g.err != nil || g.ended {
		g.mu.Unlock()
		return
	}
	g.ended = true
	g.mu.Unlock()
	g.cancel(fmt.Errorf("%w: %w", ErrReleased, ErrSessionClosed))
}
