package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/raftlock/raftlock/client"
)

const leaderHelp = `Usage: raftlock leader [flags] NAME

Prints the value that the leader of election NAME published (raftlock elect
--value, or a client's Election), alone on a line. Exits 3 when nobody leads
(the lock is free). The answer is linearizable unless --stale lets any node
answer. --json prints the lock in the shape of GET /v1/locks/NAME.

Examples:
  raftlock leader service/leader
  addr=$(raftlock leader service/leader) || echo "no leader"
`

func leaderCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("leader", leaderHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	stale := c.fs.Bool("stale", false, "let any node answer from its own state (faster, may lag)")
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		st, err := client.NewElection(cl, pos[0], client.ElectionOptions{Stale: *stale}).Leader(ctx)
		switch {
		case errors.Is(err, client.ErrNoLeaderElected):
			if c.conn.json {
				c.printJSON(stateOut(st))
			}
			fmt.Fprintf(stderr, "raftlock leader: nobody leads %s\n", pos[0])
			return exitHeld
		case err != nil:
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(stateOut(st))
		} else {
			fmt.Fprintln(stdout, st.Value)
		}
		return exitOK
	})
}
