//go:build !raftlock_seeded_bugs

package raftnode

import (
	"context"

	"github.com/raftlock/raftlock/fsm"
)

// seededWaiterTimeoutRelease, seededRestoreLowersIndex,
// seededRestoreUnrecorded and seededTickOnlyWhenDue are false in every ordinary build: the seeded
// bugs' code is compiled out (see seeded_on.go).
const (
	seededWaiterTimeoutRelease = false
	seededRestoreLowersIndex   = false
	seededRestoreUnrecorded    = false
	seededTickOnlyWhenDue      = false
	seededWaiterLate           = false
)

// Nor waiter-late's delay or session-late's longer TTL.
func seededServeDelay()                 {}
func seededSessionTTL(cmd *fsm.Command) {}

// The crash points (seeded_on.go) do nothing in an ordinary build.
func seededArmRestoreCrash(bool) {}
func seededRestoreInstalled()    {}

// seededInstallBackup is never called in an ordinary build.
func (n *Node) seededInstallBackup(context.Context, BackupInfo, *fsm.Machine) error {
	panic("raftnode: seeded bug called in an ordinary build")
}
