package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// benchTarget is how bench talks to the cluster: the Go client's low-level
// calls, or raw HTTP to the leader. Each call makes exactly one logical
// request and returns the fencing token the answer carries.
type benchTarget interface {
	acquire(ctx context.Context, name, owner, leaseID string, ttl time.Duration) (uint64, error)
	renew(ctx context.Context, name, leaseID string, ttl time.Duration) (uint64, error)
	release(ctx context.Context, name, leaseID string) error
	describe() string
	close()
}

// Error kinds bench counts. Slips are counted apart: they are not errors of
// the cluster's availability but of its safety.
const (
	kindHeld        = api.CodeHeld // contended runs: someone else holds the lock
	kindNotHolder   = api.CodeNotHolder
	kindOverloaded  = api.CodeOverloaded
	kindNoLeader    = api.CodeNoLeader
	kindUnknown     = api.CodeUnknownOutcome // 504, or a client that gave up after a write may have gone out
	kindTimeout     = "timeout"
	kindConn        = "connection"
	kindOther       = "other"
	benchMaxBody    = 1 << 16
	benchRediscover = 100 * time.Millisecond
)

// errKind names the kind of an error of either target.
func errKind(err error) string {
	var apiErr *client.APIError
	var netErr net.Error
	switch {
	case errors.Is(err, client.ErrHeld):
		return kindHeld
	case errors.Is(err, client.ErrNotHolder):
		return kindNotHolder
	case errors.Is(err, client.ErrOverloaded):
		return kindOverloaded
	case errors.Is(err, client.ErrNoLeader):
		return kindNoLeader
	case errors.Is(err, client.ErrUnknownOutcome):
		return kindUnknown
	case errors.As(err, &apiErr):
		return kindOther
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return kindTimeout
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return kindConn
	}
	return kindOther
}

// clientTarget uses client.Client: TryAcquire with a client-chosen lease id
// (the lease is detached at once, so no watchdog renews it), Renew, Release.
type clientTarget struct{ c *client.Client }

func newClientTarget(endpoints []string, workers int, timeout time.Duration, coalesce bool) (*clientTarget, error) {
	// The client's own transport keeps 16 idle connections per host; more
	// workers than that would open and close connections on every call.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 2*workers+16, workers+16
	c, err := client.New(endpoints, client.WithRequestTimeout(timeout), client.WithCoalescing(coalesce), client.WithHTTPClient(&http.Client{Transport: t}))
	if err != nil {
		return nil, err
	}
	return &clientTarget{c: c}, nil
}

func (t *clientTarget) acquire(ctx context.Context, name, owner, id string, ttl time.Duration) (uint64, error) {
	l, err := t.c.TryAcquire(ctx, name, client.AcquireOptions{TTL: ttl, Owner: owner, LeaseID: id})
	if err != nil {
		return 0, err
	}
	l.Detach()
	return l.Token(), nil
}

func (t *clientTarget) renew(ctx context.Context, name, id string, ttl time.Duration) (uint64, error) {
	info, err := t.c.Renew(ctx, name, id, ttl)
	if err != nil {
		return 0, err
	}
	return info.Token, nil
}

func (t *clientTarget) release(ctx context.Context, name, id string) error {
	return t.c.Release(ctx, name, id)
}

func (t *clientTarget) describe() string { return "Go client" }
func (t *clientTarget) close()           { t.c.Close() }

// httpTarget posts the API's JSON over keep-alive connections straight to
// the leader, found through GET /v1/cluster and found again when an answer
// names another leader or the leader stops answering. It never retries:
// every failure is counted.
type httpTarget struct {
	hc        *http.Client
	endpoints []string

	mu       sync.Mutex
	leader   string // base URL requests go to
	leaderID string
	lookedAt time.Time
}

