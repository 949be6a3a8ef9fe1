package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testenv"
)

// execRun is a raftlock exec running in the background.
type execRun struct {
	stdout, stderr syncBuffer
	sigs           chan os.Signal
	done           chan int
}

// startExec runs raftlock exec with args in the background, with the test's
// environment (so that the child finds sh) plus extra.
func startExec(t *testing.T, extra env, args ...string) *execRun {
	t.Helper()
	r := &execRun{sigs: make(chan os.Signal, 1), done: make(chan int, 1)}
	environ := append(env(os.Environ()), extra...)
	go func() { r.done <- runExec(args, nil, &r.stdout, &r.stderr, environ, r.sigs) }()
	return r
}

// wait returns exec's exit code, failing the test if it takes over d.
func (r *execRun) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case code := <-r.done:
		t.Logf("exec -> %d\nstdout: %sstderr: %s", code, r.stdout.String(), r.stderr.String())
		return code
	case <-time.After(d):
		t.Fatalf("exec still running after %v; stderr: %s", d, r.stderr.String())
		return -1
	}
}

// waitFile waits for path to exist and returns its contents.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	testenv.WaitFor(t, 15*time.Second, "file "+filepath.Base(path), func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	return string(b)
}

// readEnv parses `env` output.
func readEnv(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// Child scripts. Each writes its environment to $DIR/env (atomically, via a
// rename) once it runs; "wait for go" ones then poll for $DIR/go.
const (
	writeEnv   = `env > "$DIR/env.tmp" && mv "$DIR/env.tmp" "$DIR/env"; `
	waitForGo  = `while [ ! -e "$DIR/go" ]; do sleep 0.02; done; `
	trapTerm   = `trap 'echo TERM > "$DIR/term"; exit 42' TERM; `
	ignoreTerm = `trap '' TERM; `
	spin       = `while :; do sleep 0.02; done`
)

func TestExec(t *testing.T) {
	cl := testenv.Start(t, 3)
	eps := strings.Join(cl.Endpoints(), ",")
	c, err := client.New(cl.Endpoints(), client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Context(t, 2*time.Minute)
	get := func(t *testing.T, name string) *client.LockInfo {
		t.Helper()
		info, err := c.Get(ctx, name, false)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	base := env{"RAFTLOCK_ENDPOINTS=" + eps}

	t.Run("passes the lock and token, releases at the end", func(t *testing.T) {
		dir := t.TempDir()
		r := startExec(t, append(base, "DIR="+dir), "--owner", "exec-test", "jobs/env", "--", "sh", "-c", writeEnv+waitForGo+"echo done")
		e := readEnv(waitFile(t, filepath.Join(dir, "env")))
		info := get(t, "jobs/env")
		if !info.Held || info.Owner != "exec-test" || e["RAFTLOCK_FENCING_TOKEN"] != strconv.FormatUint(info.Token, 10) {
			t.Errorf("child saw token %q; the lock is %+v", e["RAFTLOCK_FENCING_TOKEN"], info)
		}
		if e["RAFTLOCK_LOCK"] != "jobs/env" {
			t.Errorf("RAFTLOCK_LOCK=%q", e["RAFTLOCK_LOCK"])
		}
		if _, ok := e["RAFTLOCK_LEASE_ID"]; ok {
			t.Error("the lease id leaked into the child's environment")
		}
		if e["RAFTLOCK_ENDPOINTS"] != eps {
			t.Errorf("the child did not inherit the environment: RAFTLOCK_ENDPOINTS=%q", e["RAFTLOCK_ENDPOINTS"])
		}
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t, 15*time.Second); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if r.stdout.String() != "done\n" || r.stderr.String() != "" {
			t.Errorf("stdout %q, stderr %q", r.stdout.String(), r.stderr.String())
		}
		if info := get(t, "jobs/env"); info.Held {
			t.Errorf("lock still held after exec: %+v", info)
		}
	})

	exitCodes := []struct {
		name   string
		script string
		code   int
	}{
		{"exit 0", "exit 0", 0},
		{"exit 7", "exit 7", 7},
		{"exit 4 is the command's", "exit 4", 4},
		{"killed by SIGTERM", "kill -TERM $$", 128 + int(syscall.SIGTERM)},
	}
	for _, tt := range exitCodes {
		t.Run("exit code: "+tt.name, func(t *testing.T) {
			r := startExec(t, base, "jobs/code", "--", "sh", "-c", tt.script)
			if code := r.wait(t, 15*time.Second); code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if info := get(t, "jobs/code"); info.Held {
				t.Errorf("lock still held after exec: %+v", info)
			}
		})
	}

	t.Run("held: the command does not run", func(t *testing.T) {
		dir := t.TempDir()
		lease, err := c.TryAcquire(ctx, "jobs/held", client.AcquireOptions{TTL: 30 * time.Second, Owner: "other"})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		r := startExec(t, append(base, "DIR="+dir), "jobs/held", "--", "sh", "-c", writeEnv)
		if code := r.wait(t, 15*time.Second); code != exitHeld {
			t.Errorf("exit %d, want %d", code, exitHeld)
		}
		if !strings.Contains(r.stderr.String(), `jobs/held is held by "other"`) {
			t.Errorf("stderr %q", r.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "env")); err == nil {
			t.Error("the command ran although the lock was held")
		}
	})

	// The lease is lost deterministically: the test releases it out from
	// under exec with the lease id it chose, so the watchdog's next renew
	// (within TTL/3) is answered not_holder.
	lose := func(t *testing.T, name, leaseID string) {
		t.Helper()
		if err := c.Release(ctx, name, leaseID); err != nil {
			t.Fatalf("release out from under exec: %v", err)
		}
	}

	t.Run("lost lease: SIGTERM to the command, exit 4", func(t *testing.T) {
		dir := t.TempDir()
		const id = "exec-test-lost-lease-1"
		r := startExec(t, append(base, "DIR="+dir), "--ttl", "1500ms", "--lease-id", id, "--kill-grace", "30s",
			"jobs/lost", "--", "sh", "-c", trapTerm+writeEnv+spin)
		waitFile(t, filepath.Join(dir, "env"))
		lose(t, "jobs/lost", id)
		if code := r.wait(t, 15*time.Second); code != exitNotHolder {
			t.Errorf("exit %d, want %d", code, exitNotHolder)
		}
		if got := waitFile(t, filepath.Join(dir, "term")); got != "TERM\n" {
			t.Errorf("marker %q", got)
		}
		if s := r.stderr.String(); !strings.Contains(s, "raftlock exec: lease on jobs/lost lost (the cluster says this lease no longer holds the lock); sending SIGTERM") || strings.Contains(s, "SIGKILL") {
			t.Errorf("stderr %q", s)
		}
	})

	t.Run("lost lease: SIGKILL after the grace", func(t *testing.T) {
		dir := t.TempDir()
		const id = "exec-test-lost-lease-2"
		r := startExec(t, append(base, "DIR="+dir), "--ttl", "1500ms", "--lease-id", id, "--kill-grace", "200ms",
			"jobs/stubborn", "--", "sh", "-c", ignoreTerm+writeEnv+spin)
		waitFile(t, filepath.Join(dir, "env"))
		lose(t, "jobs/stubborn", id)
		if code := r.wait(t, 15*time.Second); code != exitNotHolder {
			t.Errorf("exit %d, want %d", code, exitNotHolder)
		}
		if s := r.stderr.String(); !strings.Contains(s, "did not stop within 200ms of SIGTERM; sending SIGKILL") {
			t.Errorf("stderr %q", s)
		}
	})

	t.Run("forwards SIGTERM, then releases", func(t *testing.T) {
		dir := t.TempDir()
		r := startExec(t, append(base, "DIR="+dir), "jobs/signal", "--", "sh", "-c", trapTerm+writeEnv+spin)
		waitFile(t, filepath.Join(dir, "env"))
		r.sigs <- syscall.SIGTERM
		if code := r.wait(t, 15*time.Second); code != 42 {
			t.Errorf("exit %d, want the command's 42", code)
		}
		if got := waitFile(t, filepath.Join(dir, "term")); got != "TERM\n" {
			t.Errorf("marker %q", got)
		}
		if info := get(t, "jobs/signal"); info.Held {
			t.Errorf("lock still held after exec: %+v", info)
		}
	})

	t.Run("a signal while waiting for the lock gives up", func(t *testing.T) {
		lease, err := c.TryAcquire(ctx, "jobs/wait", client.AcquireOptions{TTL: 30 * time.Second, Owner: "other"})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		r := startExec(t, base, "--wait", "1m", "jobs/wait", "--", "true")
		// Wait until exec is parked on the leader, then interrupt it.
		testenv.WaitFor(t, 15*time.Second, "exec to wait for the lock", func() bool {
			n := 0
			for _, node := range cl.Nodes {
				if node.Running() {
					n += node.Waiters()
				}
			}
			return n > 0
		})
		r.sigs <- syscall.SIGINT
		if code := r.wait(t, 15*time.Second); code != 128+int(syscall.SIGINT) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGINT))
		}
		if info := get(t, "jobs/wait"); info.Owner != "other" {
			t.Errorf("lock %+v, want it still held by other", info)
		}
		// The abandoned wait must not take the lock once it is free.
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info := get(t, "jobs/wait"); info.Held {
			t.Errorf("lock %+v after release, want free", info)
		}
	})

}

