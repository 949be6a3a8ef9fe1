package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Sentinel errors. Errors returned by the client match them with errors.Is;
// the details are in the *APIError or *HeldError behind them (errors.As).
var (
	// ErrHeld: the lock is held by another lease (API code "held").
	ErrHeld = errors.New("raftlock: lock is held")
	// ErrNotHolder: the lease does not hold the lock (API code "not_holder").
	ErrNotHolder = errors.New("raftlock: lease does not hold the lock")
	// ErrNoLeader: the cluster has no leader (API code "no_leader").
	ErrNoLeader = errors.New("raftlock: no leader")
	// ErrOverloaded: the leader's queue is full (API code "overloaded").
	ErrOverloaded = errors.New("raftlock: overloaded")
	// ErrUnknownOutcome: a write may or may not have been applied, and the
	// client ran out of time (or, for a request it does not resend, of
	// retries) before it could tell: the server answered 504
	// "unknown_outcome" (say, leadership was lost with the entry in flight),
	// or an attempt's connection failed after the request went out. Acquire,
	// renew and release are resent with the same lease id until the caller's
	// context ends, so this only comes back when it does; the error also
	// matches the context's error and the last failure. An acquire that ends
	// so is released, best effort, before the error is returned.
	ErrUnknownOutcome = errors.New("raftlock: outcome unknown (the request may have been applied)")
	// ErrUnauthorized: no token, or one the cluster does not know (API
	// code "unauthorized", HTTP 401).
	ErrUnauthorized = errors.New("raftlock: unauthorized")
	// ErrForbidden: the token's role does not allow the request (API code
	// "forbidden", HTTP 403): read-only on a write, or not admin on a
	// cluster change.
	ErrForbidden = errors.New("raftlock: forbidden")
	// ErrLeaseLost: the lease can no longer be trusted, because the server
	// said not_holder or the local deadline passed before a renewal
	// succeeded. It is the cause of a lost Lease's Context.
	ErrLeaseLost = errors.New("raftlock: lease lost")
	// ErrReleased is the cause of a Lease's Context after Release.
	ErrReleased = errors.New("raftlock: lease released")
	// ErrDetached is the cause of a Lease's Context after Detach.
	ErrDetached = errors.New("raftlock: lease detached")

	// ErrNoSession: the session is unknown or has ended (API code
	// "no_session", HTTP 404); so have all of its leases.
	ErrNoSession = errors.New("raftlock: no such session")
	// ErrSessionFull: the session holds as many leases as it may (API
	// code "session_full").
	ErrSessionFull = errors.New("raftlock: session full")
	// ErrFull: every permit of the semaphore is held (API code "full");
	// the *FullError behind it lists the holders.
	ErrFull = errors.New("raftlock: semaphore full")
	// ErrLimitMismatch: the semaphore's holders took it with another limit
	// (API code "limit_mismatch"); the *LimitMismatchError behind it has
	// the current limit.
	ErrLimitMismatch = errors.New("raftlock: semaphore limit mismatch")
	// ErrSessionLost: the session can no longer be trusted, because the
	// server said no_session or the local deadline passed before a renewal
	// succeeded. It is the cause of a lost Session's Context; the leases of
	// the session are lost with a cause matching it and ErrLeaseLost.
	ErrSessionLost = errors.New("raftlock: session lost")
	// ErrSessionClosed is the cause of a Session's Context after Close; its
	// leases end with a cause matching it and ErrReleased.
	ErrSessionClosed = errors.New("raftlock: session closed")
)

// API error codes, as defined in the HTTP contract (package api,
// docs/API.md).
const (
	CodeHeld       = api.CodeHeld
	CodeNotHolder  = api.CodeNotHolder
	CodeNoLeader   = api.CodeNoLeader
	CodeOverloaded = api.CodeOverloaded
	// CodeUnknownOutcome (HTTP 504): the node cannot know whether the
	// write was applied; it may still be. Retry with the same lease id.
	CodeUnknownOutcome = api.CodeUnknownOutcome
	CodeBadRequest     = api.CodeBadRequest
	CodeTooLarge       = api.CodeTooLarge

	CodeUnauthorized = api.CodeUnauthorized
	CodeForbidden    = api.CodeForbidden

	// CodeNotFound (HTTP 404): no such endpoint, or a leave of a node that
	// is not a member.
	CodeNotFound = api.CodeNotFound
	// CodeUnsupportedMediaType (HTTP 415): the body was not declared
	// application/json.
	CodeUnsupportedMediaType = api.CodeUnsupportedMediaType
	// CodeUnsafeChange (HTTP 409): a join or leave the leader refused
	// because too few healthy voters would be left.
	CodeUnsafeChange = api.CodeUnsafeChange
	// CodeStorage (HTTP 500): the leader's disk refused the entry; whether
	// it was applied is unknown, so resend with the same lease id.
	CodeStorage = api.CodeStorage
	// CodeDiverged (HTTP 503): the answering node's state differs from the
	// leader's; nothing was applied.
	CodeDiverged = api.CodeDiverged
	CodeInternal = api.CodeInternal

	// Sessions and semaphores (docs/API.md).
	CodeNoSession     = api.CodeNoSession     // 404
	CodeFull          = api.CodeFull          // 409, body lists the holders
	CodeLimitMismatch = api.CodeLimitMismatch // 409, body has the current limit
	CodeSessionFull   = api.CodeSessionFull   // 409
)

