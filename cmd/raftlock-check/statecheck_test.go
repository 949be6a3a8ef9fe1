package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// TestStateVerdict judges (g) on hand-made check results: a clean check
// passes, one diverged node fails naming it, a check that never ran is
// reported as not checked without failing the run.
func TestStateVerdict(t *testing.T) {
	clean := stateCheck{ran: true, index: 42, nodes: []nodeCheck{{id: "n1"}, {id: "n2"}, {id: "n3"}}}
	oneBad := stateCheck{ran: true, index: 42, nodes: []nodeCheck{{id: "n1"}, {id: "n2", diverged: true}, {id: "n3"}}}
	unreadable := stateCheck{ran: true, index: 42, nodes: []nodeCheck{{id: "n1"}, {id: "n2", err: "did not apply"}, {id: "n3"}}}
	notRun := stateCheck{why: "no leader at the end"}
	for _, tc := range []struct {
		name       string
		sc         stateCheck
		violations int
		notChecked bool
		noteHas    string
	}{
		{"clean", clean, 0, false, "index 42 on 3 nodes"},
		{"one diverged node", oneBad, 1, false, ""},
		{"a node that could not tell", unreadable, 0, false, "n2 not checked: did not apply"},
		{"check not run", notRun, 0, true, "not checked: no leader at the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := stateVerdict(tc.sc)
			if p.id != "g" || len(p.violations) != tc.violations || p.notChecked != tc.notChecked {
				t.Fatalf("got id %q, %d violations, notChecked %v; want g, %d, %v", p.id, len(p.violations), p.notChecked, tc.violations, tc.notChecked)
			}
			if !strings.Contains(p.note, tc.noteHas) {
				t.Errorf("note %q lacks %q", p.note, tc.noteHas)
			}
			for _, v := range p.violations {
				if v.Property != "g" || !strings.Contains(v.Detail, "n2") {
					t.Errorf("violation %+v does not name n2 under (g)", v)
				}
			}
			r := &runner{rep: report{props: []property{p}}}
			if want := tc.violations > 0; r.failed() != want {
				t.Errorf("run failed %v, want %v", r.failed(), want)
			}
		})
	}
}

func TestGaugeValue(t *testing.T) {
	text := []byte("# HELP raftlock_state_diverged 1 once ...\n# TYPE raftlock_state_diverged gauge\n" +
		"raftlock_state_diverged_total 7\nraftlock_state_diverged 1\nraftlock_applied_index 99\n")
	if v, ok := gaugeValue(text, "raftlock_state_diverged"); !ok || v != 1 {
		t.Fatalf("got %v %v, want 1 true", v, ok)
	}
	if _, ok := gaugeValue(text, "raftlock_missing"); ok {
		t.Fatal("found a gauge that is not there")
	}
}

// TestNodeStateCheck reads a node's verdict from fake nodes: one clean, one
// whose gauge says it diverged, one that answers state_diverged, and one
// that never applies the check's entry (not a divergence, a note).
func TestNodeStateCheck(t *testing.T) {
	fake := func(applied uint64, gauge string, divergedCode bool) *procs.Node {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if divergedCode {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"error":"state_diverged","message":"state differs"}`)
				return
			}
			switch req.URL.Path {
			case "/v1/cluster":
				fmt.Fprintf(w, `{"leader":"n1","applied_index":%d}`, applied)
			case "/metrics":
				io.WriteString(w, "# TYPE raftlock_state_diverged gauge\nraftlock_state_diverged "+gauge+"\n")
			default:
				http.NotFound(w, req)
			}
		}))
		t.Cleanup(srv.Close)
		return &procs.Node{ID: "nx", HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}
	}
	r := &runner{}
	hc := &http.Client{Timeout: time.Second}
	for _, tc := range []struct {
		name     string
		node     *procs.Node
		diverged bool
		err      bool
	}{
		{"clean", fake(11, "0", false), false, false},
		{"gauge set", fake(12, "1", false), true, false},
		{"state_diverged answer", fake(0, "", true), true, false},
		{"never applies", fake(10, "0", false), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			nc := r.nodeStateCheck(ctx, hc, tc.node, 11)
			if nc.diverged != tc.diverged || (nc.err != "") != tc.err {
				t.Fatalf("got %+v, want diverged %v, err %v", nc, tc.diverged, tc.err)
			}
		})
	}
}
