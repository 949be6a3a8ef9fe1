package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/raftlock/raftlock/api"
)

// MaxSemaphoreLimit is the largest limit a semaphore may have.
const MaxSemaphoreLimit = api.MaxSemaphoreLimit

// SemaphoreOptions are the options of AcquireSemaphore and TrySemaphore.
type SemaphoreOptions struct {
	// TTL is the permit's time to live, 500ms to 1h; default DefaultTTL.
	// Zero with Session.
	TTL time.Duration
	// Owner is shown to others (Semaphore, FullError); 0 to 256 bytes.
	// Default: the session's owner with Session, else the client's
	// (WithOwner: the host name unless set).
	Owner string
	// Wait bounds one server-side wait of AcquireSemaphore, as
	// AcquireOptions.Wait does.
	Wait time.Duration
	// LeaseID, if set, is used instead of a fresh random one; acquiring
	// again with the id of a permit still held returns that permit.
	LeaseID string
	// Session, if set, keeps the permit alive instead of a watchdog of
	// its own: the permit ends with the session.
	Session *Session
}

// Permit is a held permit of a semaphore: one of its slots 0..limit−1. Like
// a Lease, it renews itself (or lives with its session) until Release, and
// Done closes when it ends. Its Token is larger than the token of every
// earlier holder of its slot: fence writes per (semaphore, slot), say with
// fence.SlotResource.
type Permit struct {
	grant
	slot  int
	limit int
}

// Slot returns the permit's slot, 0 to Limit()−1.
func (p *Permit) Slot() int { return p.slot }

// Limit returns the semaphore's limit when the permit was granted.
func (p *Permit) Limit() int { return p.limit }

// AcquireSemaphore takes a permit of semaphore name, which allows limit
// holders at once (1 to MaxSemaphoreLimit), waiting while all are held
// until ctx ends; waiters are served first come, first served. When ctx
// ends while it is full, the error matches both ErrFull and the context's
// error. The first holder sets the limit: while any permit is held, another
// limit gets a *LimitMismatchError. Semaphores and locks are apart: a
// semaphore "a" has nothing to do with lock "a".
func (c *Client) AcquireSemaphore(ctx context.Context, name string, limit int, opts SemaphoreOptions) (*Permit, error) {
	return c.acquireSemaphore(ctx, name, limit, opts, true)
}

// TrySemaphore takes a permit of semaphore name if one is free, and
// otherwise returns a *FullError (matching ErrFull) at once.
func (c *Client) TrySemaphore(ctx context.Context, name string, limit int, opts SemaphoreOptions) (*Permit, error) {
	return c.acquireSemaphore(ctx, name, limit, opts, false)
}

