package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// Binary returns a raftlock binary built with tags (procs.Build: once per
// test process, RAFTLOCK_BIN for the build without tags). It is where every
// real-process test starts, so it is where they are skipped under -short:
// a process test cannot forget the skip. Under `go test -cover` the binary
// is a coverage build writing to the test's GOCOVERDIR, so the server code
// the processes run counts in the package's coverage.
func Binary(t testing.TB, tags ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs real raftlock processes; skipped with -short")
	}
	b := procs.Build{Tags: tags}
	if mode := testing.CoverMode(); mode != "" && os.Getenv("GOCOVERDIR") != "" {
		b.CoverMode = mode
	}
	bin, err := b.Binary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// StartServe runs `raftlock serve args...` as a real process (Binary with
// no tags), logging to logFile, with env added to its environment. The
// test's cleanup stops it with SIGTERM, then SIGKILL after 10 s, and shows
// its log when the test failed.
func StartServe(t testing.TB, id, logFile string, args []string, env ...string) *procs.Node {
	t.Helper()
	n := &procs.Node{ID: id, Bin: Binary(t), Args: append([]string{"serve"}, args...),
		Env: env, LogPath: logFile, StopTimeout: 10 * time.Second}
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

// StartProcs runs procs.Start with o.Bin defaulting to Binary(t) (pass
// Binary(t, tags...) for a fault or seeded build), data dirs and logs in a
// temporary dir unless o.Dir is set, and a 10 s StopTimeout unless set. The
// test's cleanup stops every node with SIGTERM; a failed test shows their
// logs.
func StartProcs(t testing.TB, o procs.Options) *procs.Cluster {
	t.Helper()
	if o.Bin == "" {
		o.Bin = Binary(t)
	} else if testing.Short() {
		t.Skip("runs real raftlock processes; skipped with -short")
	}
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
