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
	}
	return false
}

// HeldError is the answer to an acquire of a lock that another lease holds.
// It matches ErrHeld.
type HeldError struct {
	APIError
	// Name of the lock.
	Name string
	// Owner and Token of the lease that holds it.
	Owner string
	Token uint64
}

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
