package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/store"
)

// viewOf is a lock as reads show it: never with its lease_id. A leader's
// view adds its time left and parked acquires (store.LeaseView).
func viewOf(m store.LockReader, l fsm.Lock) api.Lock {
	v := api.Lock{Name: l.Name, Held: true, Owner: l.Owner, FencingToken: l.Token, TTLMs: l.TTL, Value: l.Value, Index: l.Index}
	if lv, ok := m.(store.LeaseView); ok {
		if d, ok := lv.Remaining(l); ok {
			ms := d.Milliseconds()
			v.RemainingMs = &ms
		}
		v.Waiters = lv.Waiters(l.Name)
	}
	return v
}

// outcome turns the state machine's result into the contract's answer.
func outcome(r fsm.Result, name string) (int, any, error) {
	switch r.Status {
	case fsm.StatusOK:
		l := r.Lock
		return http.StatusOK, api.Lease{Name: l.Name, Owner: l.Owner, LeaseID: l.LeaseID, FencingToken: l.Token, TTLMs: l.TTL}, nil
	case fsm.StatusHeld:
		msg := fmt.Sprintf("lock %q is held by %q (fencing token %d)", name, r.Holder.Owner, r.Holder.Token)
		if r.Retry > 0 {
			msg = fmt.Sprintf("lock %q is in its lock-delay after the lease of %q expired; retry in %d ms", name, r.Holder.Owner, r.Retry)
		}
		return http.StatusConflict, api.HeldError{Error: api.CodeHeld, Message: msg, Holder: api.Holder{Owner: r.Holder.Owner, FencingToken: r.Holder.Token}, RetryAfterMs: r.Retry}, nil
	case fsm.StatusNotHolder:
		return http.StatusConflict, api.Error{Error: api.CodeNotHolder,
			Message: fmt.Sprintf("this lease does not hold lock %q (expired, released, or never did)", name)}, nil
	}
	return 0, nil, badRequest("the state machine refused the command as invalid")
}

// acquire may park for wait_ms on the leader: its request timeout grows by it.
func acquireWait(req *acquireRequest) time.Duration {
	return time.Duration(req.WaitMs) * time.Millisecond
}

func (s *Server) acquire(ctx context.Context, req *acquireRequest) (int, any, error) {
	// A value needs command format 4: the leader answers 503
	// not_supported_yet until every node reads it.
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: req.Name, Owner: req.Owner, LeaseID: req.LeaseID, TTL: *req.TTLMs, LockDelay: req.LockDelayMs, Value: req.Value}
	res, err := s.acquireGated(ctx, cmd, acquireWait(req))
	if err != nil {
		return 0, nil, err
	}
	return outcome(res, cmd.Name)
}

