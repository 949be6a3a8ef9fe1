package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testenv"
)

// startElect runs raftlock elect in-process in the background, like
// startExec.
func startElect(t *testing.T, extra env, args ...string) *execRun {
	t.Helper()
	r := &execRun{sigs: make(chan os.Signal, 1), done: make(chan int, 1)}
	environ := append(env(os.Environ()), extra...)
	go func() { r.done <- runElect(args, nil, &r.stdout, &r.stderr, environ, r.sigs) }()
	return r
}

// leaderScript marks that $WHO runs the command (with its pid, the group
// to kill) and waits for $DIR/$WHO.go.
const leaderScript = `echo $$ > "$DIR/$WHO.tmp" && mv "$DIR/$WHO.tmp" "$DIR/$WHO.run"; while [ ! -e "$DIR/$WHO.go" ]; do sleep 0.02; done`

// firstRunning waits for one of whos to run the command and returns it.
func firstRunning(t *testing.T, dir string, whos ...string) string {
	t.Helper()
	var got string
	testenv.WaitFor(t, 30*time.Second, "a leader runs the command", func() bool {
		for _, w := range whos {
			if _, err := os.Stat(filepath.Join(dir, w+".run")); err == nil {
				got = w
				return true
			}
		}
		return false
	})
	return got
}

func TestElect(t *testing.T) {
	cl := testenv.Start(t, 3)
	base := endpointsEnv(cl.Endpoints())
	c, err := client.New(cl.Endpoints(), client.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testenv.Context(t, 2*time.Minute)

	t.Run("one leader runs the command at a time", func(t *testing.T) {
		dir := t.TempDir()
		runs := map[string]*execRun{}
		for _, who := range []string{"a", "b"} {
			runs[who] = startElect(t, append(base, "DIR="+dir, "WHO="+who), "--ttl", "2s", "--owner", who, "svc/one", "--", "sh", "-c", leaderScript)
		}
		first := firstRunning(t, dir, "a", "b")
		second := map[string]string{"a": "b", "b": "a"}[first]
		st, err := client.NewElection(c, "svc/one", client.ElectionOptions{}).Leader(ctx)
		if err != nil || st.Owner != first {
			t.Fatalf("leader %+v, %v; want %s", st, err, first)
		}
		// The second candidate waits in the queue: it must not run the
		// command while the first leads.
		if _, err := os.Stat(filepath.Join(dir, second+".run")); err == nil {
			t.Fatalf("%s runs the command while %s leads", second, first)
		}
		os.WriteFile(filepath.Join(dir, first+".go"), nil, 0o644)
		if code := runs[first].wait(t, 15*time.Second); code != 0 {
			t.Fatalf("first leader exited %d", code)
		}
		// Only now may the second run it: the first has released.
		waitFile(t, filepath.Join(dir, second+".run"))
		os.WriteFile(filepath.Join(dir, second+".go"), nil, 0o644)
		if code := runs[second].wait(t, 15*time.Second); code != 0 {
			t.Fatalf("second leader exited %d", code)
		}
		if _, err := client.NewElection(c, "svc/one", client.ElectionOptions{}).Leader(ctx); err == nil {
			t.Fatal("still led after both ended")
		}
	})

	t.Run("interrupted while campaigning: command never runs", func(t *testing.T) {
		dir := t.TempDir()
		lease, err := c.TryAcquire(ctx, "svc/busy", client.AcquireOptions{TTL: 30 * time.Second, Owner: "other"})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		r := startElect(t, append(base, "DIR="+dir, "WHO=x"), "svc/busy", "--", "sh", "-c", leaderScript)
		// Whether the signal comes before or while the campaign waits, it
		// must stop it without running the command.
		r.sigs <- syscall.SIGINT
		if code := r.wait(t, 15*time.Second); code != 128+int(syscall.SIGINT) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGINT))
		}
		if _, err := os.Stat(filepath.Join(dir, "x.run")); err == nil {
			t.Error("the command ran although another lease leads")
		}
	})

	t.Run("lost leadership: SIGTERM to the command, exit 4", func(t *testing.T) {
		dir := t.TempDir()
		r := startElect(t, append(base, "DIR="+dir), "--ttl", "1500ms", "--kill-grace", "30s",
			"svc/lost", "--", "sh", "-c", trapTerm+writeEnv+spin)
		e := readEnv(waitFile(t, filepath.Join(dir, "env")))
		if e["RAFTLOCK_LOCK"] != "svc/lost" || e["RAFTLOCK_FENCING_TOKEN"] == "" {
			t.Errorf("child env: lock %q, token %q", e["RAFTLOCK_LOCK"], e["RAFTLOCK_FENCING_TOKEN"])
		}
		// An operator ends the leader's lease: its next renew is refused.
		if out, err := c.ForceRelease(ctx, "svc/lost"); err != nil || !out.Ended {
			t.Fatalf("force release: %+v, %v", out, err)
		}
		if code := r.wait(t, 15*time.Second); code != exitNotHolder {
			t.Errorf("exit %d, want %d", code, exitNotHolder)
		}
		if got := waitFile(t, filepath.Join(dir, "term")); got != "TERM\n" {
			t.Errorf("marker %q", got)
		}
		// The supervision is exec's, but it speaks as elect.
		if s := r.stderr.String(); !strings.Contains(s, "raftlock elect: lease on svc/lost lost (the cluster says this lease no longer holds the lock); sending SIGTERM") || strings.Contains(s, "raftlock exec") {
			t.Errorf("stderr %q", s)
		}
	})

	t.Run("kill -9 of the leader: the other takes over once the lease ends", func(t *testing.T) {
		const ttl = 2 * time.Second
		dir := t.TempDir()
		bin := testenv.Binary(t)
		procs := map[string]*exec.Cmd{}
		var errs = map[string]*bytes.Buffer{}
		for _, who := range []string{"a", "b"} {
			cmd := exec.Command(bin, "elect", "--ttl", ttl.String(), "--owner", who, "svc/kill", "--", "sh", "-c", leaderScript)
			cmd.Env = append(os.Environ(), append(base, "DIR="+dir, "WHO="+who)...)
			errs[who] = &bytes.Buffer{}
			cmd.Stderr = errs[who]
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs[who] = cmd
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		}
		first := firstRunning(t, dir, "a", "b")
		second := map[string]string{"a": "b", "b": "a"}[first]
		pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(dir, first+".run"))))
		if err != nil {
			t.Fatal(err)
		}
		// The leader's machine dies: raftlock elect and its command with it
		// (the command's group, since it outlives a SIGKILLed parent).
		procs[first].Process.Kill()
		killed := time.Now()
		syscall.Kill(-pid, syscall.SIGKILL)
		procs[first].Wait()
		waitFile(t, filepath.Join(dir, second+".run"))
		took := time.Since(killed)
		// How soon is a figure, not a verdict (a loaded machine adds
		// elections to the TTL): waitFile bounds the wait, and the
		// checker, not this test, proves the two never overlap.
		t.Logf("the second candidate ran the command %v after the leader was killed (TTL %v)", took, ttl)
		os.WriteFile(filepath.Join(dir, second+".go"), nil, 0o644)
		if err := procs[second].Wait(); err != nil {
			t.Errorf("second leader: %v; stderr %s", err, errs[second])
		}
	})
}

