package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// SessionOptions are the options of NewSession.
type SessionOptions struct {
	// Owner is shown to others with the session's leases; 0 to 256 bytes.
	// It is also the owner of the session's leases whose AcquireOptions
	// give none. Default: the client's (WithOwner: the host name unless
	// set).
	Owner string
	// TTL is the session's time to live, 500ms to 1h; default DefaultTTL.
	// The session's one watchdog renews it about every TTL/3.
	TTL time.Duration
	// LockDelay: if the session expires (rather than being closed), nobody
	// may take its exclusive locks for this long after the expiry.
	LockDelay time.Duration
	// ID, if set, is used instead of a fresh random one (the lease id
	// rule). Creating a session again with the id of a live one (same
	// owner) refreshes it.
	ID string
}

// Session ties many leases to one keepalive: its leases (Session.Acquire,
// SemaphoreOptions.Session) have no deadline of their own and no watchdog;
// the session's watchdog renews the session alone, about every TTL/3. When
// the session expires, the cluster ends all of its leases at one index;
// when it is closed, it releases them all at once.
//
// If a renewal is refused (no_session) or none succeeds before the
// session's deadline, the session is lost: Lost and Done close, Context is
// cancelled, and every lease of the session is lost with it.
type Session struct {
	c         *Client
	id        string
	owner     string
	ttl       time.Duration
	lockDelay time.Duration
	ka        *keepalive

	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}

	mu     sync.Mutex
	err    error               // why it was lost
	closed bool                // Close ran
	grants map[*grant]struct{} // the leases it keeps alive

	closeMu  sync.Mutex
	closeErr error
}

// NewSession creates a session on the cluster and starts its watchdog.
// The create is resent with the same session id until ctx ends; if ctx
// ends with the outcome unknown, the session is closed, best effort, and
// the error matches ErrUnknownOutcome.
func NewSession(ctx context.Context, c *Client, opts SessionOptions) (*Session, error) {
	ttl := cmp.Or(opts.TTL, DefaultTTL)
	owner := cmp.Or(opts.Owner, c.owner)
	id := opts.ID
	switch {
	case ttl < 0 || opts.LockDelay < 0:
		return nil, errors.New("raftlock: negative session TTL or lock delay")
	case id == "":
		id = NewLeaseID()
	case !api.ValidLeaseID(id):
		return nil, errors.New("raftlock: session id must be " + api.LeaseIDRule)
	}
	var resp api.Session
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/sessions",
		body:   api.SessionCreateRequest{Owner: owner, TTLMs: ttl.Milliseconds(), LockDelayMs: opts.LockDelay.Milliseconds(), SessionID: id},
		leader: true, idempotent: true,
	}, &resp)
	if err != nil {
		if tried.ambiguous {
			c.abandonSession(ctx, id)
		}
		return nil, fmt.Errorf("raftlock: create session: %w", err)
	}
	if resp.SessionID != id {
		return nil, fmt.Errorf("raftlock: create session answered another session id")
	}
	if granted := time.Duration(resp.TTLMs) * time.Millisecond; granted > 0 && granted < ttl {
		ttl = granted
	}
	sent := tried.sent
	// A create that took long (retries) must not start the deadline from
	// its first send: a renew now gives a fresh lower bound.
	if c.clock.Now().Sub(sent) > ttl/3 {
		if sent, err = c.renewSession(ctx, id); err != nil {
			c.abandonSession(ctx, id)
			return nil, fmt.Errorf("raftlock: renew new session: %w", err)
		}
	}
	return c.keepSession(id, owner, ttl, time.Duration(resp.LockDelayMs)*time.Millisecond, sent), nil
}

// AttachSession takes over keeping alive session id, which was created
// elsewhere (another process, or raftlock session create) and may be kept
// alive by others too. It renews the session at once, with its own TTL (an
// ended session answers an error matching ErrNoSession), then about every
// TTL/3 as NewSession's do. Leases taken through the returned Session belong
// to that session; Detach stops renewing it and leaves it and its leases to
// whoever else keeps it, Close closes it for everyone.
func (c *Client) AttachSession(ctx context.Context, id string) (*Session, error) {
	if !api.ValidLeaseID(id) {
		return nil, errors.New("raftlock: session id must be " + api.LeaseIDRule)
	}
	resp, sent, err := c.renewSessionInfo(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("raftlock: attach session: %w", err)
	}
	ttl := time.Duration(resp.TTLMs) * time.Millisecond
	if ttl <= 0 {
		return nil, errors.New("raftlock: attach session: the renew answered no TTL")
	}
	return c.keepSession(id, resp.Owner, ttl, time.Duration(resp.LockDelayMs)*time.Millisecond, sent), nil
}

