// Package internal holds packages private to raftlock; this test pins the
// layering between the public ones.
package internal

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/raftlock/raftlock/"

// deps returns, for each package matching pattern, the packages its non-test
// files import, directly or not.
func deps(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, pattern).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("go list %s: %s", pattern, msg)
	}
	m := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m
}

// violations lists "pkg imports dep" for every dependency of the packages
// matching pattern that starts with one of the forbidden prefixes.
func violations(t *testing.T, pattern string, forbidden ...string) []string {
	var bad []string
	for pkg, ds := range deps(t, pattern) {
		for _, d := range ds {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") || strings.HasPrefix(d, f+"-") {
					bad = append(bad, pkg+" imports "+d)
				}
			}
		}
	}
	return bad
}

func TestLayering(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	t.Run("api is the contract only", func(t *testing.T) {
		// Standard library only: a dependency here is one of every client.
		for pkg, ds := range deps(t, mod+"api") {
			for _, d := range ds {
				if strings.Contains(strings.SplitN(d, "/", 2)[0], ".") {
					t.Errorf("%s imports %s; api must use the standard library only", pkg, d)
				}
			}
		}
	})
	t.Run("client imports no server package", func(t *testing.T) {
		for _, v := range violations(t, mod+"client/...", mod+"fsm", mod+"raftnode", mod+"httpapi", mod+"internal/nodeapi") {
			t.Error(v)
		}
	})
	t.Run("nodeapi knows no Raft and no HTTP", func(t *testing.T) {
		for _, v := range violations(t, mod+"internal/nodeapi", "github.com/hashicorp/raft", mod+"raftnode", mod+"httpapi", "net/http") {
			t.Error(v)
		}
	})
	t.Run("httpapi knows no Raft", func(t *testing.T) {
		// The "-" in violations also catches raft-boltdb and raft-wal.
		bad := violations(t, mod+"httpapi", "github.com/hashicorp/raft", mod+"raftnode")
		for _, v := range bad {
			t.Error(v)
		}
	})
	t.Run("logstore knows no node", func(t *testing.T) {
		// The log stores stand apart from the consensus wiring, as raft-wal
		// and raft-boltdb do from hashicorp/raft. Their one import from
		// raftlock is internal/nodeapi, for the ErrStorage that the HTTP
		// layer maps.
		for _, v := range violations(t, mod+"raftnode/logstore", mod+"raftnode", mod+"httpapi", mod+"client") {
			t.Error(v)
		}
	})
	t.Run("raftnode makes no HTTP calls", func(t *testing.T) {
		// Joins, announces and progress go through functions in its Config
		// (httpapi.Joiner, httpapi.ProgressFetcher). net/http still comes in
		// below the Prometheus and go-metrics libraries, so this checks
		// raftnode's own imports only.
		out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"raftnode/...").Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			for _, d := range f[1:] {
				if d == "net/http" || strings.HasPrefix(d, "net/http/") {
					t.Errorf("%s imports %s", f[0], d)
				}
			}
		}
	})
	t.Run("only tests import the test harnesses", func(t *testing.T) {
		// internal/testenv and its contract suite are for tests; of its
		// packages only procs, which imports no testing, may be built into
		// a binary (the checker runs its clusters with it).
		for _, v := range violations(t, mod+"...", mod+"internal/testenv") {
			if strings.HasPrefix(v, mod+"internal/testenv") || strings.HasSuffix(v, " imports "+mod+"internal/testenv/procs") {
				continue
			}
			t.Error(v)
		}
	})
	t.Run("raftnode imports no httpapi", func(t *testing.T) {
		// Its test helpers that serve the API live in internal/testenv.
		for _, v := range violations(t, mod+"raftnode/...", mod+"httpapi") {
			t.Error(v)
		}
	})
}
