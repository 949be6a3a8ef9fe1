package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/raftlock/raftlock/api"
)

// Defaults and bounds of AcquireOptions.
const (
	DefaultTTL       = 10 * time.Second
	DefaultWaitRound = 30 * time.Second
	MaxWaitRound     = 300 * time.Second
)

// AcquireOptions are the options of Acquire and TryAcquire.
type AcquireOptions struct {
	// TTL is the lease's time to live, 500ms to 1h; default DefaultTTL.
	TTL time.Duration
	// Owner is shown to others (Get, List, HeldError); 0 to 256 bytes.
	// Default: the session's owner for a session's lease, else the
	// client's (WithOwner: the host name unless set).
	Owner string
	// LockDelay: if the lease later expires (rather than being released),
	// nobody may take the lock for this long after the expiry.
	LockDelay time.Duration
	// Wait bounds one server-side wait of Acquire (the API's wait_ms);
	// Acquire waits in rounds of up to Wait until its context ends. Default
	// DefaultWaitRound, at most MaxWaitRound. TryAcquire does not wait.
	Wait time.Duration
	// LeaseID, if set, is used instead of a fresh random one (16 to 128
	// characters of [A-Za-z0-9_-]). Acquiring again with the id of a lease
	// that still holds the lock returns that lease's token.
	LeaseID string
	// Value is published with the lock while this lease holds it (readers,
	// watchers and an Election's followers see it): UTF-8, at most
	// api.MaxValue bytes. Lease.SetValue changes it.
	Value string
	// Shared takes the lock in shared mode: shared holders hold it
	// together, an exclusive one excludes all. Each gets its own token; an
	// exclusive grant's token is larger than every earlier grant's of the
	// lock. Waiters are served in order whatever their mode, so a writer
	// is not starved by a stream of readers. A shared lease cannot be
	// upgraded (acquiring exclusive with its lease id answers held), takes
	// no LockDelay and publishes no Value.
	Shared bool
}

// checkValue refuses a lock value the server would answer bad_request.
func checkValue(v string) error {
	if len(v) > api.MaxValue {
		return fmt.Errorf("raftlock: value of %d bytes, at most %d allowed", len(v), api.MaxValue)
	}
	if !utf8.ValidString(v) {
		return errors.New("raftlock: value is not valid UTF-8")
	}
	return nil
}

// NewLeaseID returns a random lease id: 128 bits, 22 characters of
// [A-Za-z0-9_-].
func NewLeaseID() string { return api.NewLeaseID() }

// leaseInfo is the answer to acquire and renew as a LockInfo.
func leaseInfo(r *api.Lease) *LockInfo {
	return &LockInfo{Name: r.Name, Held: true, Owner: r.Owner, Token: r.FencingToken, TTL: time.Duration(r.TTLMs) * time.Millisecond}
}

// Acquire takes the lock, waiting for it while another lease holds it, until
// ctx ends. Waiting is done by the server (waiters are served first come,
// first served) in rounds of up to opts.Wait. When ctx ends while the lock is
// held, the error matches both ErrHeld and the context's error.
//
// The returned lease renews itself until Release.
func (c *Client) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return c.acquire(ctx, name, opts, true, nil)
}

// TryAcquire takes the lock if it is free, and otherwise returns a
// *HeldError (matching ErrHeld) at once. Transport failures are still retried
// until ctx ends.
func (c *Client) TryAcquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return c.acquire(ctx, name, opts, false, nil)
}

