package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/raftnode"
)

const recoverHelp = `Usage: raftlock recover --data-dir DIR --peers id=raft_addr,... [flags]

For a cluster that lost a quorum of its nodes for good: rewrites the Raft
configuration in the data dir of a STOPPED surviving node, so that the
survivors start again as a smaller cluster of exactly --peers.

  1. Stop every surviving node.
  2. Run 'raftlock recover' on each survivor with the same --peers (the
     survivors, each id=its Raft address).
  3. Start them again with 'raftlock serve' as before.

What it risks: writes that only the lost nodes had acknowledged are gone
(locks granted, renewed or released there may come back as they were before).
Never run it while a lost node may come back: it could elect its own leader
and grant a lock the recovered cluster also grants. Wipe or retire the lost
nodes' data dirs first.

Example (n1 survives of n1, n2, n3):
  raftlock recover --data-dir /var/lib/raftlock --peers n1=10.0.0.1:9001
`

func recoverCmd(args []string, stdout, stderr io.Writer, environ env) int {
	c := newCLI("recover", recoverHelp, stdout, stderr)
	var dataDir, peerList, logStore, logLevel string
	c.fs.StringVar(&dataDir, "data-dir", "", "data dir of the stopped node (required)")
	c.fs.StringVar(&peerList, "peers", "", "the new voters, id=raft_addr,... (required; the same on every survivor)")
	c.fs.StringVar(&logStore, "log-store", "", "the node's --log-store (wal or boltdb); default: wherever the data dir's log is")
	c.fs.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	if _, code, ok := c.parse(args, environ, 0, 0); !ok {
		return code
	}
	if dataDir == "" {
		return c.usageError(errors.New("--data-dir is required"))
	}
	peers, err := parsePeers(peerList)
	if err != nil {
		return c.usageError(err)
	}
	if len(peers) == 0 {
		return c.usageError(errors.New("--peers is required"))
	}
	if logStore != "" && !raftnode.ValidLogStore(logStore) {
		return c.usageError(fmt.Errorf("--log-store must be %s or %s, not %q", raftnode.LogStoreWAL, raftnode.LogStoreBoltDB, logStore))
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "raftlock", Level: hclog.LevelFromString(logLevel), Output: stderr})
	if err := raftnode.Recover(dataDir, logStore, peers, logger); err != nil {
		fmt.Fprintf(stderr, "raftlock recover: %s\n", strings.TrimPrefix(err.Error(), "recover: "))
		return exitError
	}
	ids := make([]string, 0, len(peers))
	for id, addr := range peers {
		ids = append(ids, id+"="+addr)
	}
	sort.Strings(ids)
	fmt.Fprintf(stdout, "recovered %s: its configuration is now %s; start the node with 'raftlock serve'\n", dataDir, strings.Join(ids, ","))
	return exitOK
}