// TestExecUnknownOutcome: when the acquire's outcome cannot be known (504
// unknown_outcome until --timeout), exec exits 6 without running the
// command, and its help says so.
func TestExecUnknownOutcome(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Raftlock-Node", "n1")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusGatewayTimeout)
		io.WriteString(w, `{"error":"unknown_outcome","message":"outcome unknown: leadership lost with the entry in flight"}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	r := startExec(t, env{"RAFTLOCK_ENDPOINTS=" + srv.URL, "DIR=" + dir},
		"--lease-id", "0123456789abcdef", "--timeout", "300ms", "jobs/unknown", "--", "sh", "-c", writeEnv)
	if code := r.wait(t, 15*time.Second); code != exitUnknown {
		t.Errorf("exit %d, want %d", code, exitUnknown)
	}
	if s := r.stderr.String(); !strings.HasPrefix(s, "raftlock exec: outcome unknown") {
		t.Errorf("stderr %q", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "env")); err == nil {
		t.Error("the command ran although the acquire's outcome is unknown")
	}

	help := startExec(t, nil, "--help")
	if code := help.wait(t, 15*time.Second); code != exitOK || !strings.Contains(help.stdout.String(), "Exits 6") {
		t.Errorf("exit %d; raftlock exec --help does not mention exit 6:\n%s", code, help.stdout.String())
	}
}
