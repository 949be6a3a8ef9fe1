package main

import (
	"os/exec"
	"testing"
)

const faultclockPkg = "github.com/raftlock/raftlock/internal/faultclock"

// goList lists the packages this test's build of cmd/raftlock links, with
// the same build tags.
func goList(t *testing.T) string {
	t.Helper()
	args := []string{"list", "-deps"}
	if faultBuild {
		args = append(args, "-tags", "raftlock_faults")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return string(out)
}
