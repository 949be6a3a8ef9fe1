package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/api"
)

// maxSnapshot bounds a downloaded backup file, as the server bounds uploads.
const maxSnapshot = 1 << 30

// snapshotTimeout bounds one save or restore attempt: files can be large.
const snapshotTimeout = 10 * time.Minute

// SaveSnapshot downloads a backup file of the cluster's state from the
// leader (GET /v1/snapshot, admin token) and returns its bytes. The bytes
// hold every lease id: keep them private.
func (c *Client) SaveSnapshot(ctx context.Context) ([]byte, error) {
	return c.snapshotCall(ctx, http.MethodGet, "", nil)
}

// RestoreSnapshot replaces the whole cluster's state with a backup file
// (POST /v1/snapshot, admin token). A file the leader refuses as damaged
// or foreign is an *APIError with Status 400, and nothing changed.
func (c *Client) RestoreSnapshot(ctx context.Context, file []byte) error {
	return c.RestoreSnapshotWith(ctx, file, RestoreOptions{})
}

// RestoreOptions changes what a restore accepts.
type RestoreOptions struct {
	// AllowOtherCluster restores a backup of another cluster, or one taken
	// before clusters had ids (?allow_other_cluster=true): without it the
	// leader refuses such a file with 400.
	AllowOtherCluster bool
}

// RestoreSnapshotWith is RestoreSnapshot with options.
func (c *Client) RestoreSnapshotWith(ctx context.Context, file []byte, opts RestoreOptions) error {
	query := ""
	if opts.AllowOtherCluster {
		query = "?allow_other_cluster=true"
	}
	_, err := c.snapshotCall(ctx, http.MethodPost, query, file)
	return err
}

// snapshotCall sends to the leader: followers do not forward snapshots, so
// a 503 sends the client to look the leader up and try again, a few times.
func (c *Client) snapshotCall(ctx context.Context, method, query string, body []byte) ([]byte, error) {
	var last error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 || c.needLeaderLookup() {
			c.lookupLeader(ctx)
		}
		u, wait := c.route(true)
		if wait > 0 {
			if err := c.sleep(ctx, wait); err != nil {
				return nil, err
			}
		}
		status, header, data, err := c.sendSnapshot(ctx, u+"/v1/snapshot"+query, method, body)
		if err != nil {
			last = fmt.Errorf("%s /v1/snapshot at %s: %w", method, u, err)
			c.penalize(u, c.backoff(attempt), true)
			if method == http.MethodPost && !notSent(err) {
				// A restore that went out may have been applied: say so
				// instead of sending it again.
				return nil, fmt.Errorf("%w (the restore may have been applied; check the cluster before retrying)", last)
			}
			continue
		}
		c.observe(u, header, status)
		if status == http.StatusOK {
			return data, nil
		}
		resp := &response{status: status, header: header, body: data}
		last = c.parseError(resp, "")
		if status != http.StatusServiceUnavailable {
			return nil, last
		}
		d := retryAfter(header, c.clock.Now())
		c.penalize(u, max(d, c.backoff(attempt)), true)
	}
	return nil, last
}

func (c *Client) sendSnapshot(ctx context.Context, u, method string, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	limit := int64(maxResponseBody)
	if resp.StatusCode == http.StatusOK && method == http.MethodGet {
		limit = maxSnapshot
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read answer: %w", err)
	}
	if int64(len(data)) > limit {
		return 0, nil, nil, fmt.Errorf("answer over %d bytes", limit)
	}
	if resp.StatusCode == http.StatusOK && method == http.MethodGet && resp.Header.Get("Content-Type") != "application/octet-stream" {
		return 0, nil, nil, fmt.Errorf("answer is %q, not a snapshot (node %s)", resp.Header.Get("Content-Type"), resp.Header.Get(api.HeaderNode))
	}
	return resp.StatusCode, resp.Header, data, nil
}
