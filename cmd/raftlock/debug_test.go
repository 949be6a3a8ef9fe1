//go:build !raftlock_faults

package main

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/internal/testenv/procs"
)

// A release build has no clock faults: the faultclock package is not among
// its dependencies, no faultclock symbol is in a default-built binary, and
// the debug listener has no /debug/clock. clock_faults_test.go runs the same
// dependency check on a raftlock_faults build and finds it.
func TestReleaseBuildHasNoClockFaults(t *testing.T) {
	if deps := goList(t); strings.Contains(deps, faultclockPkg) {
		t.Fatalf("a default build depends on %s", faultclockPkg)
	}
	// go test strips its binaries, so nm needs the release build.
	bin, err := procs.Binary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%.500s", err, out)
	}
	if !strings.Contains(string(out), "raftnode.(*SystemClock).Now") {
		t.Fatal("go tool nm found none of the symbols it should: the check is blind")
	}
	if strings.Contains(string(out), "faultclock") {
		t.Fatal("a default build contains faultclock symbols")
	}

	ln := testenv.Listen(t)
	addr := ln.Addr().String()
	ln.Close()
	if err := serveDebug(addr, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	testenv.WaitFor(t, 5*time.Second, "the debug listener", func() bool {
		resp, err = http.Post("http://"+addr+"/debug/clock", "application/json", strings.NewReader(`{"rate":1.2}`))
		return err == nil
	})
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /debug/clock on a default build: %d, want 404", resp.StatusCode)
	}
}