// acquire takes the lock, for sess if not nil.
func (c *Client) acquire(ctx context.Context, name string, opts AcquireOptions, wait bool, sess *Session) (*Lease, error) {
	ttl, round, id, err := acquireSettings(name, opts)
	switch {
	case err != nil:
		return nil, err
	case opts.Shared && opts.LockDelay > 0:
		return nil, errors.New("raftlock: a shared lock takes no lock delay")
	case opts.Shared && opts.Value != "":
		return nil, errors.New("raftlock: a shared hold publishes no value")
	case sess != nil && (opts.TTL != 0 || opts.LockDelay != 0):
		return nil, errors.New("raftlock: a session's lease takes the session's TTL and lock delay, not its own")
	}
	mode := ""
	if opts.Shared {
		mode = api.ModeShared
	}
	if sess != nil {
		if err := sess.usable(); err != nil {
			return nil, err
		}
		opts.Owner = cmp.Or(opts.Owner, sess.owner)
	}
	opts.Owner = cmp.Or(opts.Owner, c.owner)
	var resp api.Lease
	send := func(w time.Duration) (outcome, error) {
		req := api.AcquireRequest{
			Name: name, Owner: opts.Owner, LeaseID: id, Mode: mode,
			WaitMs: w.Milliseconds(), LockDelayMs: opts.LockDelay.Milliseconds(),
			Value: opts.Value,
		}
		if sess != nil {
			req.SessionID = sess.id
		} else {
			ttlMs := ttl.Milliseconds()
			req.TTLMs = &ttlMs
		}
		resp = api.Lease{}
		// The lease id makes a resent acquire idempotent: if an earlier
		// attempt was granted, the retry answers 200 with the same token.
		return c.do(ctx, request{
			method: http.MethodPost, path: "/v1/locks/acquire", body: req,
			leader: true, idempotent: true, serverWait: w, lock: name,
		}, &resp)
	}
	abandon := func() bool { return c.abandon(ctx, name, id) }
	var l *Lease
	err = c.acquireRounds(ctx, round, wait, ErrHeld, send, abandon, func(tried outcome) (bool, error) {
		switch {
		case resp.LeaseID != "" && resp.LeaseID != id:
			return false, fmt.Errorf("raftlock: acquire answered another lease id")
		case opts.Shared && resp.Mode != api.ModeShared:
			abandon()
			return false, fmt.Errorf("raftlock: asked for %q shared, granted %q", name, cmp.Or(resp.Mode, api.ModeExclusive))
		}
		if sess != nil {
			sl, err := c.newSessionLease(sess, name, opts.Owner, id, resp.FencingToken, sess.ttl)
			if err != nil {
				abandon()
				return false, err
			}
			l = sl
			l.value, l.shared = opts.Value, opts.Shared
			return false, nil
		}
		if granted := time.Duration(resp.TTLMs) * time.Millisecond; granted > 0 && granted < ttl {
			ttl = granted // trust the lease only as long as the server grants it
		}
		sent, err := c.freshSendTime(resp.FencingToken, ttl, tried.sent, func() (uint64, time.Time, error) {
			info, renewed, err := c.renew(ctx, name, id, 0)
			if err != nil {
				return 0, time.Time{}, err
			}
			return info.Token, renewed.sent, nil
		})
		if errors.Is(err, ErrNotHolder) && wait && ctx.Err() == nil {
			return true, nil
		}
		if err != nil {
			abandon()
			return false, err
		}
		l = c.newLease(name, opts.Owner, id, resp.FencingToken, ttl, sent)
		l.value, l.shared = opts.Value, opts.Shared
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// acquireRounds is the loop of a lock's and a semaphore's acquire, which
// differ only in what they send and what they make of a grant. Each round
// sends one request (send, with w as its server-side wait); an answer
// matching refused (ErrHeld, ErrFull) starts another round while waiting
// (nextRound). A round whose outcome is unknown is undone (abandon) before
// its error is returned. A grant goes to granted, which may ask for another
// round (again: the grant was lost before it could be kept).
func (c *Client) acquireRounds(ctx context.Context, round time.Duration, wait bool, refused error,
	send func(w time.Duration) (outcome, error), abandon func() bool,
	granted func(tried outcome) (again bool, err error)) error {
	var lastRefused error // the last round's refusal, while waiting
	for rounds := 0; ; rounds++ {
		var w time.Duration
		if wait {
			w = waitRound(ctx, round)
		}
		start := time.Now()
		tried, err := send(w)
		if err != nil {
			if errors.Is(err, refused) && wait {
				lastRefused = err
				again, err := c.nextRound(ctx, start, w, rounds, err)
				if again {
					continue
				}
				return err
			}
			if tried.ambiguous && abandon() && lastRefused != nil && ctx.Err() != nil {
				// The round cut off by ctx is undone (released, or it never
				// held): what the caller learns is that it stayed refused.
				return ctxError(ctx, lastRefused)
			}
			return err
		}
		again, err := granted(tried)
		if !again {
			return err
		}
	}
}

// acquireSettings checks an acquire's options and fills in the defaults:
// the TTL, the length of one wait round, and the lease id.
func acquireSettings(name string, opts AcquireOptions) (ttl, round time.Duration, id string, err error) {
	ttl = cmp.Or(opts.TTL, DefaultTTL)
	round = opts.Wait
	if round <= 0 {
		round = DefaultWaitRound
	}
	round = min(round, MaxWaitRound)
	id = opts.LeaseID
	switch {
	case name == "":
		return 0, 0, "", errors.New("raftlock: empty lock name")
	case ttl < 0 || opts.LockDelay < 0:
		return 0, 0, "", errors.New("raftlock: negative TTL or lock delay")
	case checkValue(opts.Value) != nil:
		return 0, 0, "", checkValue(opts.Value)
	case id == "":
		id = NewLeaseID()
	case !api.ValidLeaseID(id):
		return 0, 0, "", errors.New("raftlock: lease id must be " + api.LeaseIDRule)
	}
	return ttl, round, id, nil
}

// nextRound decides, after a waiting round answered held, whether another
// round follows (pausing first if the server answered long before the wait
// was over, say during a lock delay, so that we do not spin) or the acquire
// ends with held and the context's verdict.
func (c *Client) nextRound(ctx context.Context, start time.Time, w time.Duration, rounds int, held error) (bool, error) {
	if ctx.Err() == nil && !roundTooShort(ctx) {
		if time.Since(start) < w/2 || w == 0 {
			if c.sleep(ctx, c.backoff(min(rounds, 10))) != nil {
				return false, ctxError(ctx, held)
			}
		}
		return true, nil
	}
	if ctx.Err() == nil {
		return false, fmt.Errorf("%w (last error: %w)", context.DeadlineExceeded, held)
	}
	return false, ctxError(ctx, held)
}

// freshSendTime returns the time the lease's deadline counts from. The
// grant may have come long after the request was sent (a server-side wait,
// or retries), so a deadline counted from the send time would be short or
// past: then a renew sent now gives a fresh lower bound on the lease's life.
// renew is that renew of a lock's lease or of a permit: the token it
// answered, and its send time.
func (c *Client) freshSendTime(token uint64, ttl time.Duration, sent time.Time, renew func() (uint64, time.Time, error)) (time.Time, error) {
	if c.clock.Now().Sub(sent) <= ttl/3 {
		return sent, nil
	}
	got, renewed, err := renew()
	if err != nil {
		return time.Time{}, err
	}
	if got != token {
		return time.Time{}, fmt.Errorf("raftlock: renew right after acquire answered token %d, acquire %d", got, token)
	}
	return renewed, nil
}

// waitRound returns the wait_ms for the next round of Acquire: the round
// length, or less when ctx ends sooner, leaving a margin so that the
// server's "held" answer arrives before ctx ends instead of being cut off.
func waitRound(ctx context.Context, round time.Duration) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return round
	}
	rem := time.Until(dl)
	// A tenth of what is left, at least 100ms (a round trip under load) and
	// at most 1s, but never more than half.
	margin := min(max(rem/10, 100*time.Millisecond), time.Second, rem/2)
	w := rem - margin
	w = min(w, round)
	if w < time.Millisecond {
		return 0
	}
	return w.Truncate(time.Millisecond)
}

// roundTooShort reports whether ctx ends too soon for another useful round.
func roundTooShort(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < 20*time.Millisecond
}

// abandon releases, best effort and briefly, a lease that an acquire may have
// created although the caller will never see it, so that it does not keep
// the lock from everyone (the caller included) until its TTL runs out. It
// reports whether the lease is known not to hold the lock now.
func (c *Client) abandon(ctx context.Context, name, id string) bool {
	return c.abandonWith(ctx, "lock", name, func(ctx context.Context) error { return c.Release(ctx, name, id) })
}

// abandonWith is abandon (or abandonPermit) with release as the release of
// the lease and kind ("lock", "semaphore") naming what it held in the log.
func (c *Client) abandonWith(ctx context.Context, kind, name string, release func(context.Context) error) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	err := release(ctx)
	if err != nil && !errors.Is(err, ErrNotHolder) {
		c.log.Debug("release of abandoned acquire failed", kind, name, "error", err)
		return false
	}
	return true
}

