package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

const maxResponseBody = 4 << 20

// request describes one logical API call; do may send it several times.
type request struct {
	method string
	path   string // escaped
	query  string // encoded, without "?"
	body   any    // JSON-encoded when not nil
	// leader: send to the leader when known (writes, linearizable reads).
	// Followers would forward, but going direct saves a hop.
	leader bool
	// idempotent: safe to send again after a failure that leaves unknown
	// whether the server acted on it (timeout, reset connection, 5xx).
	idempotent bool
	// serverWait is how long the server may hold the request (wait_ms).
	serverWait time.Duration
	// lock names the lock, for *HeldError.
	lock string
}

// outcome tells what the attempts of a call may have done.
type outcome struct {
	// sent is the send time of the earliest attempt that may have taken
	// effect. Lease deadlines count from it: a lost answer to an earlier
	// attempt may have started the lease before the attempt that answered.
	sent time.Time
	// ambiguous: some attempt failed without telling whether it took effect.
	ambiguous bool
}

func (o *outcome) mayHaveApplied(sent time.Time) {
	if o.sent.IsZero() {
		o.sent = sent
	}
	o.ambiguous = true
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends r until it gets a definite answer or ctx ends, moving across
// endpoints on connection errors, 503 and 429 (honouring Retry-After) with
// jittered exponential backoff. A 200 answer is decoded into out.
func (c *Client) do(ctx context.Context, r request, out any) (outcome, error) {
	cl := call{c: c, r: r}
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return cl.tried, fmt.Errorf("raftlock: encode request: %w", err)
		}
		cl.body = b
	}
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return cl.tried, unknownOutcome(cl.tried, ctxError(ctx, cl.last))
		}
		u, err := cl.pickEndpoint(ctx)
		if err != nil {
			return cl.tried, err
		}
		sent := c.clock.Now()
		resp, err := c.send(ctx, u, r, cl.body)
		if err != nil {
			if err := cl.sendFailed(ctx, u, sent, attempt, err); err != nil {
				return cl.tried, err
			}
			continue
		}
		c.observe(u, resp.header, resp.status)
		if done, err := cl.answered(u, sent, attempt, resp, out); done {
			return cl.tried, err
		}
	}
}

// call is one logical request across its attempts.
type call struct {
	c     *Client
	r     request
	body  []byte
	tried outcome // what the attempts so far may have done
	last  error   // the last attempt's failure, the best reason to give
	// notSupportedSince is when the first 503 not_supported_yet came: it
	// is retried for notSupportedPatience only (a leader's first survey of
	// its members after an election), not until ctx ends, since the
	// cluster may simply have a node that is too old.
	notSupportedSince time.Time
}

// notSupportedPatience bounds how long a call resends a request that the
// cluster does not support yet.
var notSupportedPatience = 5 * time.Second // a var so tests can shorten it

// pickEndpoint chooses where the next attempt goes, waiting out a backoff
// unless it would run past the caller's deadline.
func (cl *call) pickEndpoint(ctx context.Context) (string, error) {
	c := cl.c
	if cl.r.leader && c.needLeaderLookup() {
		c.lookupLeader(ctx)
	}
	u, wait := c.route(cl.r.leader)
	if wait <= 0 {
		return u, nil
	}
	// No point sleeping into the caller's deadline: give up now, with the
	// reason (no_leader, overloaded, refused).
	if dl, ok := ctx.Deadline(); ok && cl.last != nil && time.Until(dl) < wait {
		return "", unknownOutcome(cl.tried, fmt.Errorf("%w (last error: %w)", context.DeadlineExceeded, cl.last))
	}
	if err := c.sleep(ctx, wait); err != nil {
		return "", unknownOutcome(cl.tried, ctxError(ctx, cl.last))
	}
	return u, nil
}

