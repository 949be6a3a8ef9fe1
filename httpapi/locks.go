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

// viewOf is a lock as reads show it: never with its lease_id.
func viewOf(l fsm.Lock) api.Lock {
	return api.Lock{Name: l.Name, Held: true, Owner: l.Owner, FencingToken: l.Token, TTLMs: l.TTL}
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
	cmd := fsm.Command{Op: fsm.OpAcquire, Name: req.Name, Owner: req.Owner, LeaseID: req.LeaseID, TTL: *req.TTLMs, LockDelay: req.LockDelayMs}
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
	s.read(w, r, func(m store.LockReader) any {
		if l, ok := m.Get(name); ok {
			return viewOf(l)
		}
		return api.FreeLock{Name: name}
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
	s.read(w, r, func(m store.LockReader) any {
		locks, truncated := m.List(prefix, limit)
		views := make([]api.Lock, len(locks))
		for i, l := range locks {
			views[i] = viewOf(l)
		}
		return api.LockList{Locks: views, Truncated: truncated}
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

// read answers from this node's state when ?stale=true, else linearizably
// from the leader.
func (s *Server) read(w http.ResponseWriter, r *http.Request, view func(store.LockReader) any) {
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
	s.onLeader(w, r, nil, func(ctx context.Context) (int, any, error) {
		m, err := s.store.Read(ctx, stale)
		if unknownOutcome(err) {
			// A read applies nothing: its timeout is "no leader in time".
			return 0, nil, &apiError{http.StatusServiceUnavailable, api.CodeNoLeader, "no answer from the leader in time: " + err.Error()}
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, view(m), nil
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
