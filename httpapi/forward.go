package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// decision is what a handler's leader-side work produced.
type decision func(ctx context.Context) (status int, body any, err error)

// onLeader runs decide where it can be decided: here if this node leads,
// otherwise on the leader through one forwarded hop. While no leader is
// known, or the one it knows cannot be reached (killed, and this node has
// not yet noticed), it waits up to LeaderWait for one, then answers 503
// no_leader: a failover costs the client the election, not a Retry-After
// on top of it. Every 503 it answers itself is certain that decide handed
// nothing to the store; what decide's own errors promise is the error
// table's business.
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte, decide decision) {
	ctx := r.Context()
	if _, ok := ctx.Deadline(); !ok {
		// A slow quorum must not pile up requests forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	deadline := time.Now().Add(s.opts.LeaderWait)
	for {
		if err := ctx.Err(); err != nil {
			// Nothing handed to the store yet: certainly not applied.
			writeError(w, fmt.Errorf("%w known before the request's deadline (%v)", nodeapi.ErrNoLeader, err))
			return
		}
		status, out, err := decide(ctx)
		if err == nil {
			writeJSON(w, status, out)
			return
		}
		if !errors.Is(err, nodeapi.ErrNotLeader) && !errors.Is(err, nodeapi.ErrNoLeader) {
			writeError(w, err)
			return
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		id, addr, werr := s.store.WaitForLeader(wctx)
		cancel()
		switch {
		case werr != nil:
			writeError(w, fmt.Errorf("%w known after %v", nodeapi.ErrNoLeader, s.opts.LeaderWait))
			return
		case id != s.store.ID() && r.Header.Get(api.HeaderForwardedBy) != "":
			writeError(w, fmt.Errorf("%w: request forwarded by %s, but %s leads", nodeapi.ErrNotLeader, r.Header.Get(api.HeaderForwardedBy), id))
			return
		case id != s.store.ID():
			unsent := s.forward.relay(w, r, addr, body)
			if unsent == nil {
				return
			}
			if !time.Now().Before(deadline) {
				writeError(w, unsent)
				return
			}
			// Nothing reached the leader: ask again once a leader (the same
			// one back, or its successor) may be known.
			select {
			case <-ctx.Done():
				writeError(w, unsent)
				return
			case <-time.After(forwardRetry):
			}
			continue
		case !time.Now().Before(deadline):
			writeError(w, err)
			return
		}
		// This node leads but is not ready yet (its Barrier is running).
		select {
		case <-ctx.Done():
			// The last attempt was refused (not leading yet): nothing applied.
			writeError(w, fmt.Errorf("%w ready before the request's deadline: %v", nodeapi.ErrNoLeader, err))
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// forwarder relays requests to the leader over kept-alive connections.
type forwarder struct {
	self   string
	scheme string
	client *http.Client
}

func newForwarder(self string, tlsCfg *tls.Config) *forwarder {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	scheme := "http://"
	if tlsCfg != nil {
		t.TLSClientConfig, scheme = tlsCfg.Clone(), "https://"
	}
	return &forwarder{self: self, scheme: scheme, client: &http.Client{Transport: t}}
}

// forwardRetry is the pause before a request that could not be forwarded
// asks again who leads.
const forwardRetry = 20 * time.Millisecond

// relay sends r (with its already-read body) to the leader at addr and
// copies the answer back. A request that fails before the whole of it went
// out (no connection, refused, a write error) cannot have been applied: it
// answers nothing and returns a no_leader error, for the caller to answer
// or retry. Once it went out, a reset or a timeout, before or during the
// answer, leaves the leader's decision unknown: 504 (a read is retried).
func (f *forwarder) relay(w http.ResponseWriter, r *http.Request, addr string, body []byte) (unsent error) {
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			sent.Store(true)
		}
	}}
	ctx := httptrace.WithClientTrace(r.Context(), trace)
	req, err := http.NewRequestWithContext(ctx, r.Method, f.scheme+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		writeError(w, fmt.Errorf("forward to leader %s: %w", addr, err))
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderForwardedBy, f.self)
	if auth := r.Header.Get("Authorization"); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if sent.Load() && r.Method != http.MethodGet {
			writeError(w, fmt.Errorf("%w: forwarded to leader %s, then: %v", errUnknownOutcome, addr, err))
			return nil
		}
		return fmt.Errorf("%w: forwarding to leader %s failed: %v", nodeapi.ErrNoLeader, addr, err)
	}
	defer resp.Body.Close()
	// The whole answer is read before any of it is passed on: an answer cut
	// off after its head (a reset, the request's deadline) must not reach
	// the client as a 200 with half a body, which would read as a grant.
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		if r.Method != http.MethodGet {
			writeError(w, fmt.Errorf("%w: forwarded to leader %s, whose answer was cut off: %v", errUnknownOutcome, addr, err))
			return nil
		}
		return fmt.Errorf("%w: the answer of leader %s was cut off: %v", nodeapi.ErrNoLeader, addr, err)
	}
	markForwarded(w)
	for _, h := range []string{"Content-Type", api.HeaderRetryAfter, "WWW-Authenticate", api.HeaderLeader, api.HeaderIndex} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
	return nil
}
