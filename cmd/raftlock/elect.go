package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const electHelp = `Usage: raftlock elect [flags] --value V NAME -- COMMAND [ARGS...]

Campaigns in election NAME (its lock) and runs COMMAND only while it leads:
candidates wait their turn first come, first served; the leader publishes V
(say, its address) with the lock, where 'raftlock leader NAME' and 'raftlock
watch NAME' show it. Exits with COMMAND's exit code, releasing the lock so
that the next candidate leads at once.

Everything else is raftlock exec's: COMMAND's environment (RAFTLOCK_LOCK,
RAFTLOCK_FENCING_TOKEN, and RAFTLOCK_VALUE), its process group, the
signals passed on, and on a lost leadership SIGTERM, then SIGKILL after
--kill-grace, and exit 4. A leader that dies without releasing is replaced
once its --ttl runs out. Without --wait, campaigns until it leads or is
interrupted (SIGINT or SIGTERM: exit 128+N, COMMAND never run).

Examples:
  raftlock elect --ttl 5s --value "$(hostname):8080" service/leader -- ./serve-as-primary
  raftlock leader service/leader
`

func electCmd(args []string, stdout, stderr io.Writer, environ env) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runElect(args, os.Stdin, stdout, stderr, environ, sigs)
}

// runElect is elect with the signals to forward given as a channel, so that
// tests can send them. It is exec with a campaign in place of the acquire.
func runElect(args []string, stdin io.Reader, stdout, stderr io.Writer, environ env, sigs <-chan os.Signal) int {
	c := newCLI("elect", electHelp, stdout, stderr)
	value := c.fs.String("value", "", "what the leader publishes with the lock (at most 4096 bytes)")
	x, code, ok := parseExec(c, args, environ, false)
	if !ok {
		return code
	}
	if x.acquire.leaseID != "" {
		return c.usageError(errors.New("--lease-id is exec's and acquire's; elect makes its own"))
	}
	if len(*value) > api.MaxValue {
		return c.usageError(fmt.Errorf("--value: at most %d bytes", api.MaxValue))
	}
	cmd, cl, code, ok := prepareCommand(c, "raftlock elect", x, stderr)
	if !ok {
		return code
	}
	defer cl.Close()

	lease, sig, err := campaignInterruptible(x.acquire, cl, c.conn, x.name, *value, sigs)
	if sig != nil {
		fmt.Fprintf(stderr, "raftlock elect: %v while campaigning for %s\n", sig, x.name)
		return signalCode(sig)
	}
	if err != nil {
		return c.fail(err)
	}
	return runWhileHeld(c, "raftlock elect", x, cmd, lease, append(environ, "RAFTLOCK_VALUE="+*value), stdin, stdout, stderr, sigs)
}

// campaignInterruptible campaigns until this candidate leads (or --wait
// passes, if given); a signal from sigs stops the campaign (whatever it may
// have taken is released) and is returned.
func campaignInterruptible(a *acquireFlags, cl *client.Client, cn *conn, name, value string, sigs <-chan os.Signal) (*client.Lease, os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if a.wait > 0 {
		ctx, cancel = context.WithTimeout(ctx, a.wait)
		defer cancel()
	}
	e := client.NewElection(cl, name, client.ElectionOptions{
		TTL: a.ttl, Owner: a.owner, LockDelay: a.lockDelay, Wait: min(a.wait, client.MaxWaitRound),
	})
	type result struct {
		lease *client.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && errors.Is(r.err, context.DeadlineExceeded) && !errors.Is(r.err, client.ErrHeld) {
			r.err = fmt.Errorf("%w (did not lead within --wait)", r.err)
		}
		return r.lease, nil, r.err
	case s := <-sigs:
		cancel()
		if r := <-done; r.lease != nil {
			// Elected just as the signal came: give it back.
			rctx, rcancel := cn.ctx()
			_ = r.lease.Release(rctx)
			rcancel()
		}
		return nil, s, nil
	}
}
