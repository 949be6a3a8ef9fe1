package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Sessions (docs/API.md, "Sessions"): one keepalive for many leases. The
// session id is a secret under the lease-id rule; the leader makes one
// when the create gives none. Every write needs command format 5, so the
// leader answers 503 not_supported_yet until every node reads it.

type (
	sessionCreateRequest api.SessionCreateRequest
	sessionRenewRequest  api.SessionRenewRequest
	sessionCloseRequest  api.SessionCloseRequest
)

func (r *sessionCreateRequest) validate() error {
	if err := validOwner(r.Owner); err != nil {
		return err
	}
	if err := inRange("ttl_ms", r.TTLMs, api.MinTTLMs, api.MaxTTLMs); err != nil {
		return err
	}
	if err := inRange("lock_delay_ms", r.LockDelayMs, 0, api.MaxLockDelayMs); err != nil {
		return err
	}
	if r.SessionID != "" {
		return validID("session_id", r.SessionID)
	}
	return nil
}

func (r *sessionRenewRequest) validate() error {
	if err := validID("session_id", r.SessionID); err != nil {
		return err
	}
	if r.TTLMs != nil {
		return inRange("ttl_ms", *r.TTLMs, api.MinTTLMs, api.MaxTTLMs)
	}
	return nil
}

func (r *sessionCloseRequest) validate() error { return validID("session_id", r.SessionID) }

// sessionOutcome turns the state machine's result for a session command
// into the contract's answer.
func sessionOutcome(r fsm.Result, cmd fsm.Command) (int, any, error) {
	if r.Status == fsm.StatusInvalid && cmd.Op == fsm.OpSessionCreate {
		// The request was valid, so the id is live on other terms.
		return 0, nil, badRequest("session_id: in use by a session of another owner, ttl_ms or lock_delay_ms (session exists with other terms); a retried create must repeat the terms it was made with, else use another session_id")
	}
	if r.Status != fsm.StatusOK {
		return refusal(r, cmd)
	}
	if cmd.Op == fsm.OpSessionClose {
		return http.StatusOK, api.SessionClosed{Closed: true, Released: r.Ended}, nil
	}
	ss := r.Session
	return http.StatusOK, api.Session{SessionID: ss.ID, Owner: ss.Owner, TTLMs: ss.TTL, LockDelayMs: ss.LockDelay}, nil
}

// createSession is gated as an acquire (not a priority write): it adds
// work, where a renew or close keeps or ends it. Session writes name no
// lock, so they count against the token's tenant, or the shared one.
func (s *Server) createSession(ctx context.Context, req *sessionCreateRequest) (int, any, error) {
	cmd := fsm.Command{Op: fsm.OpSessionCreate, SessionID: req.SessionID, Owner: req.Owner, TTL: req.TTLMs, LockDelay: req.LockDelayMs}
	rs, err := s.reserveSession(ctx)
	if err != nil {
		return 0, nil, err
	}
	tk, err := s.admit(ctx, "", false)
	if err != nil {
		rs.Cancel()
		return 0, nil, err
	}
	res, err := s.store.Apply(ctx, cmd)
	if tk != nil {
		tk.Done(observable(res, err))
	}
	if err == nil && res.Status == fsm.StatusOK {
		rs.Commit(res.Session.ID)
	} else {
		// An unknown outcome may have created it uncounted; the retry
		// that settles a 504 (the same create) counts it.
		rs.Cancel()
	}
	if err != nil {
		return 0, nil, err
	}
	return sessionOutcome(res, cmd)
}

func (s *Server) renewSession(ctx context.Context, req *sessionRenewRequest) (int, any, error) {
	if err := s.maySession(ctx, req.SessionID); err != nil {
		return 0, nil, err
	}
	cmd := fsm.Command{Op: fsm.OpSessionRenew, SessionID: req.SessionID}
	if req.TTLMs != nil {
		cmd.TTL = *req.TTLMs
	}
	return s.applyAnswer(ctx, cmd, sessionOutcome)
}

func (s *Server) closeSession(ctx context.Context, req *sessionCloseRequest) (int, any, error) {
	if err := s.maySession(ctx, req.SessionID); err != nil {
		return 0, nil, err
	}
	cmd := fsm.Command{Op: fsm.OpSessionClose, SessionID: req.SessionID}
	res, err := s.applyGated(ctx, cmd)
	if err != nil {
		return 0, nil, err
	}
	if res.Status == fsm.StatusOK {
		s.caps.sessions.Remove(tenantOf(ctx, ""), req.SessionID)
		s.log.Debug("session closed", "owner", res.Session.Owner, "released", res.Ended)
	}
	return sessionOutcome(res, cmd)
}

// getSession reads one session and its leases, never their lease ids.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id, err := url.PathUnescape(mux.Vars(r)["id"])
	if err == nil {
		err = validID("id", id)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.read(w, r, nil, func(m nodeapi.LockReader) (any, uint64, error) {
		ss, ok := m.Session(id)
		if !ok {
			return nil, 0, &apiError{http.StatusNotFound, api.CodeNoSession, "no such session (never created, expired, or closed)"}
		}
		if err := sessionInScope(r.Context(), ss); err != nil {
			return nil, 0, err
		}
		return sessionView(m, ss), ss.Index, nil
	})
}

// sessionView is a session as reads show it.
func sessionView(m nodeapi.LockReader, ss fsm.Session) api.SessionInfo {
	v := api.SessionInfo{SessionID: ss.ID, Owner: ss.Owner, TTLMs: ss.TTL, LockDelayMs: ss.LockDelay, Index: ss.Index,
		Leases: make([]api.SessionLease, 0, len(ss.Leases))}
	if lv, ok := m.(nodeapi.LeaseView); ok {
		v.RemainingMs = remaining(lv, fsm.Lock{Deadline: ss.Deadline})
	}
	for _, l := range ss.Leases {
		sl := api.SessionLease{Kind: api.LeaseKindLock, Name: l.Name, FencingToken: l.Token, Mode: modeName(l.Mode)}
		if l.Limit > 0 {
			slot := l.Slot
			sl.Kind, sl.Mode, sl.Slot = api.LeaseKindSemaphore, "", &slot
		}
		v.Leases = append(v.Leases, sl)
	}
	return v
}
