package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const getHelp = `Usage: raftlock get [flags] NAME

Shows whether lock NAME is held, and by whom: owner, fencing token and TTL.
The answer is linearizable (the leader confirms it leads before answering)
unless --stale lets any node answer from its own, possibly lagging, state.
A free lock is not an error: 'get' exits 0 either way (see "held" in --json).

Examples:
  raftlock get orders/89041
  raftlock get --json --stale --endpoints http://10.0.0.2:8001 orders/89041
`

const listHelp = `Usage: raftlock list [flags] [PREFIX]

Lists the held locks whose names start with PREFIX (or --prefix), sorted by
name. When more locks match than --limit, the list is cut there and a note
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
	return api.Lock{Name: info.Name, Held: true, Owner: info.Owner, FencingToken: info.Token, TTLMs: ms(info.TTL), Value: info.Value, Index: info.Index}
}

// printLock prints one lock: JSON, or one line of text.
func printLock(c *cli, info *client.LockInfo) {
	if c.conn.json {
		c.printJSON(lockOut(info))
		return
	}
	if !info.Held {
		fmt.Fprintf(c.stdout, "%s: free\n", info.Name)
		return
	}
	fmt.Fprintf(c.stdout, "%s: held by %q, token %d, ttl %s\n", info.Name, info.Owner, info.Token, info.TTL)
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
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tTTL")
		for _, l := range list.Locks {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Name, l.Owner, l.Token, l.TTL)
		}
		tw.Flush()
		if list.Truncated {
			fmt.Fprintf(stderr, "raftlock list: more locks match; showing the first %d (raise --limit)\n", len(list.Locks))
		}
		return exitOK
	})
}
