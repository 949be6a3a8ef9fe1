package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/clustertest"
)

// serveProc is one `raftlock serve` process started from the test binary.
type serveProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startServe runs `raftlock serve args...` as a real process (this test
// binary, see TestMain), logging to logFile. The test's cleanup stops it with
// SIGTERM, then SIGKILL after 10 s.
func startServe(t *testing.T, id, logFile string, args []string, env ...string) *serveProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "RAFTLOCK_TEST_AS_MAIN=1"), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() { cmd.Wait(); out.Close(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
		t.Logf("%s exited: %v", id, cmd.ProcessState)
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("%s log:\n%s", id, b)
		}
	})
	return p
}

// The command-line contract: SIGTERM to the leader hands leadership over,
// stops serving and exits 0; the cluster has a new leader at once (no
// election timeout to wait out) and keeps its locks.
func TestServeSIGTERMHandsOverAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	ports := clustertest.FreePorts(t, 6)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[3+i]))
	}
	procs := map[string]*serveProc{}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("n%d", i+1)
		procs[id] = startServe(t, id, filepath.Join(dir, id+".log"), []string{"--id", id,
			"--data-dir", filepath.Join(dir, id), "--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[3+i]), "--peers", strings.Join(peers, ",")})
	}
	endpoint := func(id string) string { return fmt.Sprintf("http://127.0.0.1:%d", ports[id[1]-'1']) }
	leaderOf := func(id string) string {
		resp, err := http.Get(endpoint(id) + "/v1/cluster")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		var c struct{ Leader string }
		json.NewDecoder(resp.Body).Decode(&c)
		return c.Leader
	}
	clustertest.WaitFor(t, 20*time.Second, "a leader", func() bool { return leaderOf("n1") != "" && leaderOf("n1") == leaderOf("n2") })
	leader := leaderOf("n1")
	if r := runCLI(t, nil, "acquire", "--endpoints", endpoint(leader), "--ttl", "60s", "sigterm/lock"); r.code != exitOK {
		t.Fatalf("acquire: exit %d", r.code)
	}

	procs[leader].cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-procs[leader].done:
	case <-time.After(15 * time.Second):
		t.Fatal("the leader did not exit within 15 s of SIGTERM")
	}
	if got := procs[leader].cmd.ProcessState.ExitCode(); got != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", got)
	}
	if b, _ := os.ReadFile(procs[leader].log); !strings.Contains(string(b), "handed leadership over") {
		t.Fatalf("the leader did not hand leadership over:\n%s", b)
	}
	var survivor string
	for id := range procs {
		if id != leader {
			survivor = id
		}
	}
	clustertest.WaitFor(t, 10*time.Second, "a new leader", func() bool { l := leaderOf(survivor); return l != "" && l != leader })
	if r := runCLI(t, nil, "get", "--endpoints", endpoint(survivor), "sigterm/lock"); r.code != exitOK || !strings.Contains(r.stdout, "sigterm/lock") {
		t.Fatalf("get after the hand-over: exit %d", r.code)
	}
}
