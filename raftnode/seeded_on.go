//go:build raftlock_seeded_bugs

package raftnode

import (
	"fmt"
	"os"
)

// SeededBugEnv names the environment variable that switches a seeded bug on
// in a build with -tags raftlock_seeded_bugs. Such a build behaves correctly
// unless it is set; an ordinary build has no seeded bug at all.
const SeededBugEnv = "RAFTLOCK_SEEDED_BUG"

// seededWaiterTimeoutRelease reintroduces issue 12's bug for the checker's
// seeded test: when a parked acquire's wait runs out while its grant is in
// flight, the grant is released and its OK still answered.
var seededWaiterTimeoutRelease = os.Getenv(SeededBugEnv) == "waiter-timeout-release"

func init() {
	if seededWaiterTimeoutRelease {
		fmt.Fprintf(os.Stderr, "raftnode: SEEDED BUG %q enabled (test build)\n", os.Getenv(SeededBugEnv))
	}
}
