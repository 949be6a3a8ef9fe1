package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// A cluster that does not support a request yet (503 not_supported_yet: a
// member too old for the command format it needs) is retried only briefly,
// not until the caller's context ends: raftlock elect campaigns without a
// deadline and would otherwise wait in silence.
func TestNotSupportedYetIsNotRetriedForever(t *testing.T) {
	old := notSupportedPatience
	notSupportedPatience = 300 * time.Millisecond
	t.Cleanup(func() { notSupportedPatience = old })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.HeaderNode, "n1")
		w.Header().Set(api.HeaderLeader, "n1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"not_supported_yet","message":"force release needs every node at command version 3"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.ForceRelease(ctx, "a")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != api.CodeNotSupportedYet {
		t.Fatalf("err = %v, want an APIError with code not_supported_yet", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call ran until its context ended")
	}
}
