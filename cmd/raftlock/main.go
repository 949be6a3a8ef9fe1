// Command raftlock runs a raftlock node (`raftlock serve`) and talks to a
// cluster from the shell.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `raftlock: a distributed lock service with Raft-replicated leases and fencing tokens.

Usage:
  raftlock serve [flags]        run a node (raftlock serve --dev for one local node)

Run 'raftlock <command> --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes shared by every command.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "health":
		return health(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "raftlock: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
