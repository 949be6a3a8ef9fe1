package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// apiError is an error with its HTTP status and contract code.
type apiError struct {
	status  int
	code    string
	message string
}

// retryError is a 429 with a time to retry of its own (a cap's pushback).
type retryError struct {
	*apiError
	after time.Duration
}

func (e *retryError) Unwrap() error { return e.apiError }

// retryAfter429 is when a 429 asks to be tried again: Retry-After: 1 and
// retry_after_ms 1000. Every 429 is a refusal of one request among many of
// its tenant (or node); one second lets parked work end and in-flight
// writes drain, and clients add their own jitter.
const retryAfter429 = time.Second

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf(format, args...)}
}

// errorTable maps the node's sentinel errors to statuses, in one place, first
// match wins. 503 and 429 promise that nothing was applied, so only errors
// that are certain of that may map to them; a write whose fate the node
// cannot know is 504 unknown_outcome. An error not in the table is 500,
// which promises nothing either.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	// First: an indeterminate error may also wrap ErrShutdown.
	{nodeapi.ErrIndeterminate, http.StatusGatewayTimeout, api.CodeUnknownOutcome},
	{errUnknownOutcome, http.StatusGatewayTimeout, api.CodeUnknownOutcome},
	// The request's deadline (or the client going away) after the command
	// was handed to the store: it may have been submitted, and a parked
	// acquire's grant may be in flight. Reads map these themselves (read).
	{context.DeadlineExceeded, http.StatusGatewayTimeout, api.CodeUnknownOutcome},
	{context.Canceled, http.StatusGatewayTimeout, api.CodeUnknownOutcome},
	{nodeapi.ErrNotLeader, http.StatusServiceUnavailable, api.CodeNoLeader},
	{nodeapi.ErrNoLeader, http.StatusServiceUnavailable, api.CodeNoLeader},
	{nodeapi.ErrShutdown, http.StatusServiceUnavailable, api.CodeNoLeader},
	{nodeapi.ErrLeaderChanged, http.StatusServiceUnavailable, api.CodeNoLeader},
	{nodeapi.ErrOverloaded, http.StatusTooManyRequests, api.CodeOverloaded},
	{nodeapi.ErrUnknownNode, http.StatusNotFound, api.CodeNotFound},
	// Refused by the leader before anything reached the log: not every
	// member reads the command format the request needs.
	{nodeapi.ErrNotSupportedYet, http.StatusServiceUnavailable, api.CodeNotSupportedYet},
	// Refused before anything reached the log: this node's state is not the
	// cluster's (a state check found it different from the leader's).
	{nodeapi.ErrDiverged, http.StatusServiceUnavailable, api.CodeDiverged},
	// The leader's disk refused the entry and the leader stepped down; with
	// a log store that can half-write a batch nobody can promise the entry
	// is gone, so the status promises nothing (500) and Retry-After invites
	// the same-lease retry that settles it.
	{nodeapi.ErrStorage, http.StatusInternalServerError, api.CodeStorage},
}

// errUnknownOutcome marks a failure after which this node cannot know
// whether the write was applied: a forward that failed once the whole
// request had gone out to the leader.
var errUnknownOutcome = errors.New("outcome unknown")

// unknownOutcome reports whether writeError would answer err with 504.
func unknownOutcome(err error) bool {
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			return row.code == api.CodeUnknownOutcome
		}
	}
	return false
}

// writeError answers with the contract's error body. 503, 504 and 429 carry
// Retry-After so clients back off instead of hammering.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{http.StatusInternalServerError, api.CodeInternal, err.Error()}
		for _, row := range errorTable {
			if errors.Is(err, row.err) {
				ae = &apiError{row.status, row.code, err.Error()}
				break
			}
		}
	}
	switch ae.status {
	case http.StatusForbidden:
		// Also for a 403 decided by a handler (a force release without an
		// admin token), as authorize answers it.
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="raftlock", error="insufficient_scope"`)
		}
	case http.StatusTooManyRequests:
		retry := retryAfter429
		if re := (*retryError)(nil); errors.As(err, &re) && re.after > 0 {
			retry = re.after
		}
		w.Header().Set(api.HeaderRetryAfter, strconv.Itoa(int((retry+time.Second-1)/time.Second)))
		writeJSON(w, ae.status, api.Error{Error: ae.code, Message: ae.message, RetryAfterMs: retry.Milliseconds()})
		return
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		w.Header().Set(api.HeaderRetryAfter, "1")
	case http.StatusInternalServerError:
		if ae.code == api.CodeStorage {
			w.Header().Set(api.HeaderRetryAfter, "1")
		}
	}
	writeJSON(w, ae.status, api.Error{Error: ae.code, Message: ae.message})
}

// jsonType is the Content-Type of every JSON answer, one slice shared by
// all: net/http only reads it, and Header.Set would allocate one each time.
var jsonType = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