func (c *Client) acquireSemaphore(ctx context.Context, name string, limit int, opts SemaphoreOptions, wait bool) (*Permit, error) {
	sess := opts.Session
	ttl, round, id, err := acquireSettings(name, AcquireOptions{TTL: opts.TTL, Wait: opts.Wait, LeaseID: opts.LeaseID})
	switch {
	case err != nil:
		return nil, err
	case limit < 1 || limit > MaxSemaphoreLimit:
		return nil, fmt.Errorf("raftlock: semaphore limit %d out of range 1..%d", limit, MaxSemaphoreLimit)
	case sess != nil && opts.TTL != 0:
		return nil, errors.New("raftlock: a session's permit takes the session's TTL, not its own")
	}
	if sess != nil {
		if err := sess.usable(); err != nil {
			return nil, err
		}
		opts.Owner = cmp.Or(opts.Owner, sess.owner)
	}
	opts.Owner = cmp.Or(opts.Owner, c.owner)
	var resp api.Permit
	send := func(w time.Duration) (outcome, error) {
		req := api.SemaphoreAcquireRequest{Name: name, Limit: int64(limit), Owner: opts.Owner, LeaseID: id, WaitMs: w.Milliseconds()}
		if sess != nil {
			req.SessionID = sess.id
		} else {
			ttlMs := ttl.Milliseconds()
			req.TTLMs = &ttlMs
		}
		resp = api.Permit{}
		// Resent with the same lease id: an earlier grant answers again.
		return c.do(ctx, request{
			method: http.MethodPost, path: "/v1/semaphores/acquire", body: req,
			leader: true, idempotent: true, serverWait: w, lock: name,
		}, &resp)
	}
	abandon := func() bool { return c.abandonPermit(ctx, name, id) }
	var p *Permit
	err = c.acquireRounds(ctx, round, wait, ErrFull, send, abandon, func(tried outcome) (bool, error) {
		if resp.LeaseID != "" && resp.LeaseID != id {
			return false, fmt.Errorf("raftlock: semaphore acquire answered another lease id")
		}
		if sess != nil {
			sp := &Permit{slot: resp.Slot, limit: int(resp.Limit)}
			sp.initPermit(c, name, opts.Owner, id, resp.FencingToken, sess.ttl)
			if err := sess.bind(&sp.grant); err != nil {
				abandon()
				return false, err
			}
			p = sp
			return false, nil
		}
		if granted := msDuration(resp.TTLMs); granted > 0 && granted < ttl {
			ttl = granted
		}
		sent, err := c.freshSendTime(resp.FencingToken, ttl, tried.sent, func() (uint64, time.Time, error) {
			info, renewed, err := c.renewSemaphore(ctx, name, id, 0)
			if err != nil {
				return 0, time.Time{}, err
			}
			return info.FencingToken, renewed, nil
		})
		if errors.Is(err, ErrNotHolder) && wait && ctx.Err() == nil {
			return true, nil
		}
		if err != nil {
			abandon()
			return false, err
		}
		p = &Permit{slot: resp.Slot, limit: int(resp.Limit)}
		p.initPermit(c, name, opts.Owner, id, resp.FencingToken, ttl)
		token := resp.FencingToken
		p.keepAlive(sent, func(ctx context.Context) (time.Time, bool, error) {
			info, sent, err := c.renewSemaphore(ctx, name, id, 0)
			switch {
			case err == nil && info.FencingToken != token:
				return time.Time{}, true, fmt.Errorf("%w: renew answered fencing token %d, permit has %d", ErrLeaseLost, info.FencingToken, token)
			case err == nil:
				return sent, false, nil
			case errors.Is(err, ErrNotHolder):
				return time.Time{}, true, fmt.Errorf("%w: %w", ErrLeaseLost, err)
			}
			return time.Time{}, false, err
		})
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Permit) initPermit(c *Client, name, owner, id string, token uint64, ttl time.Duration) {
	p.initGrant(c, "semaphore", name, owner, id, token, ttl)
	p.release = func(ctx context.Context) error { return c.ReleaseSemaphore(ctx, name, id) }
}

// abandonPermit releases, best effort and briefly, a permit an acquire may
// have taken although the caller will never see it. It reports whether the
// permit is known not to be held now.
func (c *Client) abandonPermit(ctx context.Context, name, id string) bool {
	return c.abandonWith(ctx, "semaphore", name, func(ctx context.Context) error { return c.ReleaseSemaphore(ctx, name, id) })
}

// renewSemaphore sends one logical renew of a permit and returns the answer
// and the send time its new deadline counts from.
func (c *Client) renewSemaphore(ctx context.Context, name, id string, ttl time.Duration) (*api.Permit, time.Time, error) {
	body := api.SemaphoreRenewRequest{Name: name, LeaseID: id}
	if ms := ttl.Milliseconds(); ms != 0 {
		body.TTLMs = &ms
	}
	var resp api.Permit
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/semaphores/renew", body: body,
		leader: true, idempotent: true, lock: name,
	}, &resp)
	if err != nil {
		return nil, time.Time{}, err
	}
	return &resp, tried.sent, nil
}

// PermitInfo is a permit as a renew by hand answers it.
type PermitInfo struct {
	Name  string
	Owner string
	Slot  int
	Token uint64
	Limit int
	TTL   time.Duration
}

// RenewSemaphore renews the permit with id leaseID of semaphore name by hand
// (a Permit renews itself); ttl 0 keeps its TTL. It returns ErrNotHolder if
// that permit is not held.
func (c *Client) RenewSemaphore(ctx context.Context, name, leaseID string, ttl time.Duration) (*PermitInfo, error) {
	r, _, err := c.renewSemaphore(ctx, name, leaseID, ttl)
	if err != nil {
		return nil, err
	}
	return &PermitInfo{Name: r.Name, Owner: r.Owner, Slot: r.Slot, Token: r.FencingToken, Limit: int(r.Limit), TTL: msDuration(r.TTLMs)}, nil
}

// ReleaseSemaphore releases the permit with id leaseID of semaphore name, by
// hand (see Permit.Release). It returns ErrNotHolder if that permit is not
// held, unless an earlier attempt of this call may have released it.
func (c *Client) ReleaseSemaphore(ctx context.Context, name, leaseID string) error {
	return c.release(ctx, "/v1/semaphores/release", name, api.SemaphoreReleaseRequest{Name: name, LeaseID: leaseID})
}

// SemaphoreInfo is a semaphore as Semaphore shows it. Limit 0 and no
// holders: nobody holds a permit.
type SemaphoreInfo struct {
	Name    string
	Limit   int
	Holders []Holder // by slot
	Index   uint64   // Raft index of the semaphore's last change
	Waiters int      // acquires parked on the leader; 0 when a follower answered
}

// Semaphore returns the state of semaphore name, asked of the leader.
func (c *Client) Semaphore(ctx context.Context, name string) (*SemaphoreInfo, error) {
	var j api.Semaphore
	r := request{method: http.MethodGet, path: "/v1/semaphores/" + url.PathEscape(name), leader: true, idempotent: true}
	if _, err := c.do(ctx, r, &j); err != nil {
		return nil, err
	}
	info := &SemaphoreInfo{Name: cmp.Or(j.Name, name), Limit: int(j.Limit), Index: j.Index, Waiters: j.Waiters}
	for _, h := range j.Holders {
		info.Holders = append(info.Holders, Holder{Owner: h.Owner, Slot: h.Slot, Token: h.FencingToken, TTL: msDuration(h.TTLMs), Remaining: remaining(h.RemainingMs)})
	}
	return info, nil
}