// renew sends one logical renew (retried across nodes until ctx ends).
func (c *Client) renew(ctx context.Context, name, id string, ttl time.Duration) (*LockInfo, outcome, error) {
	var resp api.Lease
	body := api.RenewRequest{Name: name, LeaseID: id}
	if ms := ttl.Milliseconds(); ms != 0 {
		body.TTLMs = &ms // left out: the lease keeps its TTL
	}
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/locks/renew", body: body,
		leader: true, idempotent: true, lock: name,
	}, &resp)
	if err != nil {
		return nil, tried, err
	}
	return leaseInfo(&resp), tried, nil
}

// Renew renews the lease with id leaseID on lock name, by hand (a Lease
// renews itself). ttl 0 keeps the lease's TTL. It returns ErrNotHolder if
// that lease does not hold the lock.
func (c *Client) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) (*LockInfo, error) {
	info, _, err := c.renew(ctx, name, leaseID, ttl)
	return info, err
}

// Release releases the lock name held by the lease with id leaseID, by hand
// (see Lease.Release). It returns ErrNotHolder if that lease does not hold
// the lock; it never frees another lease's lock.
func (c *Client) Release(ctx context.Context, name, leaseID string) error {
	return c.release(ctx, "/v1/locks/release", name, api.ReleaseRequest{Name: name, LeaseID: leaseID})
}