// fakeHeld is a lease for runWhileHeld without a cluster.
type fakeHeld struct {
	lost       chan struct{}
	releaseErr error
}

func (f *fakeHeld) Token() uint64                 { return 7 }
func (f *fakeHeld) Lost() <-chan struct{}         { return f.lost }
func (f *fakeHeld) Err() error                    { return client.ErrNotHolder }
func (f *fakeHeld) Release(context.Context) error { return f.releaseErr }

// TestElectSupervisionMessages: the messages of the supervision that elect
// shares with exec name the command that runs it.
func TestElectSupervisionMessages(t *testing.T) {
	run := func(t *testing.T, lease *fakeHeld, killGrace time.Duration, script string, extra ...string) (int, string) {
		t.Helper()
		var stdout, stderr syncBuffer
		c := newCLI("elect", electHelp, &stdout, &stderr)
		c.conn = &conn{timeout: 5 * time.Second}
		x := execArgs{name: "svc/msg", argv: []string{"sh", "-c", script}, killGrace: killGrace}
		cmd := exec.Command(x.argv[0], x.argv[1:]...)
		code := runWhileHeld(c, "raftlock elect", x, cmd, lease, append(env(os.Environ()), extra...), nil, &stdout, &stderr, nil)
		t.Logf("exit %d, stderr %q", code, stderr.String())
		return code, stderr.String()
	}

	t.Run("lost, then SIGKILL", func(t *testing.T) {
		dir := t.TempDir()
		lease := &fakeHeld{lost: make(chan struct{})}
		go func() {
			// The command ignores SIGTERM once it has written env. (No t
			// here: this is not the test's goroutine. If env never comes,
			// the loss does anyway, and the messages are checked below.)
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(dir, "env")); err == nil {
					break
				}
			}
			close(lease.lost)
		}()
		code, stderr := run(t, lease, 50*time.Millisecond, ignoreTerm+writeEnv+spin, "DIR="+dir)
		if code != exitNotHolder {
			t.Errorf("exit %d, want %d", code, exitNotHolder)
		}
		for _, want := range []string{
			"raftlock elect: lease on svc/msg lost (the cluster says this lease no longer holds the lock); sending SIGTERM to the command\n",
			"raftlock elect: the command did not stop within 50ms of SIGTERM; sending SIGKILL\n",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		if strings.Contains(stderr, "raftlock exec") {
			t.Errorf("stderr names exec: %q", stderr)
		}
	})

	t.Run("release fails after the command", func(t *testing.T) {
		lease := &fakeHeld{lost: make(chan struct{}), releaseErr: errors.New("release refused")}
		code, stderr := run(t, lease, time.Second, "exit 3")
		if code != 3 || stderr != "raftlock elect: release refused (the lock expires after its TTL)\n" {
			t.Errorf("exit %d, stderr %q; want the command's 3 and elect's message", code, stderr)
		}
	})
}