func (s *Server) renew(ctx context.Context, req *renewRequest) (int, any, error) {
	cmd := fsm.Command{Op: fsm.OpRenew, Name: req.Name, LeaseID: req.LeaseID}
	if req.TTLMs != nil {
		cmd.TTL = *req.TTLMs
	}
	res, err := s.applyGated(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	return outcome(res, cmd.Name)
}

// update replaces the value of a lock the lease holds (command format 4:
// 503 not_supported_yet until every node reads it). The answer is the lease
// as it stands, like a renew's.
func (s *Server) update(ctx context.Context, req *updateRequest) (int, any, error) {
	res, err := s.applyGated(ctx, fsm.Command{Op: fsm.OpUpdate, Name: req.Name, LeaseID: req.LeaseID, Value: req.Value})
	if err != nil {
		return 0, nil, err
	}
	return outcome(res, req.Name)
}

func (s *Server) release(ctx context.Context, req *releaseRequest) (int, any, error) {
	if req.Force {
		return s.forceRelease(ctx, req)
	}
	res, err := s.applyGated(ctx, fsm.Command{Op: fsm.OpRelease, Name: req.Name, LeaseID: req.LeaseID})
	if err != nil {
		return 0, nil, err
	}
	if res.Status == fsm.StatusOK {
		return http.StatusOK, api.Released{Released: true}, nil
	}
	return outcome(res, req.Name)
}

// writeHandler is every POST endpoint: read and validate a request of type R
// (answering bad input itself), then decide it where it can be decided (see
// onLeader). extra, if set, is time the request may take beyond
// RequestTimeout.
func writeHandler[R any, P interface {
	*R
	validator
}](s *Server, extra func(*R) time.Duration, decide func(context.Context, *R) (int, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := new(R)
		body, ok := s.parse(w, r, P(req))
		if !ok {
			return
		}
		if extra != nil {
			ctx, cancel := context.WithTimeout(r.Context(), extra(req)+s.opts.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		s.onLeader(w, r, body, func(ctx context.Context) (int, any, error) { return decide(ctx, req) })
	}
}

// parse reads and validates a request body, answering the error itself.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, dst validator) ([]byte, bool) {
	if err := jsonContentType(r); err != nil {
		writeError(w, err)
		return nil, false
	}
	body, err := readBody(w, r)
	if err == nil {
		err = decode(body, dst)
	}
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return body, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	name, err := url.PathUnescape(mux.Vars(r)["name"])
	if err != nil {
		writeError(w, badRequest("name: bad path escape: %v", err))
		return
	}
	if err := validName(name); err != nil {
		writeError(w, err)
		return
	}
	s.read(w, r, watchKey{key: name}, func(m store.LockReader) (any, uint64) {
		l, held, idx := m.Lookup(name)
		if held {
			return viewOf(m, l), idx
		}
		return api.FreeLock{Name: name, Index: idx}, idx
	})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, err := query(r)
	if err != nil {
		writeError(w, err)
		return
	}
	prefix := q.Get("prefix")
	if len(prefix) > api.MaxName {
		writeError(w, badRequest("prefix: must be at most %d bytes", api.MaxName))
		return
	}
	limit := api.DefaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > api.MaxListLimit {
			writeError(w, badRequest("limit: must be an integer between 1 and %d", api.MaxListLimit))
			return
		}
		limit = n
	}
	s.read(w, r, watchKey{key: prefix, prefix: true}, func(m store.LockReader) (any, uint64) {
		locks, truncated, idx := m.ListIndexed(prefix, limit)
		views := make([]api.Lock, len(locks))
		for i, l := range locks {
			views[i] = viewOf(m, l)
		}
		return api.LockList{Locks: views, Truncated: truncated, Index: idx}, idx
	})
}

// query parses the query string strictly: url.Query drops a pair it cannot
// unescape, and ?prefix=%zz would then list every lock.
func query(r *http.Request) (url.Values, error) {
	q := url.Values{}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, badRequest("query: bad escape in parameter name %q", k)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, badRequest("%s: bad escape in the query: %v", key, err)
		}
		q.Add(key, val)
	}
	return q, nil
}

// watchKey is what a blocking read waits on: one lock, or every lock under
// a prefix.
type watchKey struct {
	key    string
	prefix bool
}

// indexOf is the index a blocking read on k compares with its ?index=.
func (k watchKey) indexOf(m store.LockReader) uint64 {
	if k.prefix {
		return m.PrefixIndex(k.key)
	}
	return m.Index(k.key)
}

// Watcher is what a Store implements to wake parked blocking reads
// (raftnode.Node): Watch returns a channel closed when this node applies an
// entry that changes lock key (with prefix, any lock under key) or restores
// a snapshot; cancel releases it. A Store without it has blocking reads
// poll its state every watchPoll.
type Watcher interface {
	Watch(key string, prefix bool) (<-chan struct{}, func())
}

const watchPoll = 50 * time.Millisecond

// blocking parses ?index=N&wait_ms=M: ok is false when there is no index
// (a plain read). wait_ms defaults to api.DefaultBlockWaitMs.
func blocking(q url.Values) (after uint64, wait time.Duration, ok bool, err error) {
	v := q.Get("index")
	if v == "" {
		if q.Get("wait_ms") != "" {
			return 0, 0, false, badRequest("wait_ms: only with index")
		}
		return 0, 0, false, nil
	}
	after, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil {
		return 0, 0, false, badRequest("index: must be a non-negative integer")
	}
	ms := int64(api.DefaultBlockWaitMs)
	if v := q.Get("wait_ms"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 || n > api.MaxWaitMs {
			return 0, 0, false, badRequest("wait_ms: must be an integer between 0 and %d", api.MaxWaitMs)
		}
		ms = n
	}
	return after, time.Duration(ms) * time.Millisecond, true, nil
}

