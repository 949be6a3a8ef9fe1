package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const semaphoreHelp = `Usage: raftlock semaphore <acquire|renew|release|show> [flags] NAME

A semaphore lets up to --limit holders in at once, each in its own slot
(0 to limit-1) with a fencing token larger than every earlier token of that
slot: fence the storage per (semaphore, slot). Semaphores are apart from
locks: semaphore "a" has nothing to do with lock "a". 'raftlock sem' is the
same command.

  acquire   take a permit; prints its slot, fencing token and lease id
  renew     renew a permit taken with acquire
  release   release it
  show      the limit and the holders (owner, slot, token, time left)

To hold a permit while a command runs, use 'raftlock exec --semaphore N'.

Exits 3 when every permit is held (full), 4 when the permit is no longer
held (renew, release), 6 when the outcome is unknown.

Examples:
  raftlock semaphore acquire --limit 3 --ttl 30s --owner exporter-a exporters
  RAFTLOCK_LEASE_ID=$lease raftlock semaphore release exporters
  raftlock sem show exporters
`

const semAcquireHelp = `Usage: raftlock semaphore acquire --limit N [flags] NAME

Takes a permit of semaphore NAME, which allows N holders at once, and prints
its name, slot, fencing token, lease id, limit and TTL. The permit is not
renewed after the command exits: renew it with 'raftlock semaphore renew'
before the TTL runs out, or release it. The first holder sets the limit:
while anyone holds a permit, another --limit is refused (limit_mismatch).

Exits 3 when every permit is held (after --wait, if given), 6 when the
outcome is unknown: run it again with a --lease-id of your own.

Example:
  lease=$(raftlock semaphore acquire --json --limit 3 exporters | jq -r .lease_id)
`

const semRenewHelp = `Usage: raftlock semaphore renew --lease-id ID [flags] NAME

Renews the permit ID of semaphore NAME for another TTL and prints it; its
slot and fencing token stay. Exits 4 when that permit is no longer held.
The lease id may come from RAFTLOCK_LEASE_ID instead.

Examples:
  RAFTLOCK_LEASE_ID=$lease raftlock semaphore renew exporters
  RAFTLOCK_LEASE_ID=$lease raftlock semaphore renew --ttl 2m exporters
`

const semReleaseHelp = `Usage: raftlock semaphore release --lease-id ID [flags] NAME

Releases the permit ID of semaphore NAME. Exits 4 when that permit is not
held, 6 when the outcome is unknown (run it again: 4 then means it is gone).

Example:
  RAFTLOCK_LEASE_ID=$lease raftlock semaphore release exporters
`

const semShowHelp = `Usage: raftlock semaphore show [flags] NAME

Shows semaphore NAME's limit and its holders by slot, with their fencing
tokens and time left. Nobody holding a permit is not an error (limit 0).

Examples:
  raftlock semaphore show exporters
  raftlock semaphore show --json exporters | jq '.holders | length'
`

func semaphoreCmd(args []string, stdout, stderr io.Writer, environ env) int {
	subs := map[string]command{
		"acquire": semAcquireCmd,
		"renew":   semRenewCmd,
		"release": semReleaseCmd,
		"show":    semShowCmd,
	}
	return subcommands("semaphore", semaphoreHelp, subs, args, stdout, stderr, environ)
}

// semFlags are the flags of semaphore acquire and exec --semaphore.
type semFlags struct {
	ttl, wait      time.Duration
	owner, leaseID string
}

func addSemFlags(fs *flag.FlagSet) *semFlags {
	s := &semFlags{}
	fs.DurationVar(&s.ttl, "ttl", client.DefaultTTL, "permit time to live, 500ms to 1h")
	fs.StringVar(&s.owner, "owner", defaultOwner(), "who holds the permit, as others see it")
	fs.DurationVar(&s.wait, "wait", 0, "wait up to this long while every permit is held (0: fail at once)")
	fs.StringVar(&s.leaseID, "lease-id", "", "use this lease id (16-128 chars of [A-Za-z0-9_-]); resending an acquire with it is idempotent")
	return s
}

func checkLimit(limit int) error {
	if limit < 1 || limit > client.MaxSemaphoreLimit {
		return fmt.Errorf("--limit must be 1 to %d", client.MaxSemaphoreLimit)
	}
	return nil
}

// acquirePermit takes a permit: at once (bounded by --timeout) without
// --wait, else waiting up to --wait. Cancelling parent stops a wait.
func acquirePermit(parent context.Context, cl *client.Client, cn *conn, name string, limit int, s *semFlags) (*client.Permit, error) {
	opts := client.SemaphoreOptions{TTL: s.ttl, Owner: s.owner, LeaseID: s.leaseID}
	if s.wait == 0 {
		ctx, cancel := context.WithTimeout(parent, cn.timeout)
		defer cancel()
		return cl.TrySemaphore(ctx, name, limit, opts)
	}
	opts.Wait = min(s.wait, client.MaxWaitRound)
	ctx, cancel := context.WithTimeout(parent, s.wait)
	defer cancel()
	return cl.AcquireSemaphore(ctx, name, limit, opts)
}