// keepSession starts the watchdog of session id, renewed last at sent.
func (c *Client) keepSession(id, owner string, ttl, lockDelay time.Duration, sent time.Time) *Session {
	s := &Session{
		c: c, id: id, owner: owner, ttl: ttl,
		lockDelay: lockDelay,
		lost:      make(chan struct{}),
		grants:    map[*grant]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.ka = c.newKeepalive(ttl, sent, ErrSessionLost, "session", shortID(id))
	s.ka.lose = s.lose
	s.ka.renew = func(ctx context.Context) (time.Time, bool, error) {
		sent, err := c.renewSession(ctx, id)
		if errors.Is(err, ErrNoSession) {
			return time.Time{}, true, fmt.Errorf("%w: %w", ErrSessionLost, err)
		}
		return sent, false, err
	}
	s.ka.start()
	return s
}

// renewSession sends one logical renew of session id and returns the send
// time its new deadline counts from.
func (c *Client) renewSession(ctx context.Context, id string) (time.Time, error) {
	_, sent, err := c.renewSessionInfo(ctx, id)
	return sent, err
}

// renewSessionInfo renews session id for its own TTL and returns the answer
// and the send time its new deadline counts from.
func (c *Client) renewSessionInfo(ctx context.Context, id string) (api.Session, time.Time, error) {
	var resp api.Session
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/sessions/renew",
		body:   api.SessionRenewRequest{SessionID: id},
		leader: true, idempotent: true,
	}, &resp)
	if err != nil {
		return api.Session{}, time.Time{}, err
	}
	if resp.SessionID != id {
		return api.Session{}, time.Time{}, fmt.Errorf("raftlock: session renew answered another session id")
	}
	return resp, tried.sent, nil
}

// abandonSession closes, best effort and briefly, a session that a create
// may have made although the caller will never see it.
func (c *Client) abandonSession(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, err := c.CloseSession(ctx, id); err != nil && !errors.Is(err, ErrNoSession) {
		c.log.Debug("close of abandoned session failed", "session", shortID(id), "error", err)
	}
}

// shortID is a prefix of a secret id, enough to tell sessions apart in logs.
func shortID(id string) string { return id[:min(len(id), 6)] + "…" }

// ID returns the session's id: a secret like a lease id, which renews and
// closes the session. Do not log it.
func (s *Session) ID() string { return s.id }

// Owner returns the owner given at creation.
func (s *Session) Owner() string { return s.owner }

// TTL returns the session's time to live, as the cluster granted it.
func (s *Session) TTL() time.Duration { return s.ttl }

// LockDelay returns the session's lock-delay.
func (s *Session) LockDelay() time.Duration { return s.lockDelay }

// Deadline returns the time, on the client's clock, until which the session
// (and so each of its leases) is known to live: the send time of the last
// successful create or renew plus TTL × (1 − drift).
func (s *Session) Deadline() time.Time { return s.ka.Deadline() }

// Context returns a context cancelled when the session is lost or closed;
// context.Cause tells which (ErrSessionLost, ErrSessionClosed).
func (s *Session) Context() context.Context { return s.ctx }

// Done returns a channel closed when the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Lost returns a channel closed when the session is lost (not by Close).
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Err returns why the session was lost (matching ErrSessionLost), or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Acquire takes lock name for the session, waiting as Client.Acquire does.
// The lease lives as long as the session: it has no TTL of its own
// (opts.TTL and opts.LockDelay must be zero; the session's apply), no
// watchdog, and is lost when the session is. Release it by itself with
// Lease.Release, or all at once with Close.
func (s *Session) Acquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return s.c.acquire(ctx, name, opts, true, s)
}

// TryAcquire takes lock name for the session if it can be had at once, as
// Client.TryAcquire does; otherwise it returns a *HeldError.
func (s *Session) TryAcquire(ctx context.Context, name string, opts AcquireOptions) (*Lease, error) {
	return s.c.acquire(ctx, name, opts, false, s)
}

