package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const getHelp = `Usage: raftlock get [flags] NAME

Shows whether lock NAME is held, and by whom: owner, fencing token and TTL;
for a lock held shared, every holder (with its time left when the leader
answers). The answer is linearizable (the leader confirms it leads before answering)
unless --stale lets any node answer from its own, possibly lagging, state.
A free lock is not an error: 'get' exits 0 either way (see "held" in --json).

Examples:
  raftlock get orders/89041
  raftlock get --json --stale --endpoints http://10.0.0.2:8001 orders/89041
`

const listHelp = `Usage: raftlock list [flags] [PREFIX]

Lists the held locks whose names start with PREFIX (or --prefix), sorted by
name. A lock held shared has a row per holder, and the list then has a MODE
column. When more locks match than --limit, the list is cut there and a note
goes to stderr ("truncated": true in --json).

Examples:
  raftlock list orders/
  raftlock list --limit 10 --json
`

// lockOut is a lock as the API shows it: api.FreeLock, or api.Lock when held.
func lockOut(info *client.LockInfo) any {
	if !info.Held {
		return api.FreeLock{Name: info.Name, Index: info.Index}
	}
	return heldOut(info)
}

func heldOut(info *client.LockInfo) api.Lock {
	out := api.Lock{Name: info.Name, Held: true, Owner: info.Owner, FencingToken: info.Token, TTLMs: ms(info.TTL), Value: info.Value, Index: info.Index}
	if info.Shared {
		out.Mode = api.ModeShared
		out.Holders = []api.LockHolder{}
		for _, h := range info.Holders {
			lh := api.LockHolder{Owner: h.Owner, FencingToken: h.Token, TTLMs: ms(h.TTL)}
			if h.Remaining >= 0 {
				r := ms(h.Remaining)
				lh.RemainingMs = &r
			}
			out.Holders = append(out.Holders, lh)
		}
	}
	return out
}

// printLock prints one lock: JSON, or a line of text (and a line per
// holder of a lock held shared).
func printLock(c *cli, info *client.LockInfo) {
	if c.conn.json {
		c.printJSON(lockOut(info))
		return
	}
	if !info.Held {
		fmt.Fprintf(c.stdout, "%s: free\n", info.Name)
		return
	}
	if !info.Shared || len(info.Holders) == 0 {
		fmt.Fprintf(c.stdout, "%s: held by %q, token %d, ttl %s\n", info.Name, info.Owner, info.Token, info.TTL)
		return
	}
	fmt.Fprintf(c.stdout, "%s: held shared by %d holders\n", info.Name, len(info.Holders))
	for _, h := range info.Holders {
		fmt.Fprintf(c.stdout, "  %q, token %d, ttl %s", h.Owner, h.Token, h.TTL)
		if h.Remaining >= 0 {
			fmt.Fprintf(c.stdout, ", %s left", h.Remaining)
		}
		fmt.Fprintln(c.stdout)
	}
}

func getCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("get", getHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	stale := c.fs.Bool("stale", false, "let any node answer from its own state (faster, may lag)")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		info, err := cl.Get(ctx, pos[0], *stale)
		if err != nil {
			return c.fail(err)
		}
		printLock(c, info)
		return exitOK
	})
}

func listCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("list", listHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	prefix := c.fs.String("prefix", "", "only locks whose names start with this")
	limit := c.fs.Int("limit", 0, "at most this many locks (0: the server's default, 1000)")
	pos, code, ok := c.parse(args, environ, 0, 1)
	if !ok {
		return code
	}
	if len(pos) == 1 {
		if *prefix != "" {
			return c.usageError(errors.New("give the prefix as an argument or as --prefix, not both"))
		}
		*prefix = pos[0]
	}
	if *limit < 0 {
		return c.usageError(errors.New("--limit must not be negative"))
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		list, err := cl.List(ctx, *prefix, *limit)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			out := api.LockList{Locks: []api.Lock{}, Truncated: list.Truncated, Index: list.Index}
			for i := range list.Locks {
				out.Locks = append(out.Locks, heldOut(&list.Locks[i])) // List returns held locks only
			}
			c.printJSON(out)
			return exitOK
		}
		if len(list.Locks) == 0 {
			fmt.Fprintln(stdout, "no locks held")
			return exitOK
		}
		printLockTable(stdout, list.Locks)
		if list.Truncated {
			fmt.Fprintf(stderr, "raftlock list: more locks match; showing the first %d (raise --limit)\n", len(list.Locks))
		}
		return exitOK
	})
}

// printLockTable prints held locks, a row per holder. The MODE column comes
// only when a lock is held shared, so that a list of exclusive holds reads
// as it always has.
func printLockTable(w io.Writer, locks []client.LockInfo) {
	withMode := slices.ContainsFunc(locks, func(l client.LockInfo) bool { return l.Shared })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if withMode {
		fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tTTL\tMODE")
	} else {
		fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tTTL")
	}
	for _, l := range locks {
		mode := api.ModeExclusive
		if l.Shared {
			mode = api.ModeShared
		}
		switch {
		case len(l.Holders) > 0:
			for _, h := range l.Holders {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Name, h.Owner, h.Token, h.TTL, mode)
			}
		case withMode:
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Name, l.Owner, l.Token, l.TTL, mode)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Name, l.Owner, l.Token, l.TTL)
		}
	}
	tw.Flush()
}