func permitOut(p *client.Permit) api.Permit {
	return api.Permit{Name: p.Name(), Owner: p.Owner(), LeaseID: p.LeaseID(), Slot: p.Slot(), FencingToken: p.Token(), Limit: int64(p.Limit()), TTLMs: ms(p.TTL())}
}

func semAcquireCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("semaphore acquire", semAcquireHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	limit := c.fs.Int("limit", 0, fmt.Sprintf("how many may hold a permit at once, 1 to %d (required)", client.MaxSemaphoreLimit))
	s := addSemFlags(c.fs)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	if err := s.check(*limit); err != nil {
		return c.usageError(err)
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	p, err := acquirePermit(context.Background(), cl, c.conn, pos[0], *limit, s)
	if err != nil {
		return c.fail(err)
	}
	// The permit outlives this process: stop renewing without releasing.
	p.Detach()
	out := permitOut(p)
	if c.conn.json {
		c.printJSON(out)
		return exitOK
	}
	fmt.Fprintf(stdout, "name:      %s\nowner:     %s\nslot:      %d\ntoken:     %d\nlease_id:  %s\nlimit:     %d\nttl:       %s\n",
		out.Name, out.Owner, out.Slot, out.FencingToken, out.LeaseID, out.Limit, p.TTL())
	return exitOK
}

func (s *semFlags) check(limit int) error {
	if err := checkTTL("ttl", s.ttl, false); err != nil {
		return err
	}
	if s.wait < 0 {
		return errors.New("--wait must not be negative")
	}
	if err := checkLimit(limit); err != nil {
		return err
	}
	return checkLeaseID(s.leaseID)
}

func semRenewCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("semaphore renew", semRenewHelp, stdout, stderr)
	name, id, ttl, code, ok := parseRenew(c, args, environ, "permit")
	if !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		p, err := cl.RenewSemaphore(ctx, name, id, ttl)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(api.Permit{Name: p.Name, Owner: p.Owner, LeaseID: id, Slot: p.Slot, FencingToken: p.Token, Limit: int64(p.Limit), TTLMs: ms(p.TTL)})
			return exitOK
		}
		fmt.Fprintf(stdout, "%s: slot %d held by %q, token %d, ttl %s\n", p.Name, p.Slot, p.Owner, p.Token, p.TTL)
		return exitOK
	})
}

func semReleaseCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("semaphore release", semReleaseHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	id := leaseIDFlag(c.fs)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	if err := checkGivenLeaseID(*id); err != nil {
		return c.usageError(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		if err := cl.ReleaseSemaphore(ctx, pos[0], *id); err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(map[string]any{"name": pos[0], "released": true})
			return exitOK
		}
		fmt.Fprintf(stdout, "released a permit of %s\n", pos[0])
		return exitOK
	})
}

func semShowCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("semaphore show", semShowHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		s, err := cl.Semaphore(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(semaphoreOut(s))
			return exitOK
		}
		if len(s.Holders) == 0 {
			fmt.Fprintf(stdout, "%s: no permit held\n", s.Name)
			return exitOK
		}
		fmt.Fprintf(stdout, "%s: limit %d, %d held", s.Name, s.Limit, len(s.Holders))
		if s.Waiters > 0 {
			fmt.Fprintf(stdout, ", %d waiting", s.Waiters)
		}
		fmt.Fprintln(stdout)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SLOT\tOWNER\tTOKEN\tTTL\tREMAINING")
		for _, h := range s.Holders {
			rem := "-"
			if h.Remaining >= 0 {
				rem = h.Remaining.String()
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", h.Slot, h.Owner, h.Token, h.TTL, rem)
		}
		tw.Flush()
		return exitOK
	})
}

// semaphoreOut is GET /v1/semaphores/{name}'s shape of s.
func semaphoreOut(s *client.SemaphoreInfo) api.Semaphore {
	out := api.Semaphore{Name: s.Name, Limit: int64(s.Limit), Index: s.Index, Waiters: s.Waiters, Holders: []api.SemaphoreHolder{}}
	for _, h := range s.Holders {
		sh := api.SemaphoreHolder{Owner: h.Owner, Slot: h.Slot, FencingToken: h.Token, TTLMs: ms(h.TTL)}
		if h.Remaining >= 0 {
			r := ms(h.Remaining)
			sh.RemainingMs = &r
		}
		out.Holders = append(out.Holders, sh)
	}
	return out
}
