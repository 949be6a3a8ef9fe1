package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
)

const execHelp = `Usage: raftlock exec [flags] NAME -- COMMAND [ARGS...]

Takes lock NAME, runs COMMAND while the lease renews itself in the
background, releases the lock when COMMAND ends, and exits with COMMAND's
exit code (128+N if signal N ended it). COMMAND finds in its environment:

  RAFTLOCK_LOCK           the lock's name
  RAFTLOCK_FENCING_TOKEN  the lease's fencing token: pass it to the storage
                          you write, so that it can refuse a late writer

The lease id is not passed: only raftlock exec renews and releases the lease.

If the lease is lost (the cluster says this lease no longer holds the lock,
or no renewal succeeded before the lease's deadline), COMMAND gets SIGTERM,
then SIGKILL after --kill-grace, and raftlock exec exits 4 whatever COMMAND
returned: its work may not have been protected by the lock. SIGINT and
SIGTERM sent to raftlock exec are passed on to COMMAND, which still ends
before the lock is released.

COMMAND runs in its own process group and every signal goes to the whole
group, so the processes it starts are stopped too. It is meant for
non-interactive commands: it is not in the terminal's foreground group.

Without --wait, exits 3 at once if another lease holds the lock.

Examples:
  raftlock exec --ttl 10s orders/89041 -- ./charge.sh 89041
  raftlock exec --wait 5m --owner "$(hostname)-backup" backup/db -- sh -c 'pg_dump ... | upload'
`

// execCmd is `raftlock exec`; it passes the process's SIGINT and SIGTERM on
// to the command.
func execCmd(args []string, stdout, stderr io.Writer, environ env) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runExec(args, os.Stdin, stdout, stderr, environ, sigs)
}

// runExec is exec with the signals to forward given as a channel, so that
// tests can send them.
func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer, environ env, sigs <-chan os.Signal) int {
	c := newCLI("exec", execHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, false)
	a := addAcquireFlags(c.fs)
	grace := c.fs.Duration("kill-grace", 5*time.Second, "after SIGTERM on a lost lease, wait this long before SIGKILL")

	var name string
	var argv []string
	if i := slices.Index(args, "--"); i >= 0 {
		pos, code, ok := c.parse(args[:i], environ, 1, 1)
		if !ok {
			return code
		}
		name, argv = pos[0], args[i+1:]
	} else {
		c.flagsFirst = true
		pos, code, ok := c.parse(args, environ, 1, -1)
		if !ok {
			return code
		}
		name, argv = pos[0], pos[1:]
	}
	if len(argv) == 0 {
		return c.usageError(errors.New("missing the command to run (raftlock exec NAME -- COMMAND)"))
	}
	if err := a.check(); err != nil {
		return c.usageError(err)
	}
	if *grace < 0 {
		return c.usageError(errors.New("--kill-grace must not be negative"))
	}
	// Resolve the command before taking the lock, so that a typo does not
	// take it.
	if _, err := exec.LookPath(argv[0]); err != nil {
		fmt.Fprintf(stderr, "raftlock exec: %v\n", err)
		return startFailure(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()

	lease, sig, err := acquireInterruptible(a, cl, c.conn, name, sigs)
	if sig != nil {
		fmt.Fprintf(stderr, "raftlock exec: %v while acquiring %s\n", sig, name)
		return signalCode(sig)
	}
	if err != nil {
		return c.fail(err)
	}
	release := func() error {
		ctx, cancel := c.conn.ctx()
		defer cancel()
		return lease.Release(ctx)
	}

	cmd.Env = append(slices.Clip(environ),
		"RAFTLOCK_LOCK="+name,
		"RAFTLOCK_FENCING_TOKEN="+strconv.FormatUint(lease.Token(), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process the command left running with our stdout or stderr must
	// not keep us (and the lock) forever once the command has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "raftlock exec: %v\n", err)
		if rerr := release(); rerr != nil {
			fmt.Fprintf(stderr, "raftlock exec: %v\n", rerr)
		}
		return startFailure(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	group := func(s syscall.Signal) {
		// The group id is the command's pid (Setpgid); it stays reserved
		// until Wait reaps the command, so this never hits a stranger.
		_ = syscall.Kill(-cmd.Process.Pid, s)
	}
	lostCh := lease.Lost()
	var kill <-chan time.Time
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-waited:
			break loop
		case s := <-sigs:
			if ss, ok := s.(syscall.Signal); ok {
				group(ss)
			}
		case <-lostCh:
			lostCh = nil
			fmt.Fprintf(stderr, "raftlock exec: lease on %s lost (%s); sending SIGTERM to the command\n", name, lostReason(lease))
			group(syscall.SIGTERM)
			t := time.NewTimer(*grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "raftlock exec: the command did not stop within %s of SIGTERM; sending SIGKILL\n", *grace)
			group(syscall.SIGKILL)
		}
	}

	lost := false
	select {
	case <-lease.Lost():
		lost = true
	default:
	}
	rerr := release()
	if lost {
		if lostCh != nil { // lost after the command ended, before the release
			fmt.Fprintf(stderr, "raftlock exec: lease on %s lost (%s) before the command's end was known\n", name, lostReason(lease))
		}
		return exitNotHolder
	}
	if rerr != nil && !errors.Is(rerr, client.ErrLeaseLost) {
		// The command's result stands (a lease lost after the command ended
		// protected all of its work); the lock frees itself after its TTL.
		fmt.Fprintf(stderr, "raftlock exec: %v (the lock expires after its TTL)\n", rerr)
	}
	return exitCode(waitErr)
}

// acquireInterruptible acquires the lock; a signal from sigs stops the
// attempt (the client then releases anything the attempt may have taken) and
// is returned.
func acquireInterruptible(a *acquireFlags, cl *client.Client, cn *conn, name string, sigs <-chan os.Signal) (*client.Lease, os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		lease *client.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := a.acquire(ctx, cl, cn, name)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		return r.lease, nil, r.err
	case s := <-sigs:
		cancel()
		if r := <-done; r.lease != nil {
			// Granted just as the signal came: give it back.
			rctx, rcancel := cn.ctx()
			_ = r.lease.Release(rctx)
			rcancel()
		}
		return nil, s, nil
	}
}

func lostReason(l *client.Lease) string {
	switch err := l.Err(); {
	case errors.Is(err, client.ErrNotHolder):
		return "the cluster says this lease no longer holds the lock"
	case err != nil:
		return "no renewal succeeded before the lease's deadline"
	}
	return "lost"
}

// exitCode is the shell's view of how the command ended.
func exitCode(waitErr error) int {
	if waitErr == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	// exec.ErrWaitDelay: the command exited 0, but something it started
	// held its output open past WaitDelay.
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		return exitOK
	}
	return exitError
}

// startFailure is the shell's exit code for a command that could not run.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

func signalCode(s os.Signal) int {
	if ss, ok := s.(syscall.Signal); ok {
		return 128 + int(ss)
	}
	return exitError
}
