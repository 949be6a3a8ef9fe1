package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/raftlock/raftlock/client"
)

const clusterHelp = `Usage: raftlock cluster <status|join|leave|transfer|check-state> [flags] [ARGS]

  status                       leader, term, indexes and members
  join ID RAFT_ADDR [HTTP_ADDR] add a node (started with --join or empty): a non-voter,
                               promoted to voter by the leader once it has caught up
  leave ID                     remove a node
  transfer [ID]                hand leadership to node ID, or to any other voter
  check-state                  compare every replica's state with the leader's now

Run 'raftlock cluster <subcommand> --help' for its flags.

Examples:
  raftlock cluster status
  raftlock cluster transfer n2
`

const clusterStatusHelp = `Usage: raftlock cluster status [flags]

Shows the cluster as the first reachable node sees it: leader, term, commit
and applied index, and each member's addresses.

Example:
  raftlock cluster status --endpoints http://127.0.0.1:8001,http://127.0.0.1:8002
`

const clusterJoinHelp = `Usage: raftlock cluster join [flags] ID RAFT_ADDR [HTTP_ADDR]

Adds node ID, reachable for Raft at RAFT_ADDR (and for HTTP at HTTP_ADDR), to
the cluster as a non-voter; the leader promotes it to voter once it answers at
HTTP_ADDR as itself, follows the leader, and is within 256 entries of its log.
A join that would replace a live member, or leave fewer healthy voters than a
quorum, is refused (409 unsafe_change). The node must be running with an empty
data dir.

Example:
  raftlock cluster join n4 10.0.0.4:9001 10.0.0.4:8001
`

const clusterLeaveHelp = `Usage: raftlock cluster leave [flags] ID

Removes node ID from the cluster (it stops counting towards the quorum).

Example:
  raftlock cluster leave n4
`

const clusterTransferHelp = `Usage: raftlock cluster transfer [flags] [ID]

Hands leadership to node ID, or to any other voter, and returns once another
node leads. Useful before taking the leader down for maintenance. ID naming
the node that leads changes nothing (exit 0, and says so); with no other
voter to take over (a single node) it exits 1 and changes nothing.

Examples:
  raftlock cluster transfer n2
  raftlock cluster transfer          # to the most up-to-date other voter
`

const clusterCheckStateHelp = `Usage: raftlock cluster check-state [flags]

Asks the leader to compare every replica's state with its own, now (the
leader also does so every --state-check-interval). Prints the index at which
each replica hashed its state. A replica whose state differs says so in its
log, reports not ready on /readyz, and answers 503 state_diverged; run
'raftlock health' on every node to see which. Needs an admin token.

Example:
  raftlock cluster check-state
`

func clusterCmd(args []string, stdout, stderr io.Writer, environ env) int {
	subs := map[string]command{
		"status":      clusterStatusCmd,
		"join":        clusterJoinCmd,
		"leave":       clusterLeaveCmd,
		"transfer":    clusterTransferCmd,
		"check-state": clusterCheckStateCmd,
	}
	return subcommands("cluster", clusterHelp, subs, args, stdout, stderr, environ)
}

func clusterStatusCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("cluster status", clusterStatusHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 10*time.Second, true)
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		cs, err := cl.Cluster(ctx)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			if cs.Nodes == nil {
				cs.Nodes = []client.Node{}
			}
			c.printJSON(cs)
			return exitOK
		}
		leader := cs.Leader
		if leader == "" {
			leader = "none"
		}
		fmt.Fprintf(stdout, "leader %s, term %d, commit index %d, applied index %d\n", leader, cs.Term, cs.CommitIndex, cs.AppliedIndex)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRAFT\tHTTP\tVOTER\tLEADER")
		for _, n := range cs.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, n.RaftAddr, orDash(n.HTTPAddr), yesNo(n.Voter), yesNo(n.Leader))
		}
		tw.Flush()
		return exitOK
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func clusterJoinCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("cluster join", clusterJoinHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 30*time.Second, true)
	pos, code, ok := c.parse(args, environ, 2, 3)
	if !ok {
		return code
	}
	httpAddr := ""
	if len(pos) == 3 {
		httpAddr = pos[2]
	}
	return c.clusterChange(func(cl *client.Client, ctx context.Context) error { return cl.Join(ctx, pos[0], pos[1], httpAddr) },
		map[string]any{"joined": pos[0]}, fmt.Sprintf("node %s joined", pos[0]))
}

func clusterLeaveCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("cluster leave", clusterLeaveHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 30*time.Second, true)
	pos, code, ok := c.parse(args, environ, 1, 1)
	if !ok {
		return code
	}
	return c.clusterChange(func(cl *client.Client, ctx context.Context) error { return cl.Leave(ctx, pos[0]) },
		map[string]any{"left": pos[0]}, fmt.Sprintf("node %s left", pos[0]))
}

// clusterChange runs one membership change and reports it.
func (c *cli) clusterChange(change func(*client.Client, context.Context) error, jsonOut any, text string) int {
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		if err := change(cl, ctx); err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(jsonOut)
			return exitOK
		}
		fmt.Fprintln(c.stdout, text)
		return exitOK
	})
}

func clusterTransferCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("cluster transfer", clusterTransferHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 30*time.Second, true)
	pos, code, ok := c.parse(args, environ, 0, 1)
	if !ok {
		return code
	}
	target := ""
	if len(pos) == 1 {
		target = pos[0]
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		old := ""
		if cs, err := cl.Cluster(ctx); err == nil {
			old = cs.Leader
		}
		leader, err := cl.TransferLeadership(ctx, target)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(map[string]any{"leader": leader, "previous_leader": old})
			return exitOK
		}
		if target != "" && leader == target && old == target {
			fmt.Fprintf(stdout, "%s leads already; nothing changed\n", target)
			return exitOK
		}
		if leader == "" {
			fmt.Fprintf(stdout, "leadership transferred from %s\n", old)
			return exitOK
		}
		fmt.Fprintf(stdout, "leadership transferred from %s to %s\n", old, leader)
		return exitOK
	})
}

func clusterCheckStateCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("cluster check-state", clusterCheckStateHelp, stdout, stderr)
	c.conn = addConnFlags(c.fs, 30*time.Second, true)
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *client.Client) int {
		index, err := cl.CheckState(ctx)
		if err != nil {
			return c.fail(err)
		}
		if c.conn.json {
			c.printJSON(map[string]any{"index": index})
			return exitOK
		}
		fmt.Fprintf(stdout, "state check at index %d: replicas compare as they apply it; see 'raftlock health'\n", index)
		return exitOK
	})
}