// AcquireSemaphore takes a permit of semaphore name for the session, as
// Client.AcquireSemaphore with opts.Session set.
func (s *Session) AcquireSemaphore(ctx context.Context, name string, limit int, opts SemaphoreOptions) (*Permit, error) {
	opts.Session = s
	return s.c.AcquireSemaphore(ctx, name, limit, opts)
}

// TrySemaphore takes a permit of semaphore name for the session if one is
// free, as Client.TrySemaphore with opts.Session set.
func (s *Session) TrySemaphore(ctx context.Context, name string, limit int, opts SemaphoreOptions) (*Permit, error) {
	opts.Session = s
	return s.c.TrySemaphore(ctx, name, limit, opts)
}

// usable returns why no new lease may be taken through the session, or nil.
func (s *Session) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return fmt.Errorf("%w: %w", ErrLeaseLost, s.err)
	case s.closed:
		return ErrSessionClosed
	}
	return nil
}

// bind makes g a lease the session keeps alive, unless the session has
// ended meanwhile (then the lease is not to be trusted: it returns why).
func (s *Session) bind(g *grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return fmt.Errorf("%w: %w", ErrLeaseLost, s.err)
	case s.closed:
		return ErrSessionClosed
	}
	g.sess = s
	s.grants[g] = struct{}{}
	return nil
}

func (s *Session) unbind(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.grants, g)
}

// takeGrantsLocked empties the session's set of leases and returns them.
func (s *Session) takeGrantsLocked() []*grant {
	gs := make([]*grant, 0, len(s.grants))
	for g := range s.grants {
		gs = append(gs, g)
	}
	clear(s.grants)
	return gs
}

// lose marks the session lost, once, and its leases with it.
func (s *Session) lose(cause error) {
	s.mu.Lock()
	if s.err != nil || s.closed {
		s.mu.Unlock()
		return
	}
	s.err = cause
	gs := s.takeGrantsLocked()
	s.mu.Unlock()
	// Context first: whoever wakes on Lost must find its cause set.
	s.cancel(cause)
	close(s.lost)
	s.c.log.Warn("session lost", "session", shortID(s.id), "leases", len(gs), "error", cause)
	for _, g := range gs {
		g.lose(fmt.Errorf("%w: %w", ErrLeaseLost, cause))
	}
}

// Close stops the watchdog and closes the session, which releases all of
// its leases at once (no lock-delay). If the session was lost before, Close
// returns the error that lost it (matching ErrSessionLost), after still
// trying to close it when the server may hold it. A close resent after an
// unknown outcome that finds no session counts as done. After Close
// returns, the session is no longer renewed, whatever the result; calling
// it again returns the same result.
func (s *Session) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.ka.stopAndWait()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	lostErr := s.err
	gs := s.takeGrantsLocked()
	s.mu.Unlock()

	var err error
	if lostErr == nil || !errors.Is(lostErr, ErrNoSession) {
		_, err = s.c.CloseSession(ctx, s.id)
	}
	for _, g := range gs {
		if err != nil {
			// Not renewed any more, and maybe not released: not to be trusted.
			g.lose(fmt.Errorf("%w: session close failed: %w", ErrLeaseLost, err))
			continue
		}
		g.closedWithSession()
	}
	s.cancel(ErrSessionClosed)
	switch {
	case lostErr != nil:
		s.closeErr = lostErr
	case err != nil:
		s.closeErr = fmt.Errorf("raftlock: close session: %w", err)
	}
	return s.closeErr
}

// Detach stops renewing the session without closing it: the session and its
// leases live on in the cluster until the session expires, or as long as
// others renew it (see AttachSession). The leases taken through it are no
// longer kept here: their Context ends with ErrDetached. The session's
// Context ends with ErrDetached too; Close after Detach does nothing.
func (s *Session) Detach() {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.ka.stopAndWait()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	gs := s.takeGrantsLocked()
	s.mu.Unlock()
	for _, g := range gs {
		g.Detach()
	}
	s.cancel(ErrDetached)
}

// CloseSession closes session id by hand (see Session.Close) and returns how
// many leases it released. It returns an error matching ErrNoSession when no
// such session lives, unless an earlier attempt of this call may have
// closed it.
func (c *Client) CloseSession(ctx context.Context, id string) (int, error) {
	var out api.SessionClosed
	tried, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/sessions/close",
		body:   api.SessionCloseRequest{SessionID: id},
		leader: true, idempotent: true,
	}, &out)
	if err != nil && tried.ambiguous && errors.Is(err, ErrNoSession) {
		return 0, nil // an earlier attempt closed it and lost the answer
	}
	return out.Released, err
}

