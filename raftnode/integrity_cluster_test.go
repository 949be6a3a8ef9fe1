package raftnode_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

func applyLock(t *testing.T, leader *testenv.Node, name string) fsm.Result {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	r, err := leader.Apply(ctx, fsm.Command{Op: fsm.OpAcquire, Name: name, Owner: "w", LeaseID: "lease-" + name, TTL: 600000})
	if err != nil || r.Status != fsm.StatusOK {
		t.Fatalf("acquire %s: %v %v", name, r.Status, err)
	}
	return r
}

// One byte of a lock name changed in a stopped
// follower's log store (LOCKNAME0150 → LOCKNAMEX150). Restarted, the follower
// must stop at that entry, naming its index, instead of serving the changed
// name as held and the real one as free. The follower restarts in a child
// process (this test binary, TestCorruptLogChild), since the node stops by
// panicking on raft's FSM goroutine.
func TestFollowerWithDamagedLogStops(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	var token uint64
	for i := 0; i < 200; i++ {
		r := applyLock(t, leader, fmt.Sprintf("LOCKNAME%04d", i))
		if i == 150 {
			token = r.Lock.Token
		}
	}
	last := leader.Raft().LastIndex()
	c.WaitApplied(last)
	follower := c.Followers()[0]
	follower.Kill()

	// The log is in raft.db or in the WAL's segments, per the log store;
	// neither checks old records (bbolt has no page checksums, raft-wal
	// checks only its last batch): the damaged file opens as if intact.
	logFiles, _ := filepath.Glob(filepath.Join(follower.DataDir, "wal", "*.wal"))
	found := 0
	for _, path := range append(logFiles, filepath.Join(follower.DataDir, "raft.db")) {
		db, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := bytes.Count(db, []byte("LOCKNAME0150"))
		if n == 0 {
			continue
		}
		found += n
		db = bytes.ReplaceAll(db, []byte("LOCKNAME0150"), []byte("LOCKNAMEX150"))
		if err := os.WriteFile(path, db, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if found == 0 {
		t.Fatal("lock name not found in the log store")
	}

	ctx := testenv.Context(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCorruptLogChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		"RAFTLOCK_CHILD_ID="+follower.ID, "RAFTLOCK_CHILD_DIR="+follower.DataDir,
		"RAFTLOCK_CHILD_RAFT="+follower.RaftAddr, "RAFTLOCK_CHILD_HTTP="+follower.HTTPAddr,
		"RAFTLOCK_CHILD_LAST="+strconv.FormatUint(last, 10))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("child did not finish: %s", out)
	}
	want := fmt.Sprintf("committed entry %d is corrupt", token)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("restarted follower (exit %v) did not stop with %q; output:\n%s", err, want, tail(out, 4000))
	}
	if strings.Contains(string(out), "SERVED") {
		t.Fatalf("the follower served state from the damaged log:\n%s", tail(out, 4000))
	}
	t.Logf("%d copies of the name changed; the follower stopped: %s", found, want)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestCorruptLogChild is the restarted follower of
// TestFollowerWithDamagedLogStops; it does nothing when run on its own. If
// the node applies the whole log, it prints what it would serve and exits.
func TestCorruptLogChild(t *testing.T) {
	id := os.Getenv("RAFTLOCK_CHILD_ID")
	if id == "" {
		t.Skip("run by TestFollowerWithDamagedLogStops")
	}
	last, _ := strconv.ParseUint(os.Getenv("RAFTLOCK_CHILD_LAST"), 10, 64)
	n, err := raftnode.New(raftnode.Config{
		ID: id, DataDir: os.Getenv("RAFTLOCK_CHILD_DIR"), RaftAddr: os.Getenv("RAFTLOCK_CHILD_RAFT"),
		AdvertiseHTTP:    os.Getenv("RAFTLOCK_CHILD_HTTP"),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, TickInterval: 50 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Name: id, Output: os.Stderr, Level: hclog.Warn}),
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer n.Close()
	testenv.WaitFor(t, 30*time.Second, "the log to apply", func() bool { return n.AppliedThrough(last) })
	_, real := n.Machine().Get("LOCKNAME0150")
	_, changed := n.Machine().Get("LOCKNAMEX150")
	fmt.Printf("SERVED LOCKNAME0150 held=%v LOCKNAMEX150 held=%v\n", real, changed)
}

// A replica whose state was altered behind the log's back flags itself at
// the next state check; the others do not. It then serves no reads, and
// when made leader it writes nothing and hands leadership away.
func TestStateCheckFlagsTheAlteredReplica(t *testing.T) {
	c := testenv.Start(t, 3)
	leader := c.Leader()
	for i := 0; i < 20; i++ {
		applyLock(t, leader, "check/"+strconv.Itoa(i))
	}
	c.WaitApplied(leader.Raft().LastIndex())
	altered := c.Followers()[0]
	// The test-only damage: a table row no entry wrote, at the index and
	// term the replica is at, so its clock does not move.
	clk := altered.Machine().Clock()
	altered.Machine().ApplyCommand(clk.Index, clk.Term, fsm.Command{Op: fsm.OpSetNode, Stamp: clk.Stamp, NodeID: "ghost", NodeAddr: "nowhere"})

	ctx := testenv.Context(t, 30*time.Second)
	index, err := leader.CheckState(ctx)
	if err != nil {
		t.Fatalf("check state: %v", err)
	}
	testenv.WaitFor(t, 15*time.Second, "every node to compare its hash", func() bool {
		for _, n := range c.Nodes {
			if at, bad := n.Diverged(); !bad && n.StateCheckedAt() < index || bad && at != index {
				return false
			}
		}
		return true
	})
	for _, n := range c.Nodes {
		at, bad := n.Diverged()
		if bad != (n == altered) {
			t.Errorf("%s: diverged=%v at %d (altered: %s)", n.ID, bad, at, altered.ID)
		}
	}

	for _, n := range c.Nodes {
		want := "raftlock_state_diverged 0"
		if n == altered {
			want = "raftlock_state_diverged 1"
		}
		resp, err := http.Get(n.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s: /metrics lacks %q", n.ID, want)
		}
	}
	if _, err := altered.Read(ctx, true); !errors.Is(err, raftnode.ErrDiverged) {
		t.Errorf("stale read on the diverged node: %v, want ErrDiverged", err)
	}
	if _, err := leader.Read(ctx, false); err != nil {
		t.Errorf("read on the healthy leader: %v", err)
	}

	// Made leader, it writes nothing and hands leadership away.
	if err := leader.Raft().LeadershipTransferToServer(raft.ServerID(altered.ID), raft.ServerAddress(altered.RaftAddr)).Error(); err != nil {
		t.Fatalf("transfer to the diverged node: %v", err)
	}
	next := c.WaitForNewLeader(altered)
	if at, bad := next.Diverged(); bad {
		t.Fatalf("leadership went to %s, diverged at %d", next.ID, at)
	}
	if altered.Raft().AppliedIndex() > next.Raft().AppliedIndex() {
		t.Fatal("the diverged node wrote entries")
	}

}
