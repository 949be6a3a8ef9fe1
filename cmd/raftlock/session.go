package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

const sessionHelp = `Usage: raftlock session <create|renew|close|show> [flags] [ID]

A session ties many leases to one keepalive: leases taken with it have no TTL
of their own and end together when it expires (or is closed). Services make
them with the Go client (client.NewSession); these commands create one by
hand, and let an operator see and end one. 'raftlock acquire --session-id'
and 'raftlock exec --session-id' take a lock in it.

  create    create a session and print its id (a secret, like a lease id)
  renew     renew it for another TTL
  close     close it: every lease it holds is released at once
  show      its owner, TTL, time left and leases (never their lease ids)

The session id may come from RAFTLOCK_SESSION_ID instead of --session-id,
which keeps it out of the process list.

Exits 4 when the session has ended (expired or closed: no_session).

Examples:
  sid=$(raftlock session create --json --ttl 30s --owner ingest-7 | jq -r .session_id)
  RAFTLOCK_SESSION_ID=$sid raftlock session show
  raftlock acquire --session-id "$sid" orders/89041
  RAFTLOCK_SESSION_ID=$sid raftlock session close
`

const sessionCreateHelp = `Usage: raftlock session create [flags]

Creates a session and prints its id, owner, TTL and lock-delay. Nothing
renews it after the command exits: renew it with 'raftlock session renew'
before the TTL runs out, or close it. Giving --session-id makes the create
safe to resend (the same owner refreshes the session).

Example:
  raftlock session create --ttl 30s --owner ingest-7
`

const sessionRenewHelp = `Usage: raftlock session renew --session-id ID [flags]

Renews the session for another TTL (its own unless --ttl is given) and
prints it. Exits 4 when the session has ended.

Examples:
  RAFTLOCK_SESSION_ID=$sid raftlock session renew
  RAFTLOCK_SESSION_ID=$sid raftlock session renew --ttl 1m
`

const sessionCloseHelp = `Usage: raftlock session close --session-id ID [flags]

Closes the session: every lock and permit it holds is released at once
(no lock-delay), and prints how many. Exits 4 when the session had ended.

Example:
  RAFTLOCK_SESSION_ID=$sid raftlock session close
`

const sessionShowHelp = `Usage: raftlock session show [flags] [ID]

Shows the session (ID, or --session-id): owner, TTL, lock-delay, time left
and its leases: locks, then semaphore permits, with their fencing tokens.
Exits 4 when the session has ended.

Examples:
  RAFTLOCK_SESSION_ID=$sid raftlock session show
  raftlock session show --json "$sid" | jq '.leases | length'
`

func sessionCmd(args []string, stdout, stderr io.Writer, environ env) int {
	subs := map[string]command{
		"create": sessionCreateCmd,
		"renew":  sessionRenewCmd,
		"close":  sessionCloseCmd,
		"show":   sessionShowCmd,
	}
	return subcommands("session", sessionHelp, subs, args, stdout, stderr, environ)
}

// sessionIDFlag adds --session-id.
func sessionIDFlag(c *cli) *string {
	return c.fs.String("session-id", "", "the session's id, as create printed it (or RAFTLOCK_SESSION_ID)")
}

func checkSessionID(id string) error {
	if id == "" {
		return errors.New("--session-id (or RAFTLOCK_SESSION_ID) is required")
	}
	if !api.ValidLeaseID(id) {
		return errors.New("--session-id: must be " + api.LeaseIDRule)
	}
	return nil
}

// sessionOut is a session as create and renew print it with --json.
func sessionOut(s *client.SessionInfo) api.Session {
	return api.Session{SessionID: s.ID, Owner: s.Owner, TTLMs: ms(s.TTL), LockDelayMs: ms(s.LockDelay)}
}

func printSession(c *cli, s *client.SessionInfo) {
	if c.conn.json {
		c.printJSON(sessionOut(s))
		return
	}
	fmt.Fprintf(c.stdout, "session_id:  %s\nowner:       %s\nttl:         %s\nlock_delay:  %s\n", s.ID, s.Owner, s.TTL, s.LockDelay)
}

func sessionCreateCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("session create", sessionCreateHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	ttl := c.fs.Duration("ttl", client.DefaultTTL, "session time to live, 500ms to 1h")
	owner := c.fs.String("owner", defaultOwner(), "who holds the session's leases, as others see it")
	lockDelay := c.fs.Duration("lock-delay", 0, "if the session expires (not on close), keep its exclusive locks from everyone this long")
	id := sessionIDFlag(c)
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	if err := checkTTL("ttl", *ttl, false); err != nil {
		return c.usageError(err)
	}
	if err := checkLockDelay(*lockDelay); err != nil {
		return c.usageError(err)
	}
	switch {
	case *id != "" && !api.ValidLeaseID(*id):
		return c.usageError(errors.New("--session-id: must be " + api.LeaseIDRule))
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		s, err := cl.CreateSession(ctx, client.SessionOptions{Owner: *owner, TTL: *ttl, LockDelay: *lockDelay, ID: *id})
		if err != nil {
			return c.fail(err)
		}
		printSession(c, s)
		return exitOK
	})
}

func sessionRenewCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("session renew", sessionRenewHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	id := sessionIDFlag(c)
	ttl := c.fs.Duration("ttl", 0, "new time to live (0: keep the session's TTL)")
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	if err := checkSessionID(*id); err != nil {
		return c.usageError(err)
	}
	if err := checkTTL("ttl", *ttl, true); err != nil {
		return c.usageError(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		s, err := cl.RenewSession(ctx, *id, *ttl)
		if err != nil {
			return c.fail(err)
		}
		printSession(c, s)
		return exitOK
	})
}

func sessionCloseCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("session close", sessionCloseHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	id := sessionIDFlag(c)
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	if err := checkSessionID(*id); err != nil {
		return c.usageError(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		n, err := cl.CloseSession(ctx, *id)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(api.SessionClosed{Closed: true, Released: n})
			return exitOK
		}
		fmt.Fprintf(stdout, "closed the session; released %d leases\n", n)
		return exitOK
	})
}

func sessionShowCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("session show", sessionShowHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	id := sessionIDFlag(c)
	pos, code, ok := c.parse(args, environ, 0, 1)
	if !ok {
		return code
	}
	if len(pos) == 1 {
		if c.given["session-id"] {
			return c.usageError(errors.New("give the session id once: as ID or --session-id"))
		}
		*id = pos[0]
	}
	if err := checkSessionID(*id); err != nil {
		return c.usageError(err)
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		s, err := cl.Session(ctx, *id)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(sessionInfoOut(*id, s))
			return exitOK
		}
		fmt.Fprintf(stdout, "owner:       %s\nttl:         %s\nlock_delay:  %s\n", s.Owner, s.TTL, s.LockDelay)
		if s.Remaining >= 0 {
			fmt.Fprintf(stdout, "remaining:   %s\n", s.Remaining)
		}
		fmt.Fprintf(stdout, "leases:      %d\n", len(s.Leases))
		for _, l := range s.Leases {
			switch {
			case l.Kind == api.LeaseKindSemaphore:
				fmt.Fprintf(stdout, "  semaphore  %s  slot %d  token %d\n", l.Name, l.Slot, l.Token)
			case l.Shared:
				fmt.Fprintf(stdout, "  lock       %s  shared  token %d\n", l.Name, l.Token)
			default:
				fmt.Fprintf(stdout, "  lock       %s  token %d\n", l.Name, l.Token)
			}
		}
		return exitOK
	})
}

// sessionInfoOut is GET /v1/sessions/{id}'s shape of s.
func sessionInfoOut(id string, s *client.SessionInfo) api.SessionInfo {
	out := api.SessionInfo{SessionID: id, Owner: s.Owner, TTLMs: ms(s.TTL), LockDelayMs: ms(s.LockDelay), Index: s.Index, Leases: []api.SessionLease{}}
	if s.Remaining >= 0 {
		r := ms(s.Remaining)
		out.RemainingMs = &r
	}
	for _, l := range s.Leases {
		sl := api.SessionLease{Kind: l.Kind, Name: l.Name, FencingToken: l.Token}
		if l.Shared {
			sl.Mode = api.ModeShared
		}
		if l.Kind == api.LeaseKindSemaphore {
			slot := l.Slot
			sl.Slot = &slot
		}
		out.Leases = append(out.Leases, sl)
	}
	return out
}