// sendFailed handles an attempt that got no answer. It returns the error
// that ends the call, or nil to try again.
func (cl *call) sendFailed(ctx context.Context, u string, sent time.Time, attempt int, err error) error {
	c, r := cl.c, cl.r
	definite := notSent(err)
	if !definite && r.method != http.MethodGet { // a read applies nothing
		cl.tried.mayHaveApplied(sent)
	}
	if ctx.Err() != nil {
		// The previous failure, if any, says more than "canceled".
		return unknownOutcome(cl.tried, ctxError(ctx, cmp.Or(cl.last, err)))
	}
	cl.last = fmt.Errorf("raftlock: %s %s: %w", r.method, u+r.path, err)
	if badCertificate(err) {
		return cl.last // every retry would meet the same certificate
	}
	c.log.Debug("request failed", "endpoint", u, "path", r.path, "attempt", attempt, "error", err)
	c.penalize(u, c.backoff(attempt), true)
	if !definite && !r.idempotent {
		return unknownOutcome(cl.tried, cl.last)
	}
	return nil
}

// answered handles an attempt that got an HTTP answer: done says the call
// is over (with err, nil on success); otherwise the next attempt follows.
func (cl *call) answered(u string, sent time.Time, attempt int, resp *response, out any) (done bool, err error) {
	c, r := cl.c, cl.r
	if resp.status == http.StatusOK {
		if out != nil && (!isObject(resp.body) || json.Unmarshal(resp.body, out) != nil) {
			// Every 200 of the API is one JSON object: one that is not all
			// there (cut off on the way) says nothing of what was done,
			// like a reset connection.
			return cl.cutOff(u, sent, attempt)
		}
		if cl.tried.sent.IsZero() {
			cl.tried.sent = sent
		}
		return true, nil
	}
	apiErr := c.parseError(resp, r.lock)
	cl.last = apiErr
	switch resp.status {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		// The contract says neither leaves a half-applied change, so these
		// are safe to retry for any request.
		if ae, ok := apiErr.(*APIError); ok && ae.Code == api.CodeNotSupportedYet {
			if cl.notSupportedSince.IsZero() {
				cl.notSupportedSince = c.clock.Now()
			} else if c.clock.Now().Sub(cl.notSupportedSince) > notSupportedPatience {
				return true, apiErr
			}
		}
		d := max(c.backoff(attempt), retryAfter(resp.header, c.clock.Now()))
		c.log.Debug("retrying", "endpoint", u, "path", r.path, "status", resp.status, "wait", d)
		c.penalize(u, d, resp.status == http.StatusServiceUnavailable)
		return false, nil
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		// 504 unknown_outcome (and a 500 or a proxy's 502) may have been
		// applied: only a request that is safe to repeat is resent, with the
		// same lease id.
		if r.method != http.MethodGet {
			cl.tried.mayHaveApplied(sent)
		}
		if !r.idempotent {
			return true, unknownOutcome(cl.tried, apiErr)
		}
		d := max(c.backoff(attempt), retryAfter(resp.header, c.clock.Now()))
		c.log.Debug("outcome unknown, retrying", "endpoint", u, "path", r.path, "status", resp.status, "wait", d)
		c.penalize(u, d, true)
		return false, nil
	}
	return true, apiErr
}

// isObject reports whether body starts as a JSON object does (json.Unmarshal
// takes "null" into a struct without an error).
func isObject(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n")
	return len(body) > 0 && body[0] == '{'
}

// cutOff handles a 200 whose body did not arrive whole: the request may
// have been applied. It is sent again if that is safe, and otherwise the
// call ends with its outcome unknown.
func (cl *call) cutOff(u string, sent time.Time, attempt int) (done bool, err error) {
	c, r := cl.c, cl.r
	if r.method != http.MethodGet {
		cl.tried.mayHaveApplied(sent)
	}
	cl.last = fmt.Errorf("raftlock: %s %s: a 200 answer that was not whole", r.method, u+r.path)
	if !r.idempotent {
		return true, unknownOutcome(cl.tried, cl.last)
	}
	c.penalize(u, c.backoff(attempt), true)
	return false, nil
}

