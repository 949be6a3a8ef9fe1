package main

import (
	"bytes"
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

// singleNode is a one-node cluster of a real `raftlock serve` process whose
// data dir outlives it.
type singleNode struct {
	dir, data string
	args      []string
	endpoint  string
	runs      int
}

func newSingleNode(t *testing.T) *singleNode {
	dir := t.TempDir()
	ports := testenv.FreePorts(t, 2)
	raft := fmt.Sprintf("127.0.0.1:%d", ports[1])
	s := &singleNode{dir: dir, data: filepath.Join(dir, "data"), endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	s.args = []string{"--id", "n1", "--data-dir", s.data, "--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--raft-addr", raft, "--peers", "n1=" + raft, "--election-timeout", "500ms", "--heartbeat-timeout", "500ms",
		"--snapshot-threshold", "2", "--snapshot-interval", "50ms", "--trailing-logs", "1"}
	return s
}

// start runs the node; it is stopped with SIGTERM when the test ends.
func (s *singleNode) start(t *testing.T, extra ...string) *procs.Node {
	s.runs++
	return testenv.StartServe(t, "n1", filepath.Join(s.dir, fmt.Sprintf("run%d.log", s.runs)), append(append([]string{}, s.args...), extra...))
}

// stop sends SIGTERM and waits for a clean exit.
func (s *singleNode) stop(t *testing.T, p *procs.Node) {
	t.Helper()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the node did not exit within 15 s of SIGTERM")
	}
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// refused starts the node and expects it to exit 1 at once with a message
// matching every one of want.
func (s *singleNode) refused(t *testing.T, want ...string) {
	t.Helper()
	p := s.start(t)
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the node started instead of refusing")
	}
	b, _ := os.ReadFile(p.LogPath)
	if code := p.ExitCode(); code != exitError {
		t.Fatalf("exit %d, want %d (refusal, not a crash or a usage error); output:\n%s", code, exitError, b)
	}
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Errorf("output lacks %q:\n%s", w, b)
		}
	}
	if strings.Contains(string(b), "SIGBUS") || strings.Contains(string(b), "goroutine ") {
		t.Errorf("a crash, not a refusal:\n%s", b)
	}
}

// seed starts the node, takes a few locks until a snapshot exists, stops it.
func (s *singleNode) seed(t *testing.T) {
	t.Helper()
	p := s.start(t)
	eps := env{"RAFTLOCK_ENDPOINTS=" + s.endpoint}
	eventually(t, eps, "the node to be ready", func(r result) bool { return r.code == exitOK }, "health")
	var last uint64
	for i := 0; i < 5; i++ {
		r := runCLI(t, eps, "acquire", "--json", "--ttl", "600s", fmt.Sprintf("seed/%d", i))
		var out struct {
			FencingToken uint64 `json:"fencing_token"`
		}
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("acquire: exit %d, %s", r.code, r.stdout)
		}
		last = out.FencingToken
	}
	// A snapshot that holds every seeded lock: with the boltdb log store the
	// log lives in raft.db, which some tests delete, so only the snapshot
	// may carry the locks across.
	// Raft snapshots only after --snapshot-threshold new entries, and the
	// node writes nothing more on its own for a long while: each poll
	// that finds no such snapshot yet writes two entries (an acquire and
	// a release of a lock that stays free), so one is always coming.
	pad := 0
	testenv.WaitFor(t, 45*time.Second, "a snapshot of every seeded lock", func() bool {
		m, _ := filepath.Glob(filepath.Join(s.data, "snapshots", "*", "meta.json"))
		for _, meta := range m {
			b, _ := os.ReadFile(meta)
			var sm struct{ Index uint64 }
			if json.Unmarshal(b, &sm) == nil && sm.Index >= last {
				return true
			}
		}
		pad++
		id := fmt.Sprintf("seed-padding-lease-%04d", pad)
		runCLI(t, eps, "acquire", "--lease-id", id, "--ttl", "10s", "padding")
		runCLI(t, eps, "release", "--lease-id", id, "padding")
		return false
	})
	s.stop(t, p)
}

// With raft.db gone (term and vote with it) and snapshots
// left, a node used to start from the snapshot without a word, free to vote
// again in a term it had voted in. It now refuses, says why and names the
// flag; with the flag it starts.
func TestServeRefusesLostVoteRecord(t *testing.T) {
	s := newSingleNode(t)
	s.seed(t)
	if err := os.Remove(filepath.Join(s.data, "raft.db")); err != nil {
		t.Fatal(err)
	}
	s.refused(t, "no vote record", "vote twice in one term", "--allow-lost-vote-record")
	// Refusing left it refusing (the empty raft.db it found is no record).
	s.refused(t, "no vote record")
	p := s.start(t, "--allow-lost-vote-record")
	eventually(t, env{"RAFTLOCK_ENDPOINTS=" + s.endpoint}, "the node to serve with the flag", func(r result) bool { return r.code == exitOK }, "health")
	if r := runCLI(t, env{"RAFTLOCK_ENDPOINTS=" + s.endpoint}, "get", "seed/4"); r.code != exitOK || !strings.Contains(r.stdout, "held by") {
		t.Fatalf("the snapshot's locks after the recovery start: exit %d %q", r.code, r.stdout)
	}
	s.stop(t, p)
	if b, _ := os.ReadFile(p.LogPath); !strings.Contains(string(b), "starting without a vote record") {
		t.Errorf("no warning in the log:\n%s", b)
	}
}

