package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// Recovery after losing a quorum, on real processes: of three nodes two are
// killed for good; the survivor is stopped, recovered as a
// cluster of itself, and started: its locks and tokens are there and new
// tokens are larger.
func TestRecoverAfterLosingQuorum(t *testing.T) {
	for _, store := range []string{"boltdb", "wal"} {
		t.Run(store, func(t *testing.T) { testRecover(t, store) })
	}
}

func testRecover(t *testing.T, logStore string) {
	dir := t.TempDir()
	ports := testenv.FreePorts(t, 6)
	raftAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[3+i]) }
	endpoint := func(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", ports[i]) }
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, raftAddr(i)))
	}
	args := func(i int) []string {
		return []string{"--id", fmt.Sprintf("n%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--raft-addr", raftAddr(i), "--peers", strings.Join(peers, ","),
			"--election-timeout", "500ms", "--heartbeat-timeout", "500ms", "--log-store", logStore}
	}
	nodes := make([]*procs.Node, 3)
	for i := range nodes {
		nodes[i] = testenv.StartServe(t, fmt.Sprintf("n%d", i+1), filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)), args(i))
	}
	leaderOf := func(i int) string {
		resp, err := http.Get(endpoint(i) + "/v1/cluster")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var cs struct{ Leader string }
		json.NewDecoder(resp.Body).Decode(&cs)
		return cs.Leader
	}
	testenv.WaitFor(t, 20*time.Second, "a leader", func() bool { return leaderOf(0) != "" && leaderOf(0) == leaderOf(1) })
	tokens := map[string]uint64{}
	var maxTok uint64
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("survives/%d", i)
		tokens[name] = acquireToken(t, endpoint(0), name)
		maxTok = max(maxTok, tokens[name])
	}
	// n1 survives: wait until it holds every lock, then lose the others for good.
	testenv.WaitFor(t, 10*time.Second, "n1 applies the locks", func() bool {
		r := runCLI(t, nil, "get", "--stale", "--endpoints", endpoint(0), "survives/3")
		return r.code == exitOK && strings.Contains(r.stdout, "held by")
	})
	for _, p := range nodes[1:] {
		p.Kill()
	}
	nodes[0].Signal(syscall.SIGTERM)
	select {
	case <-nodes[0].Done():
	case <-time.After(15 * time.Second):
		t.Fatal("n1 did not stop within 15 s of SIGTERM")
	}

	if r := runCLI(t, nil, "recover", "--data-dir", filepath.Join(dir, "n1"), "--peers", "n1="+raftAddr(0)); r.code != exitOK {
		t.Fatalf("recover: exit %d %s", r.code, r.stderr)
	}
	// recover found the log where it was (no --log-store given) and left it there.
	if _, err := os.Stat(filepath.Join(dir, "n1", "wal")); (err == nil) != (logStore == "wal") {
		t.Fatalf("after recover, %s/n1/wal: %v (log store %s)", dir, err, logStore)
	}
	testenv.StartServe(t, "n1", filepath.Join(dir, "n1-recovered.log"), args(0))
	testenv.WaitFor(t, 20*time.Second, "n1 leads alone", func() bool { return leaderOf(0) == "n1" })
	for name, tok := range tokens {
		r := runCLI(t, nil, "get", "--json", "--endpoints", endpoint(0), name)
		var l leaseOut
		if r.code != exitOK {
			t.Fatalf("get %s after recovery: exit %d", name, r.code)
		}
		decode(t, r.stdout, &l)
		if l.FencingToken != tok {
			t.Fatalf("%s: token %d after recovery, want %d", name, l.FencingToken, tok)
		}
	}
	if tok := acquireToken(t, endpoint(0), "after-recovery"); tok <= maxTok {
		t.Fatalf("token after recovery %d <= %d granted before", tok, maxTok)
	}
	// Recovering a running node fails cleanly (its raft.db is locked).
	if r := runCLI(t, nil, "recover", "--data-dir", filepath.Join(dir, "n1"), "--peers", "n1="+raftAddr(0)); r.code != exitError {
		t.Fatalf("recover of a running node: exit %d, want %d", r.code, exitError)
	}
}