// park waits, on this node, until its own state shows k's index above
// after, or wait runs out, or the client goes. Woken by this node's applies
// (Watcher), it re-checks its own state, since a wake-up may concern
// entries at or below after (a follower catching up). It decides nothing:
// the caller then reads as usual (linearizably unless stale), so parking on
// a follower costs the leader nothing until the answer.
func (s *Server) park(ctx context.Context, k watchKey, after uint64, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	wt, _ := s.store.(Watcher)
	for {
		var woken <-chan struct{}
		cancel := func() {}
		if wt != nil {
			woken, cancel = wt.Watch(k.key, k.prefix) // before the check: no change slips between
		}
		m, err := s.store.Read(ctx, true)
		if err != nil || k.indexOf(m) > after {
			cancel()
			return // an error is the read's to answer
		}
		var poll <-chan time.Time
		if wt == nil {
			poll = time.After(watchPoll)
		}
		select {
		case <-woken:
		case <-poll:
		case <-timer.C:
			cancel()
			return
		case <-ctx.Done():
			cancel()
			return
		}
		cancel()
	}
}

// read answers from this node's state when ?stale=true, else linearizably
// from the leader. With ?index=N it is a blocking read: it first parks on
// this node until k's index passes N or wait_ms runs out (park). A read
// forwarded by another node does not park again: that node did. Every
// answer carries the index in X-Raftlock-Index.
func (s *Server) read(w http.ResponseWriter, r *http.Request, k watchKey, view func(store.LockReader) (any, uint64)) {
	q, err := query(r)
	if err != nil {
		writeError(w, err)
		return
	}
	stale := false
	if v := q.Get("stale"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badRequest("stale: must be true or false"))
			return
		}
		stale = b
	}
	after, wait, block, err := blocking(q)
	if err != nil {
		writeError(w, err)
		return
	}
	if block && r.Header.Get(api.HeaderForwardedBy) == "" {
		s.park(r.Context(), k, after, wait)
		if r.Context().Err() != nil {
			return // the client went away
		}
	}
	s.onLeader(w, r, nil, func(ctx context.Context) (int, any, error) {
		m, err := s.store.Read(ctx, stale)
		if unknownOutcome(err) {
			// A read applies nothing: its timeout is "no leader in time".
			return 0, nil, &apiError{http.StatusServiceUnavailable, api.CodeNoLeader, "no answer from the leader in time: " + err.Error()}
		}
		if err != nil {
			return 0, nil, err
		}
		body, idx := view(m)
		w.Header().Set(api.HeaderIndex, strconv.FormatUint(idx, 10))
		return http.StatusOK, body, nil
	})
}

// forceRelease ends whatever lease holds the lock (admin only; any caller
// with tokens off, as for every admin route). The leader refuses it with
// 503 not_supported_yet until every node reads command format 3. The node
// that decides logs it with the caller's token name.
func (s *Server) forceRelease(ctx context.Context, req *releaseRequest) (int, any, error) {
	if !s.callerMay(ctx, RoleAdmin) {
		return 0, nil, &apiError{http.StatusForbidden, api.CodeForbidden, "a force release needs an admin token"}
	}
	res, err := s.applyGated(ctx, fsm.Command{Op: fsm.OpForceRelease, Name: req.Name})
	if err != nil {
		return 0, nil, err
	}
	if res.Status != fsm.StatusOK {
		return outcome(res, req.Name)
	}
	by := callerName(ctx)
	if by == "" {
		by = "(tokens off)"
	}
	if res.Lock.Token == 0 {
		s.log.Info("force release: no lease held the lock", "lock", req.Name, "by", by)
		return http.StatusOK, api.Released{Released: false}, nil
	}
	s.log.Warn("force release: ended a lease", "lock", req.Name, "by", by,
		"holder", res.Lock.Owner, "fencing_token", res.Lock.Token, "lock_delay_ms", res.Lock.LockDelay)
	return http.StatusOK, api.Released{Released: true, Holder: &api.Holder{Owner: res.Lock.Owner, FencingToken: res.Lock.Token}}, nil
}
