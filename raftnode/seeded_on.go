//go:build raftlock_seeded_bugs

package raftnode

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// SeededBugEnv names the environment variable that switches a seeded bug on
// in a build with -tags raftlock_seeded_bugs. Such a build behaves correctly
// unless it is set; an ordinary build has no seeded bug at all.
const SeededBugEnv = "RAFTLOCK_SEEDED_BUG"

// seededWaiterTimeoutRelease reintroduces a known bug for the checker's
// seeded test: when a parked acquire's wait runs out while its grant is in
// flight, the grant is released and its OK still answered.
var seededWaiterTimeoutRelease = os.Getenv(SeededBugEnv) == "waiter-timeout-release"

// seededRestoreLowersIndex reintroduces the backup-restore bug fixed by
// appendMu: the restore reads the log's last index, raises
// every lock's index to it, and installs the backup later, while new
// commands go on landing in between; a lock written meanwhile then reads a
// lower index after the restore than one already acknowledged.
var seededRestoreLowersIndex = os.Getenv(SeededBugEnv) == "restore-lowers-index"

// seededRestoreWindow stands for the time a big backup took to prepare in
// a report of a big backup (100,000 locks): writes land between the index read
// and the install, as they did there, with the checker's small backups too.
const seededRestoreWindow = time.Second

// seededInstallBackup is installBackup as it was before the fix: no
// appendMu, no Barrier, and the install a while after the index is read.
func (n *Node) seededInstallBackup(ctx context.Context, info BackupInfo, m *fsm.Machine) error {
	m.PrepareRestore(max(info.Index, n.raft.LastIndex())+1, n.machine)
	time.Sleep(seededRestoreWindow)
	if err := n.restoreState(ctx, info, m); err != nil {
		return raftError("restore snapshot", err)
	}
	return nil
}

// seededRestoreUnrecorded reintroduces the bug the unconfirmed-restore record prevents: no
// unconfirmed-restore record is made (markUnconfirmed does nothing), so a
// node holding a backup restore the cluster never committed serves it, says
// ready, and takes the cluster's batches below the restore's index,
// applying them on top of it.
var seededRestoreUnrecorded = os.Getenv(SeededBugEnv) == "restore-unrecorded"

// seededTickOnlyWhenDue brings back the leader loop that wrote a tick only
// once a deadline fell due: while leases run far from their deadlines no
// entry moves the FSM clock, so a new leader counts from the last entry
// and a failover restarts every lease (up to a whole TTL late).
var seededTickOnlyWhenDue = os.Getenv(SeededBugEnv) == "tick-only-when-due"

// seededWaiterLate makes the leader serve a lock's parked acquires
// seededWaiterDelay late, whatever woke the queue (the lock freed, or a new
// waiter found it free): the lock stays free (promised to its waiters,
// refused to others) all that while.
var seededWaiterLate = os.Getenv(SeededBugEnv) == "waiter-late"

// seededWaiterDelay is how late waiter-late serves a freed lock's waiters:
// twice the checker's bound (m).
const seededWaiterDelay = 4 * time.Second

// seededServeDelay is waiter-late's delay before a queue is served, and
// nothing otherwise.
func seededServeDelay() {
	if seededWaiterLate {
		time.Sleep(seededWaiterDelay)
	}
}

// seededSessionLate makes every session last seededSessionExtra past its
// TTL: a create is written with the TTL asked plus that much, and renews
// keep it. The client is told nothing.
var seededSessionLate = os.Getenv(SeededBugEnv) == "session-late"

const seededSessionExtra = 3000 // ms

// seededSessionTTL is session-late's longer TTL on a session create.
func seededSessionTTL(cmd *fsm.Command) {
	if seededSessionLate && cmd.Op == fsm.OpSessionCreate && cmd.TTL > 0 {
		cmd.TTL += seededSessionExtra
	}
}

// CrashPointEnv names the environment variable that makes a test build
// kill itself at a named point, as kill -9 would there:
//
//   - "restore-installed": the leader, right after raft's user restore has
//     written the backup to the snapshot store and the FSM has taken it
//     (raftFSM.Restore), before raft sets its last log, returns to the
//     leader loop or appends the no-op that would replicate it. Followers
//     hear only heartbeats by then: the restore is on the leader alone.
const CrashPointEnv = "RAFTLOCK_CRASH_POINT"

var seededCrashRestoreInstalled = os.Getenv(CrashPointEnv) == "restore-installed"

// seededRestoreCrashArmed is set by installBackup around raft.Restore, so
// that only the leader's own user restore reaches the crash point (not a
// snapshot from the leader, nor the restore of a start).
var seededRestoreCrashArmed atomic.Bool

func seededArmRestoreCrash(on bool) {
	if seededCrashRestoreInstalled {
		seededRestoreCrashArmed.Store(on)
	}
}

// seededRestoreInstalled is the crash point "restore-installed": SIGKILL to
// itself, no cleanup, nothing flushed that raft has not written already.
func seededRestoreInstalled() {
	if !seededRestoreCrashArmed.Load() {
		return
	}
	fmt.Fprintf(os.Stderr, "raftnode: CRASH POINT %q reached: the backup is in raft's snapshot store and the FSM, not yet replicated; SIGKILL\n", "restore-installed")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process; nothing after it runs
}

func init() {
	if seededWaiterTimeoutRelease || seededRestoreLowersIndex || seededRestoreUnrecorded || seededTickOnlyWhenDue ||
		seededWaiterLate || seededSessionLate {
		fmt.Fprintf(os.Stderr, "raftnode: SEEDED BUG %q enabled (test build)\n", os.Getenv(SeededBugEnv))
	}
	if seededCrashRestoreInstalled {
		fmt.Fprintf(os.Stderr, "raftnode: CRASH POINT %q armed (test build)\n", os.Getenv(CrashPointEnv))
	}
}