// APIError is an error answer of the API: {"error": Code, "message": Message}
// with HTTP status Status.
type APIError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the server's Retry-After header, if it sent one.
	RetryAfter time.Duration
	// Node is the id of the node that answered (X-Raftlock-Node), if known.
	Node string
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = "http_error"
	}
	if e.Message == "" {
		return fmt.Sprintf("raftlock: %s (HTTP %d)", code, e.Status)
	}
	return fmt.Sprintf("raftlock: %s (HTTP %d): %s", code, e.Status, e.Message)
}

// Is lets errors.Is(err, ErrNoLeader) and friends match on the API code.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrHeld:
		return e.Code == CodeHeld
	case ErrNotHolder:
		return e.Code == CodeNotHolder
	case ErrNoLeader:
		return e.Code == CodeNoLeader
	case ErrOverloaded:
		return e.Code == CodeOverloaded
	case ErrUnknownOutcome:
		return e.Code == CodeUnknownOutcome
	case ErrUnauthorized:
		return e.Code == CodeUnauthorized
	case ErrForbidden:
		return e.Code == CodeForbidden
	case ErrNoSession:
		return e.Code == CodeNoSession
	case ErrSessionFull:
		return e.Code == CodeSessionFull
	case ErrFull:
		return e.Code == CodeFull
	case ErrLimitMismatch:
		return e.Code == CodeLimitMismatch
	}
	return false
}

// HeldError is the answer to an acquire of a lock that another lease holds.
// It matches ErrHeld.
type HeldError struct {
	APIError
	// Name of the lock.
	Name string
	// Owner and Token of the lease that holds it: of a lock held shared,
	// the holder with the lowest token.
	Owner string
	Token uint64
	// Holders lists the holders of a lock held shared (by token), the
	// first api.MaxErrorHolders of them; nil for a lock held exclusive.
	Holders []Holder
	// Total counts every holder of a lock held shared (at least
	// len(Holders)); 0 for a lock held exclusive.
	Total int
}

// Holder is one holder of a lock held shared, or of a semaphore's permit.
type Holder struct {
	Owner string
	Token uint64
	Slot  int           // a permit's slot; 0 for a lock
	TTL   time.Duration // in reads; 0 in error answers
	// Remaining is the holder's time left on the leader's clock, in reads
	// answered by the leader; -1 when unknown.
	Remaining time.Duration
}

// FullError is the answer to a semaphore acquire when every permit is held.
// It matches ErrFull.
type FullError struct {
	APIError
	Name    string   // the semaphore
	Holders []Holder // the permits' holders by slot, the first api.MaxErrorHolders of them
	Total   int      // every permit held (at least len(Holders))
}

func (e *FullError) Error() string {
	return fmt.Sprintf("raftlock: semaphore %q is full (%d holders)", e.Name, e.Total)
}

// Is matches ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Unwrap exposes the underlying *APIError.
func (e *FullError) Unwrap() error { return &e.APIError }

// LimitMismatchError is the answer to a semaphore acquire whose limit
// differs from the one its holders took it with. It matches ErrLimitMismatch.
type LimitMismatchError struct {
	APIError
	Name  string // the semaphore
	Limit int64  // the current limit
}

func (e *LimitMismatchError) Error() string {
	return fmt.Sprintf("raftlock: semaphore %q is held with limit %d", e.Name, e.Limit)
}

// Is matches ErrLimitMismatch.
func (e *LimitMismatchError) Is(target error) bool { return target == ErrLimitMismatch }

// Unwrap exposes the underlying *APIError.
func (e *LimitMismatchError) Unwrap() error { return &e.APIError }

func (e *HeldError) Error() string {
	return fmt.Sprintf("raftlock: lock %q is held by %q (fencing token %d)", e.Name, e.Owner, e.Token)
}

// Is matches ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// Unwrap exposes the underlying *APIError.
func (e *HeldError) Unwrap() error { return &e.APIError }

// unknownOutcome marks err with ErrUnknownOutcome when some attempt may have
// been applied (oc.ambiguous) and err is no definite answer of the server.
func unknownOutcome(oc outcome, err error) error {
	if err == nil || !oc.ambiguous || errors.Is(err, ErrUnknownOutcome) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

// ctxError reports that ctx ended, keeping the last failure seen so that
// errors.Is matches both (say) context.DeadlineExceeded and ErrNoLeader.
func ctxError(ctx interface{ Err() error }, last error) error {
	if last == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
}
