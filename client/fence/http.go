package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Header is the request header that carries the fencing token, in decimal.
const Header = "Fencing-Token"

type tokenKey struct{}

// TokenFrom returns the token that Middleware accepted for the request of ctx.
func TokenFrom(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok
}

// Middleware admits a request only when g accepts the token of its Fencing-Token
// header for the resource that resource(r) names; the handler then finds the token
// with TokenFrom. It answers, in raftlock's error format:
//   - 400 bad_request for a missing, repeated or malformed header, a token outside
//     1..MaxToken, or an empty resource;
//   - 409 stale_token, with the refused and the current token:
//     {"error":"stale_token","message":"…","token":N,"current":M};
//   - 500 internal when the guard fails otherwise.
//
// The token is recorded before the handler runs, outside any transaction of the
// handler: a handler that fails after it cannot be retried with the same token.
// Where the token must commit with the write, call SQL.AdvanceTx or Pgx.AdvanceTx
// in the handler instead. Wrap only the routes that write.
func Middleware(g Guard, resource func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, err := parseToken(r.Header.Values(Header))
			if err != nil {
				writeError(w, http.StatusBadRequest, map[string]any{"error": "bad_request", "message": err.Error()})
				return
			}
			res := resource(r)
			if res == "" {
				writeError(w, http.StatusBadRequest, map[string]any{"error": "bad_request", "message": "no fenced resource in this request"})
				return
			}
			err = g.Advance(r.Context(), res, token)
			var serr *StaleTokenError
			switch {
			case err == nil:
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, token)))
			case errors.As(err, &serr):
				writeError(w, http.StatusConflict, map[string]any{
					"error": "stale_token", "message": serr.Error(),
					"token": serr.Token, "current": serr.Current,
				})
			case errors.Is(err, ErrInvalidToken):
				writeError(w, http.StatusBadRequest, map[string]any{"error": "bad_request", "message": err.Error()})
			default:
				// The guard's error may show storage internals: keep it from the client.
				writeError(w, http.StatusInternalServerError, map[string]any{"error": "internal", "message": "fencing check failed"})
			}
		})
	}
}

func parseToken(values []string) (uint64, error) {
	switch len(values) {
	case 0:
		return 0, fmt.Errorf("missing %s header", Header)
	case 1:
	default:
		return 0, fmt.Errorf("more than one %s header", Header)
	}
	v := values[0]
	t, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return 0, fmt.Errorf("%s header %q is not a decimal token", Header, v)
	}
	if err := validToken(t); err != nil {
		return 0, err
	}
	return t, nil
}

func writeError(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
