package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const acquireHelp = `Usage: raftlock acquire [flags] NAME

Takes lock NAME and prints its name, owner, fencing token, lease id and TTL.
The lease is not renewed after the command exits: renew it with
'raftlock renew' before the TTL runs out, or release it. To hold a lock while
a command runs, use 'raftlock exec'. The lease id is the secret that renews
and releases the lease: keep it out of logs.

--shared takes the lock in shared mode, together with other shared holders
(readers): an exclusive holder waits for all of them, and they for it. A
shared hold has a fencing token of its own and takes no --lock-delay.

--session-id takes the lock in a session (raftlock session create): the
lease has no TTL of its own and ends when the session ends, or is closed;
renew the session, not the lease. It takes the session's owner unless
--owner is given.

Exits 3 when another lease holds the lock (after --wait, if given), 6 when
the outcome is unknown (the lock may have been taken; that lease is released,
best effort): run it again with a --lease-id of your own to resend safely.

Examples:
  raftlock acquire --ttl 30s --owner nightly-report reports/daily
  lease=$(raftlock acquire --json orders/89041 | jq -r .lease_id)
  raftlock acquire --wait 1m orders/89041     # wait up to a minute for it
  raftlock acquire --shared --ttl 1m schema/orders
  raftlock acquire --session-id "$sid" orders/89041
`

const renewHelp = `Usage: raftlock renew --lease-id ID [flags] NAME

Renews the lease ID on lock NAME for another TTL (the lease's own TTL unless
--ttl is given) and prints the lock. The fencing token stays the same.
The lease id may come from RAFTLOCK_LEASE_ID instead, which keeps it out of
the process list.

Exits 4 when that lease no longer holds the lock (it expired or was released),
6 when the outcome is unknown (the renewal may have been applied): run it again.

Example:
  RAFTLOCK_LEASE_ID=$lease raftlock renew orders/89041
`

const releaseHelp = `Usage: raftlock release --lease-id ID [flags] NAME
       raftlock release --force [flags] NAME

Releases lock NAME held by lease ID. A release never frees another lease's
lock. The lease id may come from RAFTLOCK_LEASE_ID instead.

Exits 4 when that lease does not hold the lock, 6 when the outcome is unknown
(the release may have been applied): run it again; exit 4 then means the
lease holds the lock no more, by that release or by expiry.

--force (admin token) ends whatever lease holds NAME, as if it had expired:
its lock-delay, if it asked for one, starts (the holder may still be
writing), and the holder's next renew fails with not_holder. It prints the
lease it ended, or that no lease held the lock (free, or in its lock-delay:
exit 0 either way). It needs every node at command_version 3
(raftlock cluster status); until then the leader refuses it
(not_supported_yet): this command retries for a few seconds, within
--timeout, then exits 5, with nothing applied.

Example:
  RAFTLOCK_LEASE_ID=$lease raftlock release orders/89041
  raftlock release --force orders/89041
`

// acquireFlags are the flags of acquire and exec (and elect, without
// --shared and --session-id).
type acquireFlags struct {
	ttl, wait, lockDelay time.Duration
	owner, leaseID       string
	shared               bool
	sessionID            string
	// session is the session the lease was taken in (--session-id), kept
	// alive by this process until detachSession.
	session *client.Session
}

// addAcquireFlags adds the flags of a lock acquire; lockCmd (acquire and
// exec, not elect) adds --shared and --session-id.
func addAcquireFlags(fs *flag.FlagSet, lockCmd bool) *acquireFlags {
	a := &acquireFlags{}
	if lockCmd {
		fs.BoolVar(&a.shared, "shared", false, "hold the lock shared, together with other shared holders (no --lock-delay)")
		fs.StringVar(&a.sessionID, "session-id", "", "take the lock in this session (raftlock session create): no TTL of its own, it ends with the session (no --ttl, --lock-delay)")
	}
	fs.DurationVar(&a.ttl, "ttl", client.DefaultTTL, "lease time to live, 500ms to 1h")
	fs.StringVar(&a.owner, "owner", defaultOwner(), "who holds the lock, as others see it")
	fs.DurationVar(&a.wait, "wait", 0, "wait up to this long while another lease holds the lock (0: fail at once)")
	fs.DurationVar(&a.lockDelay, "lock-delay", 0, "if the lease expires (not on release), keep the lock from everyone this long")
	fs.StringVar(&a.leaseID, "lease-id", "", "use this lease id (16-128 chars of [A-Za-z0-9_-]); resending an acquire with it is idempotent")
	return a
}

