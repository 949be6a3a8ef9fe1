package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
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
	c := testenv.Start(t, 3)
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

// Another cluster's backup, through the CLI: refused (400, nothing changed)
// without --allow-other-cluster, restored with it; inspect shows the id.
func TestSnapshotRestoreOtherClusterNeedsTheFlag(t *testing.T) {
	a := testenv.Start(t, 1)
	b := testenv.Start(t, 1)
	testenv.WaitFor(t, 10*time.Second, "cluster ids", func() bool {
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
