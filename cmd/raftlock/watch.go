package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const watchHelp = `Usage: raftlock watch [flags] NAME
       raftlock watch [flags] --prefix PREFIX

Prints lock NAME's state, then one line each time it changes (taken, value
updated, released, expired), in the cluster's order, until interrupted
(SIGINT or SIGTERM: exit 0). "free" lines show when nobody holds it. Changes
closer together than a round trip may show as one (the latest); a state
older than one printed is never printed. With --prefix, prints the held locks
under PREFIX after each change under it.

Reads go to the leader (linearizable) unless --stale lets any node answer,
which keeps the watch going while the cluster has no leader. A failed read is
retried (with backoff, on any node) from the last index printed; a refused
one (unauthorized, forbidden, bad request) ends the watch with its exit code.

--json prints one object per line in the shapes of GET /v1/locks/NAME (or,
with --prefix, GET /v1/locks), "index" included.

Examples:
  raftlock watch service/leader
  raftlock watch --json --prefix jobs/
`

func watchCmd(args []string, stdout, stderr io.Writer, environ env) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runWatch(args, stdout, stderr, environ, sigs)
}

// runWatch is watch with its interrupting signals given as a channel, so
// that tests can send them.
func runWatch(args []string, stdout, stderr io.Writer, environ env, sigs <-chan os.Signal) int {
	c := newCLI("watch", watchHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	prefix := c.fs.String("prefix", "", "watch every lock whose name starts with this instead of NAME")
	stale := c.fs.Bool("stale", false, "let any node answer from its own state (may lag; keeps going without a leader)")
	wait := c.fs.Duration("wait", client.DefaultObserveWait, "how long one blocking read waits for a change (at most 5m)")
	pos, code, ok := c.parse(args, environ, 0, 1)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 1 && c.given["prefix"]:
		return c.usageError(errors.New("give NAME or --prefix, not both"))
	case len(pos) == 0 && !c.given["prefix"]:
		return c.usageError(errors.New("missing NAME (or --prefix PREFIX)"))
	case *wait <= 0 || *wait > time.Duration(api.MaxWaitMs)*time.Millisecond:
		return c.usageError(errors.New("--wait must be positive, at most 5m"))
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failed error // the error that ended the watch, if one did
	opts := client.ObserveOptions{Stale: *stale, Wait: *wait, OnError: func(err error) {
		failed = err
		fmt.Fprintf(stderr, "raftlock watch: %v (retrying)\n", err)
	}}
	var states <-chan func()
	if len(pos) == 1 {
		states = mapChan(cl.Observe(ctx, pos[0], opts), func(st client.LockState) { printState(c, st) })
	} else {
		states = mapChan(cl.ObservePrefix(ctx, *prefix, opts), func(st client.PrefixState) { printPrefix(c, *prefix, st) })
	}
	for {
		select {
		case print, open := <-states:
			if !open {
				// Observe gave up: a refusal no retry can help with.
				if failed == nil {
					return exitError
				}
				return c.fail(failed)
			}
			print()
		case <-sigs:
			cancel()
			for range states { // let the reader goroutine end
			}
			return exitOK
		}
	}
}

// mapChan turns a channel of states into one of the functions that print
// them, so that both kinds of watch share one loop.
func mapChan[T any](in <-chan T, print func(T)) <-chan func() {
	out := make(chan func())
	go func() {
		defer close(out)
		for st := range in {
			out <- func() { print(st) }
		}
	}()
	return out
}

// stateOut is a lock's state in the shape of GET /v1/locks/NAME.
func stateOut(st client.LockState) any {
	if !st.Held {
		return api.FreeLock{Name: st.Name, Index: st.Index}
	}
	return api.Lock{Name: st.Name, Held: true, Owner: st.Owner, FencingToken: st.Token, TTLMs: ms(st.TTL), Value: st.Value, Index: st.Index}
}

func printState(c *cli, st client.LockState) {
	if c.conn.json {
		c.printJSON(stateOut(st))
		return
	}
	if !st.Held {
		fmt.Fprintf(c.stdout, "%s: free (index %d)\n", st.Name, st.Index)
		return
	}
	fmt.Fprintf(c.stdout, "%s: held by %q, token %d, value %q (index %d)\n", st.Name, st.Owner, st.Token, st.Value, st.Index)
}

func printPrefix(c *cli, prefix string, st client.PrefixState) {
	if c.conn.json {
		out := api.LockList{Locks: []api.Lock{}, Truncated: st.Truncated, Index: st.Index}
		for _, l := range st.Locks {
			out.Locks = append(out.Locks, stateOut(l).(api.Lock))
		}
		c.printJSON(out)
		return
	}
	fmt.Fprintf(c.stdout, "%q: %d held (index %d)", prefix, len(st.Locks), st.Index)
	for _, l := range st.Locks {
		fmt.Fprintf(c.stdout, " %s=%q", l.Name, l.Value)
	}
	fmt.Fprintln(c.stdout)
}
