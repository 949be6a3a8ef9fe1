package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/raftlock/raftlock/raftnode"
)

// Error codes of the contract (../shared/API.md) and a few additions.
const (
	codeBadRequest = "bad_request"
	codeTooLarge   = "too_large"
	codeNoLeader   = "no_leader"
	codeOverloaded = "overloaded"
	codeHeld       = "held"
	codeNotHolder  = "not_holder"
	codeNotFound   = "not_found"
	codeInternal   = "internal"
)

// apiError is an error with its HTTP status and contract code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, codeBadRequest, fmt.Sprintf(format, args...)}
}

// errorTable maps the node's sentinel errors to statuses, in one place.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{raftnode.ErrNotLeader, http.StatusServiceUnavailable, codeNoLeader},
	{raftnode.ErrNoLeader, http.StatusServiceUnavailable, codeNoLeader},
	{raftnode.ErrIndeterminate, http.StatusServiceUnavailable, codeNoLeader},
	{raftnode.ErrShutdown, http.StatusServiceUnavailable, codeNoLeader},
	{raftnode.ErrLeaderChanged, http.StatusServiceUnavailable, codeNoLeader},
	{raftnode.ErrOverloaded, http.StatusTooManyRequests, codeOverloaded},
	{raftnode.ErrUnknownNode, http.StatusNotFound, codeNotFound},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, codeNoLeader},
}

// writeError answers with the contract's error body. 503 and 429 carry
// Retry-After so clients back off instead of hammering.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{http.StatusInternalServerError, codeInternal, err.Error()}
		for _, row := range errorTable {
			if errors.Is(err, row.err) {
				ae = &apiError{row.status, row.code, err.Error()}
				break
			}
		}
	}
	if ae.status == http.StatusServiceUnavailable || ae.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, ae.status, map[string]string{"error": ae.code, "message": ae.message})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