// check refuses flags the API would refuse; given are the flags given on
// the command line.
func (a *acquireFlags) check(given map[string]bool) error {
	if a.sessionID != "" {
		switch {
		case !api.ValidLeaseID(a.sessionID):
			return errors.New("--session-id: must be " + api.LeaseIDRule)
		case given["ttl"] || given["lock-delay"]:
			return errors.New("--session-id: the lease takes its session's TTL and lock-delay; give no --ttl or --lock-delay")
		}
		if !given["owner"] && a.owner == defaultOwner() {
			a.owner = "" // the session's owner
		}
		a.ttl, a.lockDelay = 0, 0
		if a.wait < 0 {
			return errors.New("--wait must not be negative")
		}
		return checkLeaseID(a.leaseID)
	}
	if err := checkTTL("ttl", a.ttl, false); err != nil {
		return err
	}
	if err := checkLockDelay(a.lockDelay); err != nil {
		return err
	}
	switch {
	case a.wait < 0:
		return errors.New("--wait must not be negative")
	case a.shared && a.lockDelay > 0:
		return errors.New("--lock-delay is for exclusive locks only")
	}
	return checkLeaseID(a.leaseID)
}

// acquire takes the lock, exclusive or (--shared) shared: at once (bounded
// by --timeout) without --wait, else waiting up to --wait.
// Cancelling parent stops a wait.
func (a *acquireFlags) acquire(parent context.Context, cl *client.Client, cn *conn, name string) (lease *client.Lease, err error) {
	opts := client.AcquireOptions{TTL: a.ttl, Owner: a.owner, LockDelay: a.lockDelay, LeaseID: a.leaseID, Shared: a.shared}
	try, wait := cl.TryAcquire, cl.Acquire
	if a.sessionID != "" {
		actx, cancel := context.WithTimeout(parent, cn.timeout)
		sess, err := cl.AttachSession(actx, a.sessionID)
		cancel()
		if err != nil {
			return nil, err
		}
		a.session = sess
		defer func() {
			if err != nil {
				a.detachSession()
			}
		}()
		try, wait = sess.TryAcquire, sess.Acquire
	}
	if a.wait == 0 {
		ctx, cancel := context.WithTimeout(parent, cn.timeout)
		defer cancel()
		return try(ctx, name, opts)
	}
	opts.Wait = min(a.wait, client.MaxWaitRound)
	ctx, cancel := context.WithTimeout(parent, a.wait)
	defer cancel()
	lease, err = wait(ctx, name, opts)
	if err != nil && !errors.Is(err, client.ErrHeld) && ctx.Err() != nil && parent.Err() == nil {
		// The server's "held" answer to the last round of waiting can arrive
		// just after --wait ends, leaving only a deadline error: ask who
		// holds the lock, so that a held lock still exits 3.
		gctx, gcancel := context.WithTimeout(parent, cn.timeout)
		defer gcancel()
		if info, gerr := cl.Get(gctx, name, false); gerr == nil && info.Held {
			return nil, &client.HeldError{
				APIError: client.APIError{Status: http.StatusConflict, Code: client.CodeHeld, Message: "still held after --wait"},
				Name:     name, Owner: info.Owner, Token: info.Token, Holders: info.Holders,
			}
		}
	}
	return lease, err
}

// detachSession stops keeping the --session-id session alive, leaving it
// (and the lease taken in it) to whoever else renews it.
func (a *acquireFlags) detachSession() {
	if a.session != nil {
		a.session.Detach()
	}
}

// leaseOut is what acquire prints with --json: the API's acquire answer.
type leaseOut = api.Lease

func acquireCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("acquire", acquireHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	a := addAcquireFlags(c.fs, true)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	if err := a.check(c.given); err != nil {
		return c.usageError(err)
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	defer cl.Close()
	lease, err := a.acquire(context.Background(), cl, c.conn, pos[0])
	if err != nil {
		return c.fail(err)
	}
	// The lock outlives this process: stop renewing without releasing.
	lease.Detach()
	a.detachSession()
	out := leaseOut{Name: lease.Name(), Owner: lease.Owner(), LeaseID: lease.LeaseID(), FencingToken: lease.Token(), TTLMs: ms(lease.TTL()), SessionID: a.sessionID}
	if lease.Shared() {
		out.Mode = api.ModeShared
	}
	if c.conn.json {
		c.printJSON(out)
		return exitOK
	}
	fmt.Fprintf(stdout, "name:      %s\nowner:     %s\n", out.Name, out.Owner)
	if out.Mode != "" {
		fmt.Fprintf(stdout, "mode:      %s\n", out.Mode)
	}
	fmt.Fprintf(stdout, "token:     %d\nlease_id:  %s\nttl:       %s\n", out.FencingToken, out.LeaseID, lease.TTL())
	if out.SessionID != "" {
		fmt.Fprintln(stdout, "session:   the lease ends with its session: renew the session, not the lease")
	}
	return exitOK
}

// leaseIDFlag adds --lease-id for renew and release.
func leaseIDFlag(fs *flag.FlagSet) *string {
	return fs.String("lease-id", "", "the lease's id, as acquire printed it (or RAFTLOCK_LEASE_ID)")
}

func checkGivenLeaseID(id string) error {
	if id == "" {
		return errors.New("--lease-id (or RAFTLOCK_LEASE_ID) is required")
	}
	return checkLeaseID(id)
}

// parseRenew reads what renew and semaphore renew share: NAME, the lease
// id and --ttl (0 keeps the lease's or permit's TTL). When ok is false, exit with code.
func parseRenew(c *cli, args []string, environ env, what string) (name, id string, ttl time.Duration, code int, ok bool) {
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	idFlag := leaseIDFlag(c.fs)
	ttlFlag := c.fs.Duration("ttl", 0, "new time to live (0: keep the "+what+"'s TTL)")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return "", "", 0, code, false
	}
	if err := checkGivenLeaseID(*idFlag); err != nil {
		return "", "", 0, c.usageError(err), false
	}
	if err := checkTTL("ttl", *ttlFlag, true); err != nil {
		return "", "", 0, c.usageError(err), false
	}
	return pos[0], *idFlag, *ttlFlag, 0, true
}

func renewCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("renew", renewHelp, stdout, stderr)
	name, id, ttl, code, ok := parseRenew(c, args, environ, "lease")
	if !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		info, err := cl.Renew(ctx, name, id, ttl)
		if err != nil {
			return c.fail(err)
		}
		printLock(c, info)
		return exitOK
	})
}

func releaseCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("release", releaseHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	id := leaseIDFlag(c.fs)
	force := c.fs.Bool("force", false, "end whatever lease holds the lock (admin token; no --lease-id)")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	if *force {
		if *id != "" {
			return c.usageError(errors.New("--force ends whatever lease holds the lock: give no --lease-id (nor RAFTLOCK_LEASE_ID)"))
		}
		return c.withClient(func(ctx context.Context, cl *client.Client) int {
			return forceRelease(ctx, c, cl, pos[0])
		})
	}
	if err := checkGivenLeaseID(*id); err != nil {
		return c.usageError(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		if err := cl.Release(ctx, pos[0], *id); err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(map[string]any{"name": pos[0], "released": true})
			return exitOK
		}
		fmt.Fprintf(stdout, "released %s\n", pos[0])
		return exitOK
	})
}

// forceRelease runs release --force NAME.
func forceRelease(ctx context.Context, c *cli, cl *client.Client, name string) int {
	r, err := cl.ForceRelease(ctx, name)
	if err != nil {
		return c.fail(err)
	}
	if c.conn.json {
		out := map[string]any{"name": name, "released": r.Ended}
		if r.Ended {
			out["holder"] = map[string]any{"owner": r.Owner, "fencing_token": r.Token}
		}
		c.printJSON(out)
		return exitOK
	}
	if !r.Ended {
		fmt.Fprintf(c.stdout, "no lease held %s (free, or in its lock-delay): nothing released\n", name)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "force-released %s: ended the lease of %q (fencing token %d)\n", name, r.Owner, r.Token)
	return exitOK
}