// release sends a release of a lock's lease or a permit (body) to path.
func (c *Client) release(ctx context.Context, path, name string, body any) error {
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: path, body: body,
		leader: true, idempotent: true, lock: name,
	}, nil)
	if err != nil && tried.ambiguous && errors.Is(err, ErrNotHolder) {
		// An earlier attempt may have released it and lost the answer.
		return nil
	}
	return err
}

// ForceReleased is the answer of ForceRelease.
type ForceReleased struct {
	// Ended says a lease held the lock and this force release ended it;
	// Owner and Token are that lease's. False: no lease held the lock (it
	// was free or in its lock-delay), or an earlier attempt of this call
	// ended it and its answer was lost.
	Ended bool
	Owner string
	Token uint64
}

// ForceRelease ends whatever lease holds lock name, as if it had expired:
// if the lease asked for a lock-delay, nobody can take the lock until it
// ends (the old holder may still be writing). The old holder's renew then
// fails with ErrNotHolder. It needs an admin token (ErrForbidden
// otherwise) and every node at command_version 3: until then the leader
// answers 503 not_supported_yet, which is retried for a few seconds (a new
// leader's first survey of its members) and then returned as an *APIError
// with that code.
func (c *Client) ForceRelease(ctx context.Context, name string) (ForceReleased, error) {
	var out api.Released
	_, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/locks/release",
		body:   api.ReleaseRequest{Name: name, Force: true},
		leader: true, idempotent: true, lock: name,
	}, &out)
	if err != nil || !out.Released || out.Holder == nil {
		return ForceReleased{}, err
	}
	return ForceReleased{Ended: true, Owner: out.Holder.Owner, Token: out.Holder.FencingToken}, nil
}

// WithLock acquires the lock (waiting as Acquire does), runs fn with a
// context that is cancelled when ctx ends or the lease is lost, and releases
// the lock. fn gets the fencing token to pass to the storage it writes. If fn
// succeeds but the lease was lost meanwhile, WithLock returns the loss
// (matching ErrLeaseLost): the work may not have been protected.
func WithLock(ctx context.Context, c *Client, name string, opts AcquireOptions, fn func(ctx context.Context, token uint64) error) error {
	lease, err := c.Acquire(ctx, name, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	ferr := fn(fctx, lease.Token())
	stop()
	cancel(nil)
	// Release even when ctx has ended, so that the lock is freed now rather
	// than at the end of its TTL.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.requestTimeout)
	rerr := lease.Release(rctx)
	rcancel()
	if ferr != nil && rerr != nil {
		return errors.Join(ferr, rerr)
	}
	if ferr != nil {
		return ferr
	}
	return rerr
}
