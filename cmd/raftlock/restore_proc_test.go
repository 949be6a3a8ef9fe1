package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
	"github.com/raftlock/raftlock/raftnode"
)

// nearEndBackup is a backup whose index (and its clock's) is 2^64-5, no
// locks: a checksum-correct file anyone can write.
func nearEndBackup(t *testing.T) []byte {
	t.Helper()
	m := fsm.New()
	m.ApplyCommand(1<<64-5, 1, fsm.Command{Op: fsm.OpTick})
	var snap, file bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	if _, err := raftnode.WriteBackup(&file, 1<<64-5, 1, snap.Bytes()); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

func postBackup(t *testing.T, url string, file []byte) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute} // a wedged leader never answered
	resp, err := hc.Post(url+"/v1/snapshot?allow_other_cluster=true", "application/octet-stream", bytes.NewReader(file))
	if err != nil {
		t.Fatalf("POST /v1/snapshot: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A backup at an index near 2^64 used to be installed (200) and then make
// raft panic "log not found" at every start: the data dir was lost. It is
// refused with 400, and the node goes on taking writes, stops on SIGTERM
// and starts again.
func TestServeRefusesBackupNearTheEndOfTheIndexRange(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	s := newSingleNode(t)
	p := s.start(t)
	s.waitWritable(t, http.DefaultClient)
	code, body := postBackup(t, s.endpoint, nearEndBackup(t))
	if code != 400 || !strings.Contains(body, "bad_request") || !strings.Contains(body, "highest index") {
		t.Fatalf("restore of a backup at 2^64-5: %d %s, want 400 naming the index", code, body)
	}
	s.waitWritable(t, http.DefaultClient)
	s.stop(t, p)
	s.start(t)
	s.waitWritable(t, http.DefaultClient)
}

// On a three-node cluster the same file left the POST unanswered, every node
// not ready and the leader deaf to SIGTERM. Now: 400, every node still
// ready, and the leader stops on SIGTERM within its stop timeout, handing
// leadership over.
func TestServeClusterRefusesBackupNearTheEndAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := testenv.StartProcs(t, procs.Options{})
	ctx := testenv.Context(t, time.Minute)
	leader, err := c.WaitReady(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, body := postBackup(t, leader.URL(), nearEndBackup(t))
	if code != 400 || !strings.Contains(body, "highest index") {
		t.Fatalf("restore of a backup at 2^64-5: %d %s, want 400 naming the index", code, body)
	}
	for _, n := range c.Nodes {
		testenv.WaitFor(t, 10*time.Second, n.ID+" ready", func() bool {
			resp, err := http.Get(n.URL() + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
	}
	start := time.Now()
	leader.Signal(syscall.SIGTERM)
	select {
	case <-leader.Done():
	case <-time.After(25 * time.Second): // the default --stop-timeout, and some
		t.Fatal("the leader did not exit within its stop timeout of SIGTERM")
	}
	if got := leader.ExitCode(); got != 0 {
		t.Fatalf("exit %d after SIGTERM (%s), want 0", got, time.Since(start))
	}
	for _, n := range c.Nodes {
		if n == leader {
			continue
		}
		testenv.WaitFor(t, 20*time.Second, n.ID+" follows a new leader", func() bool {
			var st struct{ Leader string }
			return c.Get(ctx, n, "/v1/cluster", &st) == nil && st.Leader != "" && st.Leader != leader.ID
		})
	}
}