// A truncated raft.db ended in `fatal error: SIGBUS`, exit
// 2 (the CLI's code for usage errors). Now: exit 1 and what is wrong.
func TestServeRefusesTruncatedRaftDB(t *testing.T) {
	s := newSingleNode(t)
	s.seed(t)
	db := filepath.Join(s.data, "raft.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{fi.Size() / 2, 100} {
		t.Run(fmt.Sprintf("%d of %d bytes", size, fi.Size()), func(t *testing.T) {
			if err := os.Truncate(db, size); err != nil {
				t.Fatal(err)
			}
			s.refused(t, "raft.db is damaged", "Restore it from a backup")
		})
	}
}

// Snapshot files hold every lease id: the data dir is private whatever the
// umask, and even when the operator made it beforehand with a looser mode.
func TestServeDataDirIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022) // the common default; the child inherits it
	defer syscall.Umask(old)
	s := newSingleNode(t)
	if err := os.Mkdir(s.data, 0o755); err != nil {
		t.Fatal(err)
	}
	s.seed(t)
	n := 0
	filepath.Walk(s.data, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		n++
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		return nil
	})
	if n < 5 {
		t.Fatalf("only %d entries in the data dir", n)
	}
}

// The WAL is the default log store. A data dir written by a node on
// --log-store boltdb, started by this binary with
// no --log-store, has its log moved into DATA/wal on start and keeps every
// lock with its fencing token; started with --log-store boltdb again, the
// log moves back, still whole. No snapshot is taken (the threshold is out of
// reach), so the locks can only come across in the moved log.
func TestServeUpgradeFromBoltDBDefaultMovesLogToWAL(t *testing.T) {
	s := newSingleNode(t)
	noSnap := []string{"--snapshot-threshold", "1000000", "--snapshot-interval", "1h"} // later flags win
	eps := env{"RAFTLOCK_ENDPOINTS=" + s.endpoint}
	ready := func() {
		t.Helper()
		eventually(t, eps, "the node to be ready", func(r result) bool { return r.code == exitOK }, "health")
	}
	walMeta := filepath.Join(s.data, "wal", "wal-meta.db")
	hasWAL := func() bool {
		_, err := os.Stat(walMeta)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	tokens := map[string]uint64{}
	var maxTok uint64
	held := func(run string) {
		t.Helper()
		for name, tok := range tokens {
			r := runCLI(t, eps, "get", "--json", name)
			var l lockJSON
			if r.code != exitOK {
				t.Fatalf("%s: get %s: exit %d %s", run, name, r.code, r.stderr)
			}
			decode(t, r.stdout, &l)
			if !l.Held || l.Owner != "w" || l.FencingToken != tok {
				t.Fatalf("%s: %s is %+v, want held by w with token %d", run, name, l, tok)
			}
		}
		// Tokens go on rising from where they were.
		tok := acquireToken(t, s.endpoint, "after/"+run)
		if tok <= maxTok {
			t.Fatalf("%s: new token %d <= %d granted before", run, tok, maxTok)
		}
		tokens["after/"+run], maxTok = tok, tok
	}

	// The old default, named as a user of it would have run it.
	p := s.start(t, append(noSnap, "--log-store", "boltdb")...)
	ready()
	for i := range 20 {
		name := fmt.Sprintf("upgrade/%02d", i)
		tok := acquireToken(t, s.endpoint, name)
		tokens[name], maxTok = tok, max(maxTok, tok)
	}
	s.stop(t, p)
	if hasWAL() {
		t.Fatal("a boltdb node made DATA/wal")
	}
	if m, _ := filepath.Glob(filepath.Join(s.data, "snapshots", "*", "meta.json")); len(m) != 0 {
		t.Fatalf("snapshots %v: the locks must be in the log alone for this test to prove the move", m)
	}

	// The new binary, no --log-store: the default moves the log to the WAL.
	p = s.start(t, noSnap...)
	ready()
	held("wal-default")
	s.stop(t, p)
	if !hasWAL() {
		t.Fatal("started on the default, the node has no DATA/wal")
	}
	if b, _ := os.ReadFile(p.LogPath); !strings.Contains(string(b), "moved raft log from raft.db to the wal") {
		t.Fatalf("no move logged:\n%s", b)
	}

	// And back: --log-store boltdb on a WAL data dir.
	p = s.start(t, append(noSnap, "--log-store", "boltdb")...)
	ready()
	held("back-to-boltdb")
	s.stop(t, p)
	if hasWAL() {
		t.Fatal("back on boltdb, DATA/wal is still there")
	}
	if b, _ := os.ReadFile(p.LogPath); !strings.Contains(string(b), "moved raft log from the wal to raft.db") {
		t.Fatalf("no move back logged:\n%s", b)
	}
}

// post sends body as JSON to the node and decodes the answer's object.
func (s *singleNode) post(client *http.Client, path string, body any) (int, map[string]any, error) {
	b, _ := json.Marshal(body)
	resp, err := client.Post(s.endpoint+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// waitWritable waits until the node answers an acquire (granted or held).
func (s *singleNode) waitWritable(t *testing.T, client *http.Client) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, "the node to take writes", func() bool {
		code, _, err := s.post(client, "/v1/locks/acquire", map[string]any{"name": "probe", "owner": "p", "ttl_ms": 500, "lease_id": fmt.Sprintf("probe-%d", time.Now().UnixNano())})
		return err == nil && (code == 200 || code == 409)
	})
}
