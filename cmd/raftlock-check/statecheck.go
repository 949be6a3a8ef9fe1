package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/model"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// stateCheck is what property (g) saw: the leader's state check at the end
// of the run and each node's verdict on it.
type stateCheck struct {
	ran   bool   // the leader wrote a check
	why   string // why it did not run
	index uint64 // the check's index
	nodes []nodeCheck
}

// nodeCheck is one node's answer after the check.
type nodeCheck struct {
	id       string
	diverged bool   // raftlock_state_diverged 1, or a state_diverged answer
	err      string // could not tell (did not apply the check, metrics unread)
}

// stateVerdict turns what the check saw into property (g). A check that
// could not run is reported as not checked, which does not fail the run:
// only a node that says it diverged does.
func stateVerdict(sc stateCheck) property {
	p := property{id: "g", name: "replicas hold the same state"}
	if !sc.ran {
		p.notChecked = true
		p.note = "not checked: " + sc.why
		return p
	}
	var notes []string
	for _, n := range sc.nodes {
		switch {
		case n.diverged:
			p.violations = append(p.violations, model.Violation{Property: "g",
				Detail: fmt.Sprintf("node %s: state differs from the leader's at the check at index %d", n.id, sc.index)})
		case n.err != "":
			notes = append(notes, fmt.Sprintf("%s not checked: %s", n.id, n.err))
		}
	}
	p.note = fmt.Sprintf("check at index %d on %d nodes", sc.index, len(sc.nodes))
	if len(notes) > 0 {
		p.note += "; " + strings.Join(notes, "; ")
	}
	return p
}

// errDiverged is the error code of a node that flagged itself.
const errDiverged = "state_diverged"

// runStateCheck asks the leader for a state check, then waits until each
// node has applied the entry carrying the leader's hash (index+1) and reads
// its raftlock_state_diverged gauge.
func (r *runner) runStateCheck(ctx context.Context) stateCheck {
	hc := &http.Client{Timeout: 3 * time.Second}
	var sc stateCheck
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := r.c.WaitLeader(lctx)
	if err != nil {
		sc.why = fmt.Sprintf("no leader at the end: %v", err)
		return sc
	}
	// 503 (a new leader settling in, not_leader) is retried for a few seconds.
	deadline := time.Now().Add(8 * time.Second)
	for {
		status, code, body, err := postJSON(lctx, hc, leader.URL()+"/v1/cluster/check-state", []byte("{}"))
		if err == nil && status == http.StatusOK {
			var ans struct {
				Index uint64 `json:"index"`
			}
			if err := json.Unmarshal(body, &ans); err != nil || ans.Index == 0 {
				sc.why = fmt.Sprintf("check-state on %s: bad answer %q", leader.ID, body)
				return sc
			}
			sc.ran, sc.index = true, ans.Index
			break
		}
		if code == errDiverged {
			// The leader itself flagged a divergence (from a check of its own).
			sc.ran = true
			sc.nodes = append(sc.nodes, nodeCheck{id: leader.ID, diverged: true})
			break
		}
		if err == nil && status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			sc.why = fmt.Sprintf("check-state on %s: status %d %s %v", leader.ID, status, code, err)
			return sc
		}
		select {
		case <-lctx.Done():
			sc.why = fmt.Sprintf("check-state on %s: %v", leader.ID, lctx.Err())
			return sc
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, n := range r.c.Nodes {
		if len(sc.nodes) > 0 && sc.nodes[0].id == n.ID {
			continue
		}
		sc.nodes = append(sc.nodes, r.nodeStateCheck(ctx, hc, n, sc.index+1))
	}
	return sc
}

// nodeStateCheck polls (10 s at most) until n has applied target, then
// reads its divergence gauge.
func (r *runner) nodeStateCheck(ctx context.Context, hc *http.Client, n *procs.Node, target uint64) nodeCheck {
	nc := nodeCheck{id: n.ID}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		status, code, body, err := get(ctx, hc, n.URL()+"/v1/cluster")
		if code == errDiverged {
			nc.diverged = true
			return nc
		}
		var i procs.Info
		if err == nil && status == http.StatusOK && json.Unmarshal(body, &i) == nil && i.AppliedIndex >= target {
			break
		}
		select {
		case <-ctx.Done():
			nc.err = fmt.Sprintf("did not apply the check's index %d (last: status %d, applied %d, %v)", target, status, i.AppliedIndex, err)
			return nc
		case <-time.After(50 * time.Millisecond):
		}
	}
	_, _, body, err := get(ctx, hc, n.URL()+"/metrics")
	if err != nil {
		nc.err = fmt.Sprintf("reading /metrics: %v", err)
		return nc
	}
	v, ok := gaugeValue(body, "raftlock_state_diverged")
	if !ok {
		nc.err = "no raftlock_state_diverged in /metrics"
		return nc
	}
	nc.diverged = v != 0
	return nc
}

// gaugeValue finds an unlabelled sample in Prometheus text format.
func gaugeValue(text []byte, name string) (float64, bool) {
	s := bufio.NewScanner(bytes.NewReader(text))
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) >= 2 && f[0] == name {
			var v float64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

func postJSON(ctx context.Context, hc *http.Client, url string, body []byte) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(hc, req)
}

func get(ctx context.Context, hc *http.Client, url string) (int, string, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", nil, err
	}
	return do(hc, req)
}

// do returns the status, the error code of a non-200 JSON answer, and the body.
func do(hc *http.Client, req *http.Request) (int, string, []byte, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, "", nil, err
	}
	var code string
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			code = e.Error
		}
	}
	return resp.StatusCode, code, b, nil
}
