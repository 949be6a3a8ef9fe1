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

--shared holds the lock in shared mode, with other shared holders (readers);
an exclusive holder waits for all of them. --semaphore N holds one of the N
permits of semaphore NAME instead of the lock (semaphores are apart from
locks); COMMAND then also finds RAFTLOCK_SEMAPHORE_SLOT, its slot 0..N-1:
fence the storage per (NAME, slot), as the token rises per slot.

--session-id takes the lock in that session (raftlock session create)
instead of with a TTL of its own: exec renews the session while COMMAND
runs, releases the lock when it ends, and leaves the session open. The
session ending (expired, closed) loses the lock.

If the lease is lost (the cluster says this lease no longer holds the lock,
or no renewal succeeded before the lease's deadline), COMMAND gets SIGTERM,
then SIGKILL after --kill-grace, and raftlock exec exits 4 whatever COMMAND
returned: its work may not have been protected by the lock. SIGINT and
SIGTERM sent to raftlock exec are passed on to COMMAND, which still ends
before the lock is released.

COMMAND runs in its own process group and every signal goes to the whole
group, so the processes it starts are stopped too. It is meant for
non-interactive commands: it is not in the terminal's foreground group.

Without --wait, exits 3 at once if another lease holds the lock. Exits 6,
without running COMMAND, when the acquire's outcome could not be known in
time (the lock may have been taken; that lease is released, best effort):
run it again, with a --lease-id of your own to resend safely.

Examples:
  raftlock exec --ttl 10s orders/89041 -- ./charge.sh 89041
  raftlock exec --wait 5m --owner "$(hostname)-backup" backup/db -- sh -c 'pg_dump ... | upload'
  raftlock exec --shared --wait 1m schema/orders -- ./read-report.sh
  raftlock exec --semaphore 3 --wait 10m exporters -- ./export.sh
  raftlock exec --session-id "$sid" orders/89041 -- ./charge.sh 89041
`

// execCmd is `raftlock exec`; it passes the process's SIGINT and SIGTERM on
// to the command.
func execCmd(args []string, stdout, stderr io.Writer, environ env) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runExec(args, os.Stdin, stdout, stderr, environ, sigs)
}

// execArgs is exec's command line, parsed and checked.
type execArgs struct {
	name      string   // the lock
	argv      []string // the command and its arguments
	acquire   *acquireFlags
	killGrace time.Duration // from SIGTERM to SIGKILL on a lost lease
}

// runExec is exec with the signals to forward given as a channel, so that
// tests can send them.
func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer, environ env, sigs <-chan os.Signal) int {
	c := newCLI("exec", execHelp, stdout, stderr)
	semLimit := c.fs.Int("semaphore", 0, "hold a permit of semaphore NAME, which has this many, instead of the lock")
	x, code, ok := parseExec(c, args, environ, true)
	if !ok {
		return code
	}
	a := x.acquire
	take := func(ctx context.Context, cl *client.Client) (held, error) {
		return asHeld(a.acquire(ctx, cl, c.conn, x.name))
	}
	switch {
	case a.shared && *semLimit != 0:
		return c.usageError(errors.New("--shared and --semaphore exclude each other"))
	case a.sessionID != "" && *semLimit != 0:
		return c.usageError(errors.New("--session-id is for a lock; --semaphore takes a permit with its own TTL"))
	case *semLimit != 0 && a.lockDelay > 0:
		return c.usageError(errors.New("--lock-delay is for exclusive locks only"))
	case *semLimit != 0:
		if err := checkLimit(*semLimit); err != nil {
			return c.usageError(fmt.Errorf("--semaphore: %w", err))
		}
		s := &semFlags{ttl: a.ttl, wait: a.wait, owner: a.owner, leaseID: a.leaseID}
		take = func(ctx context.Context, cl *client.Client) (held, error) {
			return asHeld(acquirePermit(ctx, cl, c.conn, x.name, *semLimit, s))
		}
	}
	cmd, cl, code, ok := prepareCommand(c, "raftlock exec", x, stderr)
	if !ok {
		return code
	}
	defer cl.Close()

	lease, sig, err := acquireInterruptible(func(ctx context.Context) (held, error) { return take(ctx, cl) }, c.conn, sigs)
	// With --session-id, exec kept the session alive while it held the
	// lock; it leaves it, not closes it, once the lock is released.
	defer a.detachSession()
	if sig != nil {
		fmt.Fprintf(stderr, "raftlock exec: %v while acquiring %s\n", sig, x.name)
		return signalCode(sig)
	}
	if err != nil {
		return c.fail(err) // exit 6 when the acquire's outcome is unknown
	}
	if p, ok := lease.(*client.Permit); ok {
		environ = append(environ, "RAFTLOCK_SEMAPHORE_SLOT="+strconv.Itoa(p.Slot()))
	}
	return runWhileHeld(c, "raftlock exec", x, cmd, lease, environ, stdin, stdout, stderr, sigs)
}

// held is what exec holds while the command runs: a *client.Lease, or a
// *client.Permit with --semaphore.
type held interface {
	Token() uint64
	Lost() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// asHeld keeps a failed acquire's nil out of the interface.
func asHeld[T held](h T, err error) (held, error) {
	if err != nil {
		return nil, err
	}
	return h, nil
}

// prepareCommand resolves the command before the lock is taken, so that a
// typo does not take it, and makes the client. When ok is false, the caller
// exits with code.
func prepareCommand(c *cli, who string, x execArgs, stderr io.Writer) (*exec.Cmd, *client.Client, int, bool) {
	if _, err := exec.LookPath(x.argv[0]); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		return nil, nil, startFailure(err), false
	}
	cl, code, ok := c.client()
	if !ok {
		return nil, nil, code, false
	}
	return exec.Command(x.argv[0], x.argv[1:]...), cl, 0, true
}

// runWhileHeld runs cmd while lease holds the lock, for exec and elect: it
// starts the child with the lock's environment, supervises it (forwarded
// signals, SIGTERM then SIGKILL on a lost lease) and releases the lease
// when the child ends, answering with the child's exit code.
func runWhileHeld(c *cli, who string, x execArgs, cmd *exec.Cmd, lease held, environ env, stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	release := func() error {
		ctx, cancel := c.conn.ctx()
		defer cancel()
		return lease.Release(ctx)
	}
	child, err := startChild(cmd, x.name, lease.Token(), stdin, stdout, stderr, environ)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", who, err)
		if rerr := release(); rerr != nil {
			fmt.Fprintf(stderr, "%s: %v\n", who, rerr)
		}
		return startFailure(err)
	}
	waitErr, lossReported := child.supervise(who, lease, sigs, x.killGrace, x.name, stderr)
	return releaseAndExitCode(who, lease, release, waitErr, lossReported, x.name, stderr)
}

// parseExec parses exec's flags, the lock's name and the command. With "--",
// flags may come anywhere before it; without, they end at NAME, so that the
// command's own flags are left to it. withShared adds --shared (exec's, not
// elect's). When ok is false, exec exits with code.
func parseExec(c *cli, args []string, environ env, withShared bool) (x execArgs, code int, ok bool) {
	c.conn = addConnFlags(c.fs, 10*time.Second, false)
	x.acquire = addAcquireFlags(c.fs, withShared)
	c.fs.DurationVar(&x.killGrace, "kill-grace", 5*time.Second, "after SIGTERM on a lost lease, wait this long before SIGKILL")

	var pos []string
	if i := slices.Index(args, "--"); i >= 0 {
		if pos, code, ok = c.parse(args[:i], environ, 1, 1); !ok {
			return x, code, false
		}
		x.argv = args[i+1:]
	} else {
		c.flagsFirst = true
		if pos, code, ok = c.parse(args, environ, 1, -1); !ok {
			return x, code, false
		}
		x.argv = pos[1:]
	}
	x.name = pos[0]
	if len(x.argv) == 0 {
		return x, c.usageError(fmt.Errorf("missing the command to run (raftlock %s NAME -- COMMAND)", c.name)), false
	}
	if err := x.acquire.check(c.given); err != nil {
		return x, c.usageError(err), false
	}
	if x.killGrace < 0 {
		return x, c.usageError(errors.New("--kill-grace must not be negative")), false
	}
	return x, exitOK, true
}

// child is the running command, alone in its process group.
type child struct {
	cmd    *exec.Cmd
	waited chan error // cmd.Wait's result
}

// startChild starts cmd with the lock's name and fencing token in its
// environment and exec's streams, in a process group of its own.
func startChild(cmd *exec.Cmd, name string, token uint64, stdin io.Reader, stdout, stderr io.Writer, environ env) (*child, error) {
	cmd.Env = append(slices.Clip(environ),
		"RAFTLOCK_LOCK="+name,
		"RAFTLOCK_FENCING_TOKEN="+strconv.FormatUint(token, 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process the command left running with our stdout or stderr must
	// not keep us (and the lock) forever once the command has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := &child{cmd: cmd, waited: make(chan error, 1)}
	go func() { ch.waited <- cmd.Wait() }()
	return ch, nil
}

// signalGroup sends s to the command and every process it started.
func (ch *child) signalGroup(s syscall.Signal) {
	// The group id is the command's pid (Setpgid); it stays reserved until
	// Wait reaps the command, so this never hits a stranger.
	_ = syscall.Kill(-ch.cmd.Process.Pid, s)
}

// supervise waits for the command to end, forwarding the signals from sigs
// to its group. If the lease is lost meanwhile, it stops the command:
// SIGTERM, then SIGKILL once killGrace has passed, saying so as who
// ("raftlock exec", "raftlock elect"). It returns Wait's error and whether
// it reported the loss (the lease may still be lost after the command
// ended, unreported).
func (ch *child) supervise(who string, lease held, sigs <-chan os.Signal, killGrace time.Duration, name string, stderr io.Writer) (waitErr error, lossReported bool) {
	lost := lease.Lost()
	var kill <-chan time.Time // fires killGrace after the SIGTERM
	for {
		select {
		case waitErr = <-ch.waited:
			return waitErr, lossReported
		case s := <-sigs:
			if ss, ok := s.(syscall.Signal); ok {
				ch.signalGroup(ss)
			}
		case <-lost:
			lost, lossReported = nil, true
			fmt.Fprintf(stderr, "%s: lease on %s lost (%s); sending SIGTERM to the command\n", who, name, lostReason(lease))
			ch.signalGroup(syscall.SIGTERM)
			t := time.NewTimer(killGrace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "%s: the command did not stop within %s of SIGTERM; sending SIGKILL\n", who, killGrace)
			ch.signalGroup(syscall.SIGKILL)
		}
	}
}

// releaseAndExitCode releases the lease once the command has ended and
// returns exec's (or elect's: who) exit code: exitNotHolder if the lease was
// lost by then (the command's work may not have been protected by the
// lock), else the command's own.
func releaseAndExitCode(who string, lease held, release func() error, waitErr error, lossReported bool, name string, stderr io.Writer) int {
	lost := false
	select {
	case <-lease.Lost():
		lost = true
	default:
	}
	rerr := release()
	if lost {
		if !lossReported { // lost after the command ended, before the release
			fmt.Fprintf(stderr, "%s: lease on %s lost (%s) before the command's end was known\n", who, name, lostReason(lease))
		}
		return exitNotHolder
	}
	if rerr != nil && !errors.Is(rerr, client.ErrLeaseLost) {
		// The command's result stands (a lease lost after the command ended
		// protected all of its work); the lock frees itself after its TTL.
		fmt.Fprintf(stderr, "%s: %v (the lock expires after its TTL)\n", who, rerr)
	}
	return exitCode(waitErr)
}

// acquireInterruptible acquires the lock; a signal from sigs stops the
// attempt (the client then releases anything the attempt may have taken) and
// is returned.
func acquireInterruptible(take func(ctx context.Context) (held, error), cn *conn, sigs <-chan os.Signal) (held, os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		lease held
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := take(ctx)
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

func lostReason(l held) string {
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
