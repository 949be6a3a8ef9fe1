//go:build !raftlock_seeded_bugs

package proxy

import "fmt"

// SeededBugs lists the bugs this build can seed: none.
var SeededBugs []string

// Lookup refuses: seeded bugs exist only in a test build.
func Lookup(name string) (Bug, error) {
	return nil, fmt.Errorf("seeded bug %q: this build has none (build with -tags raftlock_seeded_bugs)", name)
}

// ServerSide reports whether the named bug lives in the server: in this build
// none does, and Lookup refuses every name.
func ServerSide(string) bool { return false }
