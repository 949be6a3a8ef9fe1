package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Some of the lock cycle's calls go in a POST /v1/batch with a companion:
// a release, by a lease never granted, of one of the workload's locks,
// sent in the same batch in either order. The companion changes nothing
// (not_holder) but makes the batch's calls run at once on the node, as a
// client's coalesced calls do. Both calls are journalled as calls of their
// own, sent when the batch is and returned when its answer is in, so the
// checker judges each by the same properties as a call sent alone.

// batchable reports whether the call may go in a batch: the API batches
// acquires without a wait, renews and releases of locks.
func (c *Client) batchable(e history.Entry, path string) bool {
	switch path {
	case "/v1/locks/acquire":
		return e.WaitMs == 0
	case "/v1/locks/renew", "/v1/locks/release":
		return true
	}
	return false
}

// postBatch sends the call e (path, body) and a companion release in one
// batch to node, journalling both.
func (c *Client) postBatch(hc *http.Client, node string, e history.Entry, path string, body any) history.Entry {
	name := c.cfg.Locks[c.bat.Intn(len(c.cfg.Locks))]
	lease := fmt.Sprintf("c%02d-never-%08x", c.cfg.ID, c.bat.Uint32())
	comp := history.Entry{Op: history.Release, Name: name, Lease: lease}
	compBody := map[string]any{"name": name, "lease_id": lease}

	entries := []history.Entry{e, comp}
	paths := []string{path, "/v1/locks/release"}
	bodies := []any{body, compBody}
	mineAt := 0
	if c.bat.Intn(2) == 0 { // the companion first
		mineAt = 1
		entries[0], entries[1] = entries[1], entries[0]
		paths[0], paths[1] = paths[1], paths[0]
		bodies[0], bodies[1] = bodies[1], bodies[0]
	}
	var req api.BatchRequest
	now := history.Now()
	for i := range entries {
		entries[i].Kind, entries[i].ID, entries[i].Client, entries[i].Node = "call", c.nextID(), c.cfg.ID, node
		entries[i].Time, entries[i].Batched = now, true
		c.cfg.Journal.Write(entries[i])
		b, _ := json.Marshal(bodies[i])
		req.Calls = append(req.Calls, api.BatchCall{Path: paths[i], Body: b})
	}
	b, _ := json.Marshal(req)
	resp, err := hc.Post(node+"/v1/batch", "application/json", bytes.NewReader(b))
	answers := splitAnswer(resp, err, len(entries))
	var mine history.Entry
	for i := range entries {
		r := c.classify(answers[i].resp, answers[i].err)
		r.ID, r.Client, r.Node = entries[i].ID, entries[i].Client, node
		c.cfg.Journal.Write(r)
		if i == mineAt {
			mine = r
		}
	}
	return mine
}

type answer struct {
	resp *http.Response
	err  error
}

// splitAnswer gives each of n calls its answer: its own result in a 200,
// or the batch's failure or refusal, which is every call's.
func splitAnswer(resp *http.Response, err error, n int) []answer {
	out := make([]answer, n)
	if err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	raw, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		for i := range out {
			out[i].err = fmt.Errorf("reading the batch's answer: %w", rerr)
		}
		return out
	}
	like := func(status int, h http.Header, body []byte) *http.Response {
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
	}
	if resp.StatusCode != http.StatusOK {
		for i := range out {
			out[i].resp = like(resp.StatusCode, resp.Header, raw)
		}
		return out
	}
	var ans api.BatchAnswer
	if jerr := json.Unmarshal(raw, &ans); jerr != nil || len(ans.Results) != n {
		// The calls ran, but what they did is not in the answer.
		for i := range out {
			out[i].err = errors.Join(errors.New("a batch's 200 without a result for each call"), jerr)
		}
		return out
	}
	for i, res := range ans.Results {
		h := resp.Header.Clone()
		for k, v := range res.Headers {
			h.Set(k, v)
		}
		out[i].resp = like(res.Status, h, res.Body)
	}
	return out
}