// RenewSession renews session id by hand (a Session renews itself); ttl 0
// keeps its TTL. It returns an error matching ErrNoSession if the session
// has ended.
func (c *Client) RenewSession(ctx context.Context, id string, ttl time.Duration) (*SessionInfo, error) {
	body := api.SessionRenewRequest{SessionID: id}
	if ms := ttl.Milliseconds(); ms != 0 {
		body.TTLMs = &ms
	}
	var resp api.Session
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sessions/renew", body: body, leader: true, idempotent: true}, &resp)
	if err != nil {
		return nil, err
	}
	return &SessionInfo{ID: resp.SessionID, Owner: resp.Owner, TTL: msDuration(resp.TTLMs), LockDelay: msDuration(resp.LockDelayMs), Remaining: -1}, nil
}

// CreateSession creates session id (a fresh one if "") by hand, without a
// watchdog: it lives until its TTL runs out unless renewed (RenewSession).
// NewSession is what a service wants; this is for the command line.
func (c *Client) CreateSession(ctx context.Context, opts SessionOptions) (*SessionInfo, error) {
	ttl := cmp.Or(opts.TTL, DefaultTTL)
	id := cmp.Or(opts.ID, NewLeaseID())
	if !api.ValidLeaseID(id) {
		return nil, errors.New("raftlock: session id must be " + api.LeaseIDRule)
	}
	var resp api.Session
	_, err := c.do(ctx, request{
		method: http.MethodPost, path: "/v1/sessions",
		body:   api.SessionCreateRequest{Owner: cmp.Or(opts.Owner, c.owner), TTLMs: ttl.Milliseconds(), LockDelayMs: opts.LockDelay.Milliseconds(), SessionID: id},
		leader: true, idempotent: true,
	}, &resp)
	if err != nil {
		return nil, err
	}
	if resp.SessionID != id {
		return nil, fmt.Errorf("raftlock: create session answered another session id")
	}
	return &SessionInfo{ID: resp.SessionID, Owner: resp.Owner, TTL: msDuration(resp.TTLMs), LockDelay: msDuration(resp.LockDelayMs), Remaining: -1}, nil
}

// SessionInfo is a session as GET /v1/sessions/{id} shows it (and, with ID
// set, as create and renew answer).
type SessionInfo struct {
	ID        string // only in the answers of CreateSession and RenewSession
	Owner     string
	TTL       time.Duration
	LockDelay time.Duration
	// Remaining is the session's time left on the leader's clock; -1 when
	// the answer did not say.
	Remaining time.Duration
	Index     uint64         // Raft index of the session's last change
	Leases    []SessionLease // its leases: locks, then permits, each by name
}

// SessionLease is one lease of a session, without its lease id.
type SessionLease struct {
	Kind   string // "lock" or "semaphore"
	Name   string
	Token  uint64
	Shared bool // a lock held shared
	Slot   int  // a permit's slot
}

// Session returns the state of session id, asked of the leader. It returns
// an error matching ErrNoSession when no such session lives.
func (c *Client) Session(ctx context.Context, id string) (*SessionInfo, error) {
	var j api.SessionInfo
	r := request{method: http.MethodGet, path: "/v1/sessions/" + url.PathEscape(id), leader: true, idempotent: true}
	if _, err := c.do(ctx, r, &j); err != nil {
		return nil, err
	}
	info := &SessionInfo{ID: id, Owner: j.Owner, TTL: msDuration(j.TTLMs), LockDelay: msDuration(j.LockDelayMs), Remaining: remaining(j.RemainingMs), Index: j.Index}
	for _, l := range j.Leases {
		sl := SessionLease{Kind: l.Kind, Name: l.Name, Token: l.FencingToken, Shared: l.Mode == api.ModeShared}
		if l.Slot != nil {
			sl.Slot = *l.Slot
		}
		info.Leases = append(info.Leases, sl)
	}
	return info, nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// remaining reads an optional remaining_ms: -1 when absent.
func remaining(ms *int64) time.Duration {
	if ms == nil {
		return -1
	}
	return msDuration(*ms)
}
