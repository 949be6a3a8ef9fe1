package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// The command-line contract: SIGTERM to the leader hands leadership over,
// stops serving and exits 0; the cluster has a new leader at once (no
// election timeout to wait out) and keeps its locks.
func TestServeSIGTERMHandsOverAndExitsZero(t *testing.T) {
	c := testenv.StartProcs(t, procs.Options{})
	endpoint := func(id string) string { return c.Node(id).URL() }
	leaderOf := func(id string) string {
		resp, err := http.Get(endpoint(id) + "/v1/cluster")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var cs struct{ Leader string }
		json.NewDecoder(resp.Body).Decode(&cs)
		return cs.Leader
	}
	testenv.WaitFor(t, 20*time.Second, "a leader", func() bool { return leaderOf("n1") != "" && leaderOf("n1") == leaderOf("n2") })
	leader := leaderOf("n1")
	if r := runCLI(t, nil, "acquire", "--endpoints", endpoint(leader), "--ttl", "60s", "sigterm/lock"); r.code != exitOK {
		t.Fatalf("acquire: exit %d", r.code)
	}

	c.Node(leader).Signal(syscall.SIGTERM)
	select {
	case <-c.Node(leader).Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the leader did not exit within 15 s of SIGTERM")
	}
	if got := c.Node(leader).ExitCode(); got != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", got)
	}
	if b, _ := os.ReadFile(c.Node(leader).LogPath); !strings.Contains(string(b), "handed leadership over") {
		t.Fatalf("the leader did not hand leadership over:\n%s", b)
	}
	var survivor string
	for _, n := range c.Nodes {
		if n.ID != leader {
			survivor = n.ID
		}
	}
	testenv.WaitFor(t, 10*time.Second, "a new leader", func() bool { l := leaderOf(survivor); return l != "" && l != leader })
	if r := runCLI(t, nil, "get", "--endpoints", endpoint(survivor), "sigterm/lock"); r.code != exitOK || !strings.Contains(r.stdout, "sigterm/lock") {
		t.Fatalf("get after the hand-over: exit %d", r.code)
	}
}
