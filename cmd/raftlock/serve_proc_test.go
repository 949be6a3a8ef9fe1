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

	"github.com/raftlock/raftlock/internal/clustertest"
	"github.com/raftlock/raftlock/internal/clustertest/procs"
)

// startServe runs `raftlock serve args...` as a real process (this test
// binary, see TestMain), logging to logFile, with env added to its
// environment. The test's cleanup stops it with SIGTERM, then SIGKILL
// after 10 s.
func startServe(t *testing.T, id, logFile string, args []string, env ...string) *procs.Node {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := &procs.Node{ID: id, Bin: self, Args: append([]string{"serve"}, args...),
		Env: append([]string{"RAFTLOCK_TEST_AS_MAIN=1"}, env...), LogPath: logFile, StopTimeout: 10 * time.Second}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Terminate()
		t.Logf("%s exited: code %d", id, n.ExitCode())
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("%s log:\n%s", id, b)
		}
	})
	return n
}

// startCluster runs procs.Start with this test binary as raftlock (see
// TestMain) and its data dirs and logs in a temporary dir unless o.Dir is
// set. The test's cleanup stops every node with SIGTERM; a failed test
// shows their logs.
func startCluster(t *testing.T, o procs.Options) *procs.Cluster {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.Bin, o.Env = self, append([]string{"RAFTLOCK_TEST_AS_MAIN=1"}, o.Env...)
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 10 * time.Second
	}
	logs := func() {
		for i := range max(o.Size, 3) {
			id := fmt.Sprintf("n%d", i+1)
			b, _ := os.ReadFile(filepath.Join(o.Dir, id+".log"))
			t.Logf("%s log:\n%s", id, b)
		}
	}
	c, err := procs.Start(o)
	if err != nil {
		logs()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Terminate()
		for _, n := range c.Nodes {
			t.Logf("%s exited: code %d", n.ID, n.ExitCode())
		}
		if t.Failed() {
			logs()
		}
	})
	return c
}

// The command-line contract: SIGTERM to the leader hands leadership over,
// stops serving and exits 0; the cluster has a new leader at once (no
// election timeout to wait out) and keeps its locks.
func TestServeSIGTERMHandsOverAndExitsZero(t *testing.T) {
	c := startCluster(t, procs.Options{})
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
	clustertest.WaitFor(t, 20*time.Second, "a leader", func() bool { return leaderOf("n1") != "" && leaderOf("n1") == leaderOf("n2") })
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
	clustertest.WaitFor(t, 10*time.Second, "a new leader", func() bool { l := leaderOf(survivor); return l != "" && l != leader })
	if r := runCLI(t, nil, "get", "--endpoints", endpoint(survivor), "sigterm/lock"); r.code != exitOK || !strings.Contains(r.stdout, "sigterm/lock") {
		t.Fatalf("get after the hand-over: exit %d", r.code)
	}
}
