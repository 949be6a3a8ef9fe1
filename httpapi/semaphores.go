package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Semaphores (docs/API.md, "Semaphores"): up to limit fenced permits, each
// with a slot and the token of its granting entry. Their names are their
// own namespace. Every write needs command format 5.

// semAcquireRequest is api.SemaphoreAcquireRequest plus lock_delay_ms,
// which it refuses by name: a client that sends it expects a lock-delay
// that semaphores do not have, and "unknown field" would not say so.
type semAcquireRequest struct {
	Name        string `json:"name"`
	Limit       int64  `json:"limit"`
	Owner       string `json:"owner,omitempty"`
	TTLMs       *int64 `json:"ttl_ms,omitempty"`
	SessionID   string `json:"session_id,omitempty"`
	LeaseID     string `json:"lease_id,omitempty"`
	WaitMs      int64  `json:"wait_ms,omitempty"`
	LockDelayMs *int64 `json:"lock_delay_ms,omitempty"`
}

type (
	semRenewRequest   api.SemaphoreRenewRequest
	semReleaseRequest api.SemaphoreReleaseRequest
)

func (r *semAcquireRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	if err := inRange("limit", r.Limit, 1, api.MaxSemaphoreLimit); err != nil {
		return err
	}
	if err := validOwner(r.Owner); err != nil {
		return err
	}
	if err := ttlOrSession(r.TTLMs, r.SessionID); err != nil {
		return err
	}
	if r.LeaseID != "" {
		if err := validLeaseID(r.LeaseID); err != nil {
			return err
		}
	}
	if err := inRange("wait_ms", r.WaitMs, 0, api.MaxWaitMs); err != nil {
		return err
	}
	if r.LockDelayMs != nil {
		return badRequest("lock_delay_ms: semaphores have no lock-delay (a permit that expires is free at once)")
	}
	return nil
}

// A permit renew takes the fields and rules of a lease renew.
func (r *semRenewRequest) validate() error { return (*renewRequest)(r).validate() }

func (r *semReleaseRequest) validate() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	return validLeaseID(r.LeaseID)
}

// semOutcome turns the state machine's result for a semaphore command
// into the contract's answer.
func semOutcome(r fsm.Result, cmd fsm.Command) (int, any, error) {
	name := cmd.Name
	switch r.Status {
	case fsm.StatusOK:
		if cmd.Op == fsm.OpSemRelease {
			return http.StatusOK, api.Released{Released: true}, nil
		}
		l := r.Lock
		return http.StatusOK, api.Permit{Name: l.Name, Owner: l.Owner, LeaseID: l.LeaseID, Slot: l.Slot, FencingToken: l.Token,
			Limit: l.Limit, TTLMs: l.TTL, SessionID: l.SessionID}, nil
	case fsm.StatusFull:
		// The first holders only: 1,024 of them would make every refused
		// acquire tens of kilobytes.
		holders := make([]api.PermitHolder, min(len(r.Holders), api.MaxErrorHolders))
		for i := range holders {
			h := r.Holders[i]
			holders[i] = api.PermitHolder{Owner: h.Owner, Slot: h.Slot, FencingToken: h.Token}
		}
		return http.StatusConflict, api.FullError{Error: api.CodeFull, Holders: holders, HoldersTotal: len(r.Holders),
			Message: fmt.Sprintf("semaphore %q is full: all %d permits are held", name, len(r.Holders))}, nil
	case fsm.StatusLimitMismatch:
		return http.StatusConflict, api.LimitMismatchError{Error: api.CodeLimitMismatch, Limit: r.Limit,
			Message: fmt.Sprintf("limit: semaphore %q is held with limit %d, not %d", name, r.Limit, cmd.Limit)}, nil
	case fsm.StatusNotHolder:
		return http.StatusConflict, api.Error{Error: api.CodeNotHolder,
			Message: fmt.Sprintf("this lease holds no permit of semaphore %q (expired, released, or never did)", name)}, nil
	}
	return refusal(r, cmd)
}

func semAcquireWait(req *semAcquireRequest) time.Duration {
	return time.Duration(req.WaitMs) * time.Millisecond
}

func (s *Server) acquireSemaphore(ctx context.Context, req *semAcquireRequest) (int, any, error) {
	cmd := fsm.Command{Op: fsm.OpSemAcquire, Name: req.Name, Limit: req.Limit, Owner: req.Owner, LeaseID: req.LeaseID, SessionID: req.SessionID}
	if req.TTLMs != nil {
		cmd.TTL = *req.TTLMs
	}
	// The store parks it while the semaphore is full, as a lock acquire
	// while the lock is held (acquireGated waits on full as on held).
	return s.acquireAnswer(ctx, cmd, semAcquireWait(req), semOutcome)
}

func (s *Server) renewSemaphore(ctx context.Context, req *semRenewRequest) (int, any, error) {
	return s.applyAnswer(ctx, renewCommand(fsm.OpSemRenew, (*renewRequest)(req)), semOutcome)
}

func (s *Server) releaseSemaphore(ctx context.Context, req *semReleaseRequest) (int, any, error) {
	return s.applyAnswer(ctx, fsm.Command{Op: fsm.OpSemRelease, Name: req.Name, LeaseID: req.LeaseID}, semOutcome)
}

// getSemaphore reads one semaphore: its limit and permits by slot, never
// their lease ids. Nobody holding is 200 with limit 0 and no holders.
func (s *Server) getSemaphore(w http.ResponseWriter, r *http.Request) {
	name, ok := pathName(w, r, mux.Vars(r)["name"])
	if !ok {
		return
	}
	s.read(w, r, nil, func(m nodeapi.LockReader) (any, uint64, error) {
		sem, _ := m.Semaphore(name)
		v := api.Semaphore{Name: name, Limit: sem.Limit, Index: sem.Index, Holders: make([]api.SemaphoreHolder, 0, len(sem.Holders))}
		lv, leads := m.(nodeapi.LeaseView)
		for _, h := range sem.Holders {
			sh := api.SemaphoreHolder{Owner: h.Owner, Slot: h.Slot, FencingToken: h.Token, TTLMs: h.TTL}
			if leads {
				sh.RemainingMs = remaining(lv, h)
			}
			v.Holders = append(v.Holders, sh)
		}
		if leads {
			v.Waiters = lv.SemaphoreWaiters(name)
		}
		return v, v.Index, nil
	})
}