// send makes one attempt at u, alone or in a batch (coalesce.go).
func (c *Client) send(ctx context.Context, u string, r request, body []byte) (*response, error) {
	if c.coalesce && batchable(r) {
		return c.coalescerFor(u).send(ctx, r, body)
	}
	return c.sendOne(ctx, u, r, body)
}

// sendOne makes one attempt at u in an exchange of its own.
func (c *Client) sendOne(ctx context.Context, u string, r request, body []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout+r.serverWait)
	defer cancel()
	target := u + r.path
	if r.query != "" {
		target += "?" + r.query
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// lookupLeader asks the cluster for its nodes' addresses, once per unknown
// leader; failures are ignored, since followers forward writes anyway.
func (c *Client) lookupLeader(ctx context.Context) {
	u, _ := c.route(false)
	resp, err := c.send(ctx, u, request{method: http.MethodGet, path: "/v1/cluster"}, nil)
	if err != nil || resp.status != http.StatusOK {
		c.log.Debug("leader lookup failed", "endpoint", u, "error", err)
		return
	}
	c.observe(u, resp.header, resp.status)
	var cs ClusterStatus
	if err := json.Unmarshal(resp.body, &cs); err == nil {
		c.learnCluster(&cs)
	}
}

// sleep waits d on the client's clock, or until ctx ends.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := c.clock.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

// backoff returns the jittered wait before retry number attempt (from 0).
func (c *Client) backoff(attempt int) time.Duration {
	d := c.backoffMax
	if attempt < 30 {
		if e := c.backoffBase << attempt; e < d {
			d = e
		}
	}
	return d/2 + rand.N(d/2+1)
}

// notSent reports whether err shows that the request never reached a
// server (so retrying it can not apply it twice).
func notSent(err error) bool {
	var queued *errNotSent
	if errors.As(err, &queued) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// badCertificate reports whether err is a failure to verify the server's
// certificate: a configuration error (wrong CA, wrong host), not an outage.
func badCertificate(err error) bool {
	var verr *tls.CertificateVerificationError
	return errors.As(err, &verr)
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get(api.HeaderRetryAfter))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func (c *Client) parseError(resp *response, lock string) error {
	e := APIError{
		Status:     resp.status,
		RetryAfter: retryAfter(resp.header, c.clock.Now()),
		Node:       resp.header.Get(api.HeaderNode),
	}
	var eb errorBody
	if err := json.Unmarshal(resp.body, &eb); err == nil && eb.Error != "" {
		e.Code, e.Message = eb.Error, eb.Message
	} else {
		msg := strings.TrimSpace(string(resp.body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		e.Message = msg
	}
	switch e.Code {
	case CodeHeld:
		he := &HeldError{APIError: e, Name: lock}
		he.Owner, he.Token = eb.Holder.Owner, eb.Holder.FencingToken
		he.Holders = eb.holders()
		if he.Holders != nil {
			he.Total = max(eb.HoldersTotal, len(he.Holders)) // a server before holders_total listed them all
		}
		return he
	case CodeFull:
		hs := eb.holders()
		return &FullError{APIError: e, Name: lock, Holders: hs, Total: max(eb.HoldersTotal, len(hs))}
	case CodeLimitMismatch:
		return &LimitMismatchError{APIError: e, Name: lock, Limit: eb.Limit}
	}
	return &e
}

// errorBody is an error answer with what held, full and limit_mismatch add.
type errorBody struct {
	Error   string     `json:"error"`
	Message string     `json:"message"`
	Holder  api.Holder `json:"holder"`
	Holders []struct {
		Owner        string `json:"owner"`
		FencingToken uint64 `json:"fencing_token"`
		Slot         int    `json:"slot"`
	} `json:"holders"`
	HoldersTotal int   `json:"holders_total"`
	Limit        int64 `json:"limit"`
}

func (eb *errorBody) holders() []Holder {
	if eb.Holders == nil {
		return nil
	}
	hs := make([]Holder, len(eb.Holders))
	for i, h := range eb.Holders {
		hs[i] = Holder{Owner: h.Owner, Token: h.FencingToken, Slot: h.Slot, Remaining: -1}
	}
	return hs
}
