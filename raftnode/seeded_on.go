//go:build raftlock_seeded_bugs

package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

// SeededBugEnv names the environment variable that switches a seeded bug on
// in a build with -tags raftlock_seeded_bugs. Such a build behaves correctly
// unless it is set; an ordinary build has no seeded bug at all.
const SeededBugEnv = "RAFTLOCK_SEEDED_BUG"

// seededWaiterTimeoutRelease reintroduces issue 12's bug for the checker's
// seeded test: when a parked acquire's wait runs out while its grant is in
// flight, the grant is released and its OK still answered.
var seededWaiterTimeoutRelease = os.Getenv(SeededBugEnv) == "waiter-timeout-release"

// seededRestoreLowersIndex reintroduces the backup-restore bug fixed by
// appendMu (second review): the restore reads the log's last index, raises
// every lock's index to it, and installs the backup later, while new
// commands go on landing in between; a lock written meanwhile then reads a
// lower index after the restore than one already acknowledged.
var seededRestoreLowersIndex = os.Getenv(SeededBugEnv) == "restore-lowers-index"

// seededRestoreWindow stands for the time a big backup took to prepare in
// the review's report (100,000 locks): writes land between the index read
// and the install, as they did there, with the checker's small backups too.
const seededRestoreWindow = time.Second

// seededInstallBackup is installBackup as it was before the fix: no
// appendMu, no Barrier, and the install a while after the index is read.
func (n *Node) seededInstallBackup(ctx context.Context, info BackupInfo, snap []byte) error {
	snap, err := fsm.PrepareRestore(snap, max(info.Index, n.raft.LastIndex())+1)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadBackup, err)
	}
	time.Sleep(seededRestoreWindow)
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: info.Index, Term: info.Term, Size: int64(len(snap))}
	if err := n.raft.Restore(meta, bytes.NewReader(snap), n.timeoutFrom(ctx)); err != nil {
		return raftError("restore snapshot", err)
	}
	return nil
}

func init() {
	if seededWaiterTimeoutRelease || seededRestoreLowersIndex {
		fmt.Fprintf(os.Stderr, "raftnode: SEEDED BUG %q enabled (test build)\n", os.Getenv(SeededBugEnv))
	}
}
