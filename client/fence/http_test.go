package fence

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type guardFunc func(ctx context.Context, resource string, token uint64) error

func (f guardFunc) Advance(ctx context.Context, resource string, token uint64) error {
	return f(ctx, resource, token)
}

func TestMiddleware(t *testing.T) {
	byPath := func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/tickets/") }
	tests := []struct {
		name    string
		seed    uint64   // token already accepted for resource "402", 0 for none
		path    string   // "/tickets/<resource>"
		headers []string // Fencing-Token values
		guard   Guard    // nil: a Memory guard holding seed
		status  int
		body    map[string]any // expected JSON fields; nil: the handler's "ok"
	}{
		{name: "first token passes", path: "/tickets/402", headers: []string{"7"}, status: 200},
		{name: "higher token passes", seed: 7, path: "/tickets/402", headers: []string{"8"}, status: 200},
		{name: "other resource passes", seed: 7, path: "/tickets/403", headers: []string{"3"}, status: 200},
		{name: "lower token is 409", seed: 7, path: "/tickets/402", headers: []string{"6"}, status: 409,
			body: map[string]any{"error": "stale_token", "token": 6.0, "current": 7.0}},
		{name: "equal token is 409", seed: 7, path: "/tickets/402", headers: []string{"7"}, status: 409,
			body: map[string]any{"error": "stale_token", "token": 7.0, "current": 7.0}},
		{name: "missing header is 400", path: "/tickets/402", status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "empty header is 400", path: "/tickets/402", headers: []string{""}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "garbled header is 400", path: "/tickets/402", headers: []string{"12abc"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "negative token is 400", path: "/tickets/402", headers: []string{"-5"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "hex token is 400", path: "/tickets/402", headers: []string{"0x10"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "token 0 is 400", path: "/tickets/402", headers: []string{"0"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "token beyond MaxToken is 400", path: "/tickets/402", headers: []string{"9223372036854775808"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "token beyond uint64 is 400", path: "/tickets/402", headers: []string{"18446744073709551616"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "two headers are 400", path: "/tickets/402", headers: []string{"8", "9"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "no resource is 400", path: "/tickets/", headers: []string{"8"}, status: 400, body: map[string]any{"error": "bad_request"}},
		{name: "guard failure is 500 without details", path: "/tickets/402", headers: []string{"8"},
			guard:  guardFunc(func(context.Context, string, uint64) error { return errors.New("pq: secret internals") }),
			status: 500, body: map[string]any{"error": "internal", "message": "fencing check failed"}},
		{name: "wrapped stale error is 409", path: "/tickets/402", headers: []string{"8"},
			guard: guardFunc(func(_ context.Context, res string, tok uint64) error {
				return errors.Join(errors.New("ctx"), &StaleTokenError{Resource: res, Token: tok, Current: 9})
			}),
			status: 409, body: map[string]any{"error": "stale_token", "token": 8.0, "current": 9.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.guard
			if g == nil {
				m := NewMemory()
				if tt.seed != 0 {
					if err := m.Advance(context.Background(), "402", tt.seed); err != nil {
						t.Fatal(err)
					}
				}
				g = m
			}
			called := false
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called = true
				tok, ok := TokenFrom(r.Context())
				if !ok || tt.headers == nil || tok == 0 {
					t.Errorf("TokenFrom = %d, %v", tok, ok)
				}
				w.Write([]byte("ok"))
			})
			req := httptest.NewRequest("POST", tt.path, nil)
			for _, h := range tt.headers {
				req.Header.Add(Header, h)
			}
			rec := httptest.NewRecorder()
			Middleware(g, byPath)(next).ServeHTTP(rec, req)

			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if tt.body == nil {
				if !called || rec.Body.String() != "ok" {
					t.Fatalf("handler not called (body %q)", rec.Body)
				}
				return
			}
			if called {
				t.Fatal("handler called on a refused request")
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if msg, _ := got["message"].(string); msg == "" {
				t.Errorf("no message in %v", got)
			}
			for k, v := range tt.body {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (body %v)", k, got[k], v, got)
				}
			}
		})
	}
}

// The 409 message names both tokens, so a log line of it tells the story.
func TestMiddlewareStaleMessage(t *testing.T) {
	g := NewMemory()
	g.Advance(context.Background(), "r", 10482)
	h := Middleware(g, func(*http.Request) string { return "r" })(http.NotFoundHandler())
	req := httptest.NewRequest("PUT", "/", nil)
	req.Header.Set(Header, "10481")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body struct{ Message string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	if !strings.Contains(body.Message, "10481") || !strings.Contains(body.Message, "10482") {
		t.Fatalf("message %q does not name both tokens", body.Message)
	}
}
