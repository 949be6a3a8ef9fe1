// Command raftlock runs a raftlock node (`raftlock serve`) and talks to a
// cluster from the shell: take, renew, release and inspect locks, run a
// command while holding one (`raftlock exec`), manage membership and check
// health. Each command is a function of its arguments, output streams and
// environment that returns the exit code; only main calls os.Exit.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit codes shared by every command. The usage text below is their
// documentation; keep both in step.
const (
	exitOK          = 0
	exitError       = 1 // anything not below
	exitUsage       = 2 // bad flags or arguments, or a request the server calls bad_request
	exitHeld        = 3 // the lock is held by another lease
	exitNotHolder   = 4 // the lease does not hold the lock (exec: the lease was lost)
	exitUnavailable = 5 // no leader, overloaded, not_supported_yet, or no node answered within --timeout
	exitUnknown     = 6 // the write may or may not have been applied (504 unknown_outcome)
)

const usage = `raftlock: a distributed lock service with Raft-replicated leases and fencing tokens.

Usage:
  raftlock serve [flags]                run a node (raftlock serve --dev for one local node)
  raftlock acquire [flags] NAME         take a lock; prints its fencing token and lease id
  raftlock renew --lease-id ID NAME     renew a lease taken with acquire
  raftlock release --lease-id ID NAME   release it
  raftlock get [--stale] NAME           who holds a lock
  raftlock list [PREFIX]                held locks
  raftlock exec [flags] NAME -- CMD...  run CMD while holding the lock, then release it
  raftlock elect [flags] --value V NAME -- CMD...  run CMD only while leading election NAME
  raftlock leader NAME                  the value the leader of NAME published (exit 3: nobody leads)
  raftlock watch [--prefix] NAME        print a lock's state at each change until interrupted
  raftlock session create|renew|close|show      many leases on one keepalive
  raftlock semaphore acquire|renew|release|show  permits of a fenced semaphore (also: sem)
  raftlock cluster status|join|leave|transfer
  raftlock health [--live]              exit 0 if the node is ready (container healthchecks)
  raftlock bench [flags]                load-test the cluster: cycles/s, latency, safety slips
  raftlock snapshot save|inspect|restore FILE   back up or restore the cluster's state
  raftlock recover --data-dir D --peers P       after losing a quorum: shrink a stopped node's cluster

Every command takes --endpoints (or RAFTLOCK_ENDPOINTS; comma-separated node
URLs, any node will do; default http://127.0.0.1:8001), --timeout and, where
it prints something, --json. Every flag also reads RAFTLOCK_<FLAG> from the
environment; the command line wins.
For a cluster with TLS and tokens: --ca FILE (RAFTLOCK_CA; endpoints then
default to https), --cert/--key for a client certificate, and the bearer
token in RAFTLOCK_TOKEN or --token-file FILE.

Exit codes:
  0  success
  1  any other error (also limit_mismatch and session_full)
  2  usage: bad flags or arguments (also a request the server rejects as bad_request)
  3  held: another lease holds the lock; full: every permit of the semaphore
     is held; leader: nobody leads
  4  not holder: the lease does not hold the lock (expired, released);
     exec: the lease was lost while the command ran, and the command was stopped;
     no_session: the session expired, was closed or never existed
  5  unavailable: no leader, overloaded, not_supported_yet (a node still runs
     an older build), or no node answered within --timeout; nothing was applied
  6  outcome unknown: the write may have been applied (or may still be) and
     --timeout ran out before it was certain; check with 'raftlock get', or
     resend it with the same --lease-id
  exec otherwise exits with the command's own code (128+N if signal N ended it,
  126 if it could not be run, 127 if it was not found); health exits 0 or 1.

Example:
  raftlock exec --ttl 10s orders/89041 -- ./charge.sh 89041

Run 'raftlock <command> --help' for a command's flags and examples.
`

// commands is the dispatch table.
var commands = map[string]command{
	"serve":   func(args []string, _, stderr io.Writer, _ env) int { return serve(args, stderr) },
	"acquire": acquireCmd,
	"renew":   renewCmd,
	"release": releaseCmd,
	"get":     getCmd,
	"list":    listCmd,
	"exec":    execCmd,
	"elect":   electCmd,
	"leader":  leaderCmd,
	"watch":   watchCmd,

	"session":   sessionCmd,
	"semaphore": semaphoreCmd,
	"sem":       semaphoreCmd,

	"cluster": clusterCmd,
	"health":  healthCmd,
	"bench":   benchCmd,

	"snapshot": snapshotCmd,
	"recover":  recoverCmd,
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Environ()))
}

func run(args []string, stdout, stderr io.Writer, environ env) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "raftlock: unknown command %q (see raftlock --help)\n", args[0])
		return exitUsage
	}
	return cmd(args[1:], stdout, stderr, environ)
}
