package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// keepalive is the watchdog of a Lease, a Permit or a Session: it renews
// about every TTL/3 and, when a renewal is refused or none succeeds before
// the deadline, calls lose once and returns.
type keepalive struct {
	c    *Client
	ttl  time.Duration
	what []any // log fields naming what is kept alive
	// expired is what a passed deadline is lost with (ErrLeaseLost,
	// ErrSessionLost).
	expired error
	// renew sends one renewal (retried across nodes until ctx ends) and
	// returns the send time the new deadline counts from. refused says err
	// is the server's refusal (or a wrong answer): it ends the keepalive;
	// any other error is retried with backoff.
	renew func(ctx context.Context) (sent time.Time, refused bool, err error)
	lose  func(cause error)

	stop     chan struct{} // closed to stop the watchdog
	done     chan struct{} // closed when the watchdog has returned
	stopOnce sync.Once

	mu       sync.Mutex
	deadline time.Time // local clock; only moves forward
	sent     time.Time // send time of the grant or renew that set deadline
}

// newKeepalive returns a keepalive whose deadline counts from sent; start
// runs it.
func (c *Client) newKeepalive(ttl time.Duration, sent time.Time, expired error, what ...any) *keepalive {
	return &keepalive{
		c: c, ttl: ttl, expired: expired, what: what,
		stop: make(chan struct{}), done: make(chan struct{}),
		sent: sent, deadline: sent.Add(c.validFor(ttl)),
	}
}

func (k *keepalive) start() { go k.watchdog() }

// validFor is how long after the send time of an acquire or renew the client
// may trust the lease: TTL × (1 − drift), per the contract's guarantee 2.
func (c *Client) validFor(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * (1 - c.drift))
}

// Deadline returns the local time until which the last renewal is trusted.
func (k *keepalive) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// stopAndWait stops the watchdog and waits for it to return.
func (k *keepalive) stopAndWait() {
	k.stopOnce.Do(func() { close(k.stop) })
	<-k.done
}

// extend records a successful renew sent at sent.
func (k *keepalive) extend(sent time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if d := sent.Add(k.c.validFor(k.ttl)); d.After(k.deadline) {
		k.deadline, k.sent = d, sent
	}
}

// renewInterval is TTL/3 with ±10% jitter, so that many leases taken at once
// do not renew in lockstep.
func (k *keepalive) renewInterval() time.Duration {
	d := k.ttl / 3
	return d*9/10 + rand.N(d/5+1)
}

func (k *keepalive) deadlinePassed() error {
	return fmt.Errorf("%w: deadline passed before a renewal succeeded", k.expired)
}

func (k *keepalive) watchdog() {
	defer close(k.done)
	clk := k.c.clock
	for {
		k.mu.Lock()
		deadline, sent := k.deadline, k.sent
		k.mu.Unlock()
		now := clk.Now()
		if !now.Before(deadline) {
			k.lose(k.deadlinePassed())
			return
		}
		if wait := sent.Add(k.renewInterval()).Sub(now); wait > 0 {
			t := clk.NewTimer(wait)
			select {
			case <-k.stop:
				t.Stop()
				return
			case <-t.C():
			}
		}
		if !k.renewBeforeDeadline() {
			return
		}
	}
}

// renewBeforeDeadline renews, retrying across nodes, until a renewal
// succeeds (true), or the keepalive is lost or stopped (false).
func (k *keepalive) renewBeforeDeadline() bool {
	clk := k.c.clock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- k.renewLoop(ctx) }()
	t := clk.NewTimer(k.Deadline().Sub(clk.Now()))
	defer t.Stop()
	select {
	case err := <-res:
		return k.renewResult(err)
	case <-k.stop:
		cancel()
		<-res
		return false
	case <-t.C():
		// Lost at once: the work under the lock must stop now, not after
		// the renewal in flight gives up. Unless that renewal just
		// succeeded and moved the deadline.
		if clk.Now().Before(k.Deadline()) {
			return k.renewResult(<-res)
		}
		k.lose(k.deadlinePassed())
		cancel()
		<-res
		return false
	}
}

func (k *keepalive) renewResult(err error) bool {
	if err != nil {
		k.lose(err)
		return false
	}
	return true
}

// renewLoop renews until success, a refusal, or ctx ends.
func (k *keepalive) renewLoop(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		sent, refused, err := k.renew(ctx)
		switch {
		case err == nil:
			k.extend(sent)
			return nil
		case refused:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		k.c.log.Debug("renew failed", append(k.what, "error", err)...)
		if k.c.sleep(ctx, k.c.backoff(attempt)) != nil {
			return ctx.Err()
		}
	}
}