func newHTTPTarget(ctx context.Context, endpoints []string, workers int) (*httpTarget, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*workers+16, workers+16
	tr.DisableCompression = true
	t := &httpTarget{hc: &http.Client{Transport: tr}, endpoints: endpoints}
	if err := t.discover(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// discover asks the endpoints, in turn, who leads and where it serves.
func (t *httpTarget) discover(ctx context.Context) error {
	var last error
	for _, ep := range t.endpoints {
		var cs client.ClusterStatus
		if last = t.get(ctx, ep+"/v1/cluster", &cs); last != nil {
			continue
		}
		if addr, ok := leaderURL(ep, cs); ok {
			t.mu.Lock()
			t.leader, t.leaderID, t.lookedAt = addr, cs.Leader, time.Now()
			t.mu.Unlock()
			return nil
		}
		last = fmt.Errorf("%s knows no leader", ep)
	}
	return fmt.Errorf("no leader found: %w", last)
}

// leaderURL is the base URL of the leader that cs, ep's answer to GET
// /v1/cluster, names, in ep's scheme.
func leaderURL(ep string, cs client.ClusterStatus) (string, bool) {
	for _, n := range cs.Nodes {
		if n.ID == cs.Leader && cs.Leader != "" {
			addr := n.HTTPAddr
			if !strings.Contains(addr, "://") {
				scheme, _, _ := strings.Cut(ep, "://")
				addr = scheme + "://" + addr
			}
			return addr, true
		}
	}
	return "", false
}

func (t *httpTarget) get(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, benchMaxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

// rediscover looks the leader up again in the background, at most once per
// benchRediscover, so that a failover does not stall every worker.
func (t *httpTarget) rediscover(seenLeader string) {
	t.mu.Lock()
	if (seenLeader != "" && seenLeader == t.leaderID) || time.Since(t.lookedAt) < benchRediscover {
		t.mu.Unlock()
		return
	}
	t.lookedAt = time.Now()
	t.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = t.discover(ctx)
	}()
}

func (t *httpTarget) base() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leader
}

// post sends body and decodes the fencing token of a 200 answer.
func (t *httpTarget) post(ctx context.Context, path string, body []byte, name string) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base()+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.hc.Do(req)
	if err != nil {
		t.rediscover("")
		return 0, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, benchMaxBody))
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if l := resp.Header.Get(api.HeaderLeader); l != resp.Header.Get(api.HeaderNode) {
		t.rediscover(l)
	}
	var out struct { // a 200 lease, or an error (with the holder when held)
		Token   uint64      `json:"fencing_token"`
		Code    string      `json:"error"`
		Message string      `json:"message"`
		Holder  *api.Holder `json:"holder"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("%s: status %d, undecodable answer: %w", path, resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusOK {
		return out.Token, nil
	}
	apiErr := client.APIError{Status: resp.StatusCode, Code: out.Code, Message: out.Message}
	if out.Code == client.CodeHeld && out.Holder != nil {
		return 0, &client.HeldError{APIError: apiErr, Name: name, Owner: out.Holder.Owner, Token: out.Holder.FencingToken}
	}
	return 0, &apiErr
}

func (t *httpTarget) acquire(ctx context.Context, name, owner, id string, ttl time.Duration) (uint64, error) {
	b := make([]byte, 0, 128+len(name)+len(owner)+len(id))
	b = append(b, `{"name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, owner)
	b = append(b, `,"lease_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
	b = append(b, '}')
	return t.post(ctx, "/v1/locks/acquire", b, name)
}

func (t *httpTarget) renew(ctx context.Context, name, id string, ttl time.Duration) (uint64, error) {
	b := make([]byte, 0, 96+len(name)+len(id))
	b = append(b, `{"name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"lease_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
	b = append(b, '}')
	return t.post(ctx, "/v1/locks/renew", b, name)
}

func (t *httpTarget) release(ctx context.Context, name, id string) error {
	b := make([]byte, 0, 64+len(name)+len(id))
	b = append(b, `{"name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"lease_id":`...)
	b = appendJSONString(b, id)
	b = append(b, '}')
	_, err := t.post(ctx, "/v1/locks/release", b, name)
	return err
}

func (t *httpTarget) describe() string { return "HTTP to the leader " + t.base() }
func (t *httpTarget) close()           { t.hc.CloseIdleConnections() }

// appendJSONString appends s as a JSON string. strconv.AppendQuote would do
// for the ASCII names bench makes, but not for every owner a user may give.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
