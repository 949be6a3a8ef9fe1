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

func acquireToken(t *testing.T, endpoint, name string) uint64 {
	t.Helper()
	r := runCLI(t, nil, "acquire", "--json", "--endpoints", endpoint, "--ttl", "10m", "--owner", "w", name)
	if r.code != exitOK {
		t.Fatalf("acquire %s: exit %d: %s", name, r.code, r.stderr)
	}
	var l leaseOut
	decode(t, r.stdout, &l)
	return l.FencingToken
}

// The backup cycle end to end through the CLI: save (through a follower's
// endpoint), inspect, refuse a damaged file, restore, and tokens keep growing.
func TestSnapshotSaveInspectRestore(t *testing.T) {
	c := clustertest.Start(t, 3)
	follower := c.Followers()[0].URL()
	var maxTok uint64
	for i := 0; i < 3; i++ {
		acquireToken(t, follower, fmt.Sprintf("kept/%d", i))
	}
	file := filepath.Join(t.TempDir(), "backup.snap")
	r := runCLI(t, nil, "snapshot", "save", "--endpoints", follower, file)
	if r.code != exitOK || !strings.Contains(r.stdout, "3 locks") || !strings.Contains(r.stdout, "checksum OK") {
		t.Fatalf("save: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file mode: %v %v, want 0600", fi.Mode(), err)
	}
	r = runCLI(t, nil, "snapshot", "inspect", "--json", file)
	var info struct {
		OK    bool
		Index uint64
		Locks int
	}
	if r.code != exitOK {
		t.Fatalf("inspect: exit %d %s", r.code, r.stderr)
	}
	decode(t, r.stdout, &info)
	if !info.OK || info.Locks != 3 || info.Index == 0 {
		t.Fatalf("inspect: %+v", info)
	}
	for i := 0; i < 3; i++ {
		maxTok = max(maxTok, acquireToken(t, follower, fmt.Sprintf("later/%d", i)))
	}

	data, _ := os.ReadFile(file)
	bad := filepath.Join(t.TempDir(), "bad.snap")
	os.WriteFile(bad, append([]byte{}, data[:len(data)-5]...), 0o600)
	if r := runCLI(t, nil, "snapshot", "inspect", bad); r.code != exitError || !strings.Contains(r.stderr, "NOT OK") {
		t.Fatalf("inspect of a truncated file: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "snapshot", "restore", "--endpoints", follower, bad); r.code != exitUsage || !strings.Contains(r.stderr, "nothing changed") {
		t.Fatalf("restore of a truncated file: exit %d %s", r.code, r.stderr)
	}
	// The server refuses it too (a client that skips the local check).
	req, _ := http.NewRequest(http.MethodPost, c.Leader().URL()+"/v1/snapshot", strings.NewReader(string(data[:len(data)-5])))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var eb struct{ Error, Message string }
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != 400 || eb.Error != "bad_request" {
		t.Fatalf("POST of a truncated file: %d %+v", resp.StatusCode, eb)
	}
	if r := runCLI(t, nil, "get", "--endpoints", follower, "later/2"); r.code != exitOK || !strings.Contains(r.stdout, "held by") {
		t.Fatalf("a refused restore changed the state: get later/2 exit %d %q", r.code, r.stdout)
	}

	if r := runCLI(t, nil, "snapshot", "restore", "--endpoints", follower, file); r.code != exitOK {
		t.Fatalf("restore: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "get", "--endpoints", follower, "kept/1"); r.code != exitOK || !strings.Contains(r.stdout, "held by") {
		t.Fatalf("restored lock kept/1: exit %d", r.code)
	}
	if r := runCLI(t, nil, "get", "--endpoints", follower, "later/2"); r.code != exitOK || !strings.Contains(r.stdout, "free") {
		t.Fatal("later/2, taken after the backup, survived the restore")
	}
	if tok := acquireToken(t, follower, "after"); tok <= maxTok {
		t.Fatalf("token after restore %d <= %d granted before it", tok, maxTok)
	}
}

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
	ports := clustertest.FreePorts(t, 6)
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
		nodes[i] = startServe(t, fmt.Sprintf("n%d", i+1), filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)), args(i))
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
	clustertest.WaitFor(t, 20*time.Second, "a leader", func() bool { return leaderOf(0) != "" && leaderOf(0) == leaderOf(1) })
	tokens := map[string]uint64{}
	var maxTok uint64
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("survives/%d", i)
		tokens[name] = acquireToken(t, endpoint(0), name)
		maxTok = max(maxTok, tokens[name])
	}
	// n1 survives: wait until it holds every lock, then lose the others for good.
	clustertest.WaitFor(t, 10*time.Second, "n1 applies the locks", func() bool {
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
	startServe(t, "n1", filepath.Join(dir, "n1-recovered.log"), args(0))
	clustertest.WaitFor(t, 20*time.Second, "n1 leads alone", func() bool { return leaderOf(0) == "n1" })
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

// Another cluster's backup, through the CLI: refused (400, nothing changed)
// without --allow-other-cluster, restored with it; inspect shows the id.
func TestSnapshotRestoreOtherClusterNeedsTheFlag(t *testing.T) {
	a := clustertest.Start(t, 1)
	b := clustertest.Start(t, 1)
	clustertest.WaitFor(t, 10*time.Second, "cluster ids", func() bool {
		return a.Leader().ClusterID() != "" && b.Leader().ClusterID() != ""
	})
	acquireToken(t, a.Leader().URL(), "a/lock")
	acquireToken(t, b.Leader().URL(), "b/lock")
	file := filepath.Join(t.TempDir(), "b.snap")
	if r := runCLI(t, nil, "snapshot", "save", "--endpoints", b.Leader().URL(), file); r.code != exitOK {
		t.Fatalf("save: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "snapshot", "inspect", file); r.code != exitOK || !strings.Contains(r.stdout, "cluster "+b.Leader().ClusterID()) {
		t.Fatalf("inspect: exit %d %q, want cluster %s", r.code, r.stdout, b.Leader().ClusterID())
	}
	r := runCLI(t, nil, "snapshot", "restore", "--endpoints", a.Leader().URL(), file)
	if r.code == exitOK || !strings.Contains(r.stderr, "allow_other_cluster") {
		t.Fatalf("restore of another cluster's backup: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "get", "--endpoints", a.Leader().URL(), "a/lock"); r.code != exitOK || !strings.Contains(r.stdout, "held by") {
		t.Fatalf("a refused restore changed the state: exit %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, nil, "snapshot", "restore", "--allow-other-cluster", "--endpoints", a.Leader().URL(), file); r.code != exitOK {
		t.Fatalf("restore with --allow-other-cluster: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, nil, "get", "--endpoints", a.Leader().URL(), "b/lock"); r.code != exitOK || !strings.Contains(r.stdout, "held by") {
		t.Fatalf("b/lock after the restore: exit %d %q", r.code, r.stdout)
	}
}
