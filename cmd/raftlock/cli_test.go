package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe to write from a command's goroutines
// (exec copies the child's output) while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the raftlock command line in-process, as main would.
func runCLI(t *testing.T, environ env, args ...string) result {
	t.Helper()
	var stdout, stderr syncBuffer
	code := run(args, &stdout, &stderr, environ)
	r := result{code, stdout.String(), stderr.String()}
	t.Logf("raftlock %s -> %d\nstdout: %sstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// step is one row of a CLI table: a command line and what it must give.
type step struct {
	name   string
	env    func() env // added to the base environment
	args   func() []string
	code   int
	stdout string // regexp the stdout must match ("" : anything)
	stderr string // regexp the stderr must match ("" : must be empty on success)
	check  func(t *testing.T, r result)
}

func (s step) run(t *testing.T, base env) {
	t.Helper()
	environ := slices.Clone(base)
	if s.env != nil {
		environ = append(environ, s.env()...)
	}
	r := runCLI(t, environ, s.args()...)
	if r.code != s.code {
		t.Errorf("exit code %d, want %d (stderr %q)", r.code, s.code, r.stderr)
	}
	if s.stdout != "" && !regexp.MustCompile(s.stdout).MatchString(r.stdout) {
		t.Errorf("stdout %q does not match %q", r.stdout, s.stdout)
	}
	switch {
	case s.stderr != "":
		if !regexp.MustCompile(s.stderr).MatchString(r.stderr) {
			t.Errorf("stderr %q does not match %q", r.stderr, s.stderr)
		}
		if r.code != exitOK && strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("stderr has more than one line: %q", r.stderr)
		}
	case r.stderr != "":
		t.Errorf("unexpected stderr %q", r.stderr)
	}
	if s.check != nil && !t.Failed() {
		s.check(t, r)
	}
}

func args(a ...string) func() []string { return func() []string { return a } }

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("stdout is not JSON: %v: %q", err, s)
	}
}

// lockJSON decodes the API's shape of a lock.
type lockJSON struct {
	Name         string
	Held         bool
	Owner        string
	FencingToken uint64 `json:"fencing_token"`
	TTLMs        int64  `json:"ttl_ms"`
}

func endpointsEnv(eps []string) env { return env{"RAFTLOCK_ENDPOINTS=" + strings.Join(eps, ",")} }

// TestCLILocks walks a lock through its life on a real three-node cluster:
// acquire, held, renew, list, release, not holder, in text and JSON.
func TestCLILocks(t *testing.T) {
	cl := testenv.Start(t, 3)
	base := endpointsEnv(cl.Endpoints())
	leaderURL := cl.Leader().URL()

	var lease leaseOut // filled by the first acquire
	id := func() string { return lease.LeaseID }
	lazy := func(f func() []string) func() []string { return f }

	steps := []step{
		{name: "acquire json", args: args("acquire", "--json", "--ttl", "30s", "--owner", "worker-a", "orders/1"), stdout: `^\{.*\}\n$`,
			check: func(t *testing.T, r result) {
				decode(t, r.stdout, &lease)
				if lease.Name != "orders/1" || lease.Owner != "worker-a" || lease.FencingToken == 0 || lease.TTLMs != 30000 || len(lease.LeaseID) < 16 {
					t.Fatalf("acquire answered %+v", lease)
				}
			}},
		{name: "held, text", args: args("acquire", "--owner", "worker-b", "orders/1"), code: exitHeld,
			stderr: `^raftlock acquire: orders/1 is held by "worker-a" \(fencing token \d+\)\n$`},
		{name: "held, json", args: args("acquire", "--json", "--owner", "worker-b", "orders/1"), code: exitHeld, stderr: "is held by",
			check: func(t *testing.T, r result) {
				var e struct {
					Error  string
					Holder struct {
						Owner        string
						FencingToken uint64 `json:"fencing_token"`
					}
				}
				decode(t, r.stdout, &e)
				if e.Error != "held" || e.Holder.Owner != "worker-a" || e.Holder.FencingToken != lease.FencingToken {
					t.Fatalf("held error %+v, want holder worker-a with token %d", e, lease.FencingToken)
				}
			}},
		{name: "held after waiting", args: args("acquire", "--wait", "300ms", "orders/1"), code: exitHeld, stderr: "is held by"},
		{name: "get, text", args: args("get", "orders/1"),
			check: func(t *testing.T, r result) {
				want := `orders/1: held by "worker-a", token ` + formatUint(lease.FencingToken) + ", ttl 30s\n"
				if r.stdout != want {
					t.Fatalf("stdout %q, want %q", r.stdout, want)
				}
			}},
		{name: "get stale json from the leader", args: args("get", "--stale", "--json", "--endpoints", leaderURL, "orders/1"),
			check: func(t *testing.T, r result) {
				// The index is the lock's last change: its grant, whose
				// index is its fencing token.
				want := `{"name":"orders/1","held":true,"owner":"worker-a","fencing_token":` + formatUint(lease.FencingToken) + `,"ttl_ms":30000,"index":` + formatUint(lease.FencingToken) + `}` + "\n"
				if r.stdout != want {
					t.Fatalf("stdout %q, want %q", r.stdout, want)
				}
			}},
		{name: "renew with a new ttl, flags after the name", args: lazy(func() []string { return []string{"renew", "orders/1", "--lease-id", id(), "--ttl", "20s"} }),
			stdout: `^orders/1: held by "worker-a", token \d+, ttl 20s\n$`},
		{name: "renew, lease id from the environment, json", env: func() env { return env{"RAFTLOCK_LEASE_ID=" + id()} },
			args: args("renew", "--json", "orders/1"),
			check: func(t *testing.T, r result) {
				var o lockJSON
				decode(t, r.stdout, &o)
				if !o.Held || o.FencingToken != lease.FencingToken || o.TTLMs != 20000 {
					t.Fatalf("renew answered %+v, want token %d, ttl 20s", r.stdout, lease.FencingToken)
				}
			}},
		{name: "acquire a second lock, flags after the name", args: args("acquire", "orders/2", "--owner", "worker-c", "--ttl", "30s"),
			stdout: `(?s)^name:      orders/2\nowner:     worker-c\ntoken:     \d+\nlease_id:  [A-Za-z0-9_-]{22}\nttl:       30s\n$`},
		{name: "list, text", args: args("list", "orders/"),
			stdout: `^NAME +OWNER +TOKEN +TTL\norders/1 +worker-a +\d+ +20s\norders/2 +worker-c +\d+ +30s\n$`},
		{name: "list, json", args: args("list", "--json", "--prefix", "orders/"),
			check: func(t *testing.T, r result) {
				var l struct {
					Locks     []lockJSON
					Truncated bool
				}
				decode(t, r.stdout, &l)
				if len(l.Locks) != 2 || l.Locks[0].Name != "orders/1" || l.Locks[1].Name != "orders/2" || l.Truncated {
					t.Fatalf("list answered %s", r.stdout)
				}
			}},
		{name: "list, truncated", args: args("list", "--limit", "1", "orders/"), stdout: `^NAME.*\norders/1 .*\n$`,
			stderr: `^raftlock list: more locks match; showing the first 1 \(raise --limit\)\n$`},
		{name: "list, none", args: args("list", "--prefix", "nothing/"), stdout: "^no locks held\n$"},
		{name: "list, json, none", args: args("list", "--json", "nothing/"), stdout: `^\{"locks":\[\],"truncated":false,"index":\d+\}\n$`},
		{name: "release", args: lazy(func() []string { return []string{"release", "--lease-id", id(), "orders/1"} }), stdout: "^released orders/1\n$"},
		{name: "release again: not holder", args: lazy(func() []string { return []string{"release", "--lease-id", id(), "orders/1"} }),
			code: exitNotHolder, stderr: `^raftlock release: not holder: this lease does not hold the lock`},
		{name: "renew after release: not holder, json", args: lazy(func() []string { return []string{"renew", "--json", "--lease-id", id(), "orders/1"} }),
			code: exitNotHolder, stdout: `^\{"error":"not_holder","message":"not holder: .*"\}\n$`, stderr: "not holder"},
		{name: "get free, text", args: args("get", "orders/1"), stdout: "^orders/1: free\n$"},
		{name: "get free, json", args: args("get", "--json", "orders/1"), stdout: `^\{"name":"orders/1","held":false,"index":[1-9]\d*\}\n$`},
		{name: "acquire again: larger token", args: args("acquire", "--json", "orders/1"),
			check: func(t *testing.T, r result) {
				var again leaseOut
				decode(t, r.stdout, &again)
				if again.FencingToken <= lease.FencingToken {
					t.Fatalf("token %d after %d", again.FencingToken, lease.FencingToken)
				}
			}},
		{name: "acquire with a chosen lease id is idempotent", args: args("acquire", "--json", "--lease-id", "cli-test-lease-0000001", "orders/3"), stdout: `"lease_id":"cli-test-lease-0000001"`},
		{name: "  ... same token again", args: args("acquire", "--json", "--lease-id", "cli-test-lease-0000001", "orders/3"), stdout: `"lease_id":"cli-test-lease-0000001"`},
		{name: "command line beats RAFTLOCK_ENDPOINTS", env: func() env { return env{"RAFTLOCK_ENDPOINTS=http://127.0.0.1:1"} },
			args: lazy(func() []string { return []string{"get", "--endpoints", strings.Join(cl.Endpoints(), ","), "orders/2"} }), stdout: "held by"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
		if t.Failed() {
			t.FailNow() // later steps depend on earlier ones
		}
	}
	// The two acquires with one lease id got one token.
	var a, b leaseOut
	decode(t, runCLI(t, base, "acquire", "--json", "--lease-id", "cli-test-lease-0000001", "orders/3").stdout, &a)
	decode(t, runCLI(t, base, "acquire", "--json", "--lease-id", "cli-test-lease-0000001", "orders/3").stdout, &b)
	if a.FencingToken == 0 || a.FencingToken != b.FencingToken {
		t.Fatalf("tokens %d and %d for one lease id", a.FencingToken, b.FencingToken)
	}
}

func formatUint(u uint64) string { return strconv.FormatUint(u, 10) }

// TestCLIUsage: bad command lines exit 2 with one line on stderr, before
// anything is sent (no cluster runs here).
func TestCLIUsage(t *testing.T) {
	none := env{"RAFTLOCK_ENDPOINTS=http://127.0.0.1:1"}
	tests := []struct {
		env    env
		args   []string
		code   int
		stderr string
	}{
		{nil, []string{}, exitUsage, "^raftlock: a distributed lock service"},
		{nil, []string{"bogus"}, exitUsage, `^raftlock: unknown command "bogus"`},
		{nil, []string{"acquire"}, exitUsage, `^raftlock acquire: missing arguments: usage: raftlock acquire \[flags\] NAME \(see raftlock acquire --help\)\n$`},
		{nil, []string{"acquire", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{nil, []string{"acquire", "--bogus", "x"}, exitUsage, "flag provided but not defined: -bogus"},
		{nil, []string{"acquire", ""}, exitUsage, `^raftlock acquire: argument 1 is empty: usage: raftlock acquire \[flags\] NAME \(see raftlock acquire --help\)\n$`},
		{nil, []string{"exec", "", "--", "true"}, exitUsage, `^raftlock exec: argument 1 is empty: usage: raftlock exec`},
		{nil, []string{"cluster", "leave", ""}, exitUsage, `argument 1 is empty`},
		{nil, []string{"acquire", "--ttl", "-1s", "x"}, exitUsage, `--ttl must be between 500ms and 1h, not -1s \(see`},
		{nil, []string{"acquire", "--ttl", "100h", "x"}, exitUsage, `^raftlock acquire: --ttl must be between 500ms and 1h, not 100h \(see`},
		{nil, []string{"acquire", "--ttl", "10", "x"}, exitUsage, `^raftlock acquire: --ttl 10: missing unit, e\.g\. 10s`},
		{nil, []string{"acquire", "--ttl", "1d", "x"}, exitUsage, `--ttl 1d: unknown unit; use ms, s, m or h`},
		{nil, []string{"acquire", "--ttl", "soon", "x"}, exitUsage, `--ttl soon: not a duration; e\.g\. 500ms`},
		{env{"RAFTLOCK_TTL=10"}, []string{"acquire", "x"}, exitUsage, `RAFTLOCK_TTL="10": missing unit, e\.g\. 10s`},
		{nil, []string{"acquire", "--lock-delay", "2m", "x"}, exitUsage, `--lock-delay must be between 0 and 1m, not 2m`},
		{nil, []string{"renew", "--lease-id", "lease-A_0123456789", "--ttl", "100ms", "x"}, exitUsage, `--ttl must be between 500ms and 1h \(or 0 to keep the current TTL\), not 100ms`},
		{nil, []string{"session", "create", "--ttl", "2h"}, exitUsage, `--ttl must be between 500ms and 1h, not 2h`},
		{nil, []string{"semaphore", "acquire", "--limit", "2", "--ttl", "90m", "x"}, exitUsage, `--ttl must be between 500ms and 1h, not 1h30m`},
		{nil, []string{"watch", "--wait", "5", "x"}, exitUsage, `--wait 5: missing unit`},
		{nil, []string{"acquire", "--session-id", "short", "x"}, exitUsage, "--session-id: must be 16 to 128"},
		{nil, []string{"acquire", "--session-id", "sess-A_0123456789", "--ttl", "10s", "x"}, exitUsage, "give no --ttl or --lock-delay"},
		{nil, []string{"exec", "--session-id", "sess-A_0123456789", "--semaphore", "2", "x", "--", "true"}, exitUsage, "--session-id is for a lock"},
		{nil, []string{"acquire", "--lease-id", "short", "x"}, exitUsage, "--lease-id: must be 16 to 128"},
		{nil, []string{"acquire", "--endpoints", "ftp://h:1", "x"}, exitUsage, "bad endpoint"},
		{nil, []string{"acquire", "--timeout", "0s", "x"}, exitUsage, "--timeout must be positive"},
		{env{"RAFTLOCK_TTL=forever"}, []string{"acquire", "x"}, exitUsage, `RAFTLOCK_TTL="forever"`},
		{nil, []string{"renew", "x"}, exitUsage, `--lease-id \(or RAFTLOCK_LEASE_ID\) is required`},
		{nil, []string{"release", "x"}, exitUsage, `--lease-id \(or RAFTLOCK_LEASE_ID\) is required`},
		{nil, []string{"get"}, exitUsage, "missing arguments"},
		{nil, []string{"list", "a", "--prefix", "b"}, exitUsage, "not both"},
		{nil, []string{"list", "--limit", "-1"}, exitUsage, "--limit must not be negative"},
		{nil, []string{"cluster"}, exitUsage, "missing subcommand"},
		{nil, []string{"cluster", "bogus"}, exitUsage, `unknown subcommand "bogus"`},
		{nil, []string{"cluster", "join", "n4"}, exitUsage, "missing arguments"},
		{nil, []string{"cluster", "leave"}, exitUsage, "missing arguments"},
		{nil, []string{"cluster", "status", "x"}, exitUsage, `unexpected argument "x"`},
		{nil, []string{"health", "--live", "--ready"}, exitUsage, "exclude each other"},
		{nil, []string{"health", "--addr", "http://a:1", "--endpoints", "http://b:1"}, exitUsage, "exclude each other"},
		{nil, []string{"exec", "x"}, exitUsage, `missing the command to run \(raftlock exec NAME -- COMMAND\)`},
		{nil, []string{"elect", "x"}, exitUsage, `^raftlock elect: missing the command to run \(raftlock elect NAME -- COMMAND\)`},
		{nil, []string{"exec", "--", "true"}, exitUsage, "missing arguments"},
		{nil, []string{"exec", "x", "--kill-grace", "-1s", "--", "true"}, exitUsage, "--kill-grace must not be negative"},
		// Not usage errors, but decided before any request is sent.
		{nil, []string{"exec", "x", "--", "/nonexistent/command"}, 127, "/nonexistent/command"},
		{nil, []string{"health", "--timeout", "1s"}, exitError, `^raftlock health: http://127.0.0.1:1/readyz: `},
		{nil, []string{"get", "--timeout", "300ms", "x"}, exitUnavailable, `^raftlock get: cluster unavailable: `},
		// A file that cannot be written or read is this machine's error
		// (exit 1), found before the (unreachable) cluster is asked.
		{nil, []string{"snapshot", "save", "/no/such/dir/x"}, exitError, `^raftlock snapshot save: write /no/such/dir/x: no such file or directory\n$`},
		{nil, []string{"snapshot", "save", "/"}, exitError, `^raftlock snapshot save: write /: is a directory\n$`},
		{nil, []string{"snapshot", "inspect", "/no/such/file"}, exitError, `^raftlock snapshot inspect: open /no/such/file: no such file or directory\n$`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCLI(t, append(slices.Clone(none), tt.env...), tt.args...)
			if r.code != tt.code {
				t.Errorf("exit code %d, want %d", r.code, tt.code)
			}
			if !regexp.MustCompile(tt.stderr).MatchString(r.stderr) {
				t.Errorf("stderr %q does not match %q", r.stderr, tt.stderr)
			}
			if len(tt.args) > 0 && strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

// helpPages lists every command and subcommand: the commands table, and
// for a group (cluster, session, ...) the subcommands its help's usage line
// names, "<status|join|...>".
func helpPages(t *testing.T) [][]string {
	var pages [][]string
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		if name == "sem" { // semaphore's alias
			continue
		}
		pages = append(pages, []string{name})
		var stdout, stderr syncBuffer
		run([]string{name, "--help"}, &stdout, &stderr, nil)
		usage, _, _ := strings.Cut(stdout.String(), "\n")
		if m := regexp.MustCompile(`<([a-z|-]+)>`).FindStringSubmatch(usage); m != nil {
			for _, sub := range strings.Split(m[1], "|") {
				pages = append(pages, []string{name, sub})
			}
		}
	}
	if len(pages) < 30 {
		t.Fatalf("found %d commands and subcommands: the listing is broken", len(pages))
	}
	return pages
}

// TestCLIHelp: every command and subcommand answers --help on stdout with
// an example, and the top-level help documents the exit codes.
func TestCLIHelp(t *testing.T) {
	for _, cmd := range helpPages(t) {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			var stdout, stderr syncBuffer
			code := run(append(cmd, "--help"), &stdout, &stderr, nil)
			out := stdout.String() + stderr.String() // serve prints its help on stderr
			if code != exitOK || !strings.Contains(out, "Usage: raftlock "+strings.Join(cmd, " ")) || !strings.Contains(out, "Example") {
				t.Errorf("exit %d, help:\n%s", code, out)
			}
			if cmd[0] != "serve" && stderr.String() != "" {
				t.Errorf("stderr %q", stderr.String())
			}
		})
	}
	r := runCLI(t, nil, "--help")
	for _, want := range []string{"Exit codes:", "2  usage", "3  held", "4  not holder", "5  unavailable", "6  outcome unknown", "RAFTLOCK_ENDPOINTS"} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("raftlock --help lacks %q", want)
		}
	}
}

// TestCLICluster: membership, leadership transfer, health, and a request
// the server refuses as bad_request, on a real three-node cluster.
func TestCLICluster(t *testing.T) {
	cl := testenv.Start(t, 3)
	all := strings.Join(cl.Endpoints(), ",")
	base := endpointsEnv(cl.Endpoints())
	old := cl.Leader()
	// Start waits for a leader only; followers are ready once they have
	// caught up with it.
	eventually(t, base, "every node to be ready", func(r result) bool { return r.code == exitOK }, "health", "--endpoints", all)

	steps := []step{
		{name: "status, text", args: args("cluster", "status"),
			stdout: `^leader n\d, term \d+, commit index \d+, applied index \d+\nID +RAFT +HTTP +VOTER +LEADER\n(n\d +127\.0\.0\.1:\d+ +(127\.0\.0\.1:\d+|-) +yes +(yes|no)\n){3}$`},
		{name: "status, json", args: args("cluster", "status", "--json"), check: func(t *testing.T, r result) {
			if n, leader := members(t, r); n != 3 || leader != old.ID {
				t.Fatalf("status %s, want 3 nodes led by %s", r.stdout, old.ID)
			}
		}},
		{name: "health of every node", args: args("health", "--endpoints", all), stdout: `^(http://127\.0\.0\.1:\d+/readyz: ok\n){3}$`},
		{name: "check-state", args: args("cluster", "check-state"), stdout: `^state check at index [1-9]\d*: replicas compare as they apply it; see 'raftlock health'\n$`},
		{name: "health after the check", args: args("health", "--endpoints", all), stdout: `^(http://127\.0\.0\.1:\d+/readyz: ok\n){3}$`},
		{name: "health --live, --addr as the Dockerfile calls it", args: args("health", "--live", "--addr", cl.Nodes[0].URL()),
			stdout: `^http://127\.0\.0\.1:\d+/healthz: ok\n$`},
		{name: "health, json", args: args("health", "--json", "--ready"), stdout: `^\{"nodes":\[\{"endpoint":"http://127\.0\.0\.1:\d+/readyz","ok":true\}(,\{[^}]*"ok":true\}){2}\],"ok":true\}\n$`},
		{name: "health, one node down", args: args("health", "--timeout", "1s", "--endpoints", cl.Nodes[0].URL()+",http://127.0.0.1:1"),
			code: exitError, stdout: `^http://127\.0\.0\.1:\d+/readyz: ok\n$`, stderr: `^raftlock health: http://127\.0\.0\.1:1/readyz: .*connection refused`},
		// A name over 512 bytes: the server's rule, not checked before sending.
		{name: "bad_request is a usage error", args: args("acquire", strings.Repeat("n", 513)), code: exitUsage, stderr: `^raftlock acquire: name: `},
		// A voter that never answers: three of four still make a quorum.
		{name: "join", args: args("cluster", "join", "n9", "127.0.0.1:1", "127.0.0.1:2"), stdout: "^node n9 joined\n$"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
	// Each node answers status from its own view, which follows the
	// leader's by a moment.
	count := func(n int) func(r result) bool {
		return func(r result) bool { got, _ := members(t, r); return r.code == exitOK && got == n }
	}
	eventually(t, base, "four members", count(4), "cluster", "status", "--json")
	step{name: "leave", args: args("cluster", "leave", "--json", "n9"), stdout: `^\{"left":"n9"\}\n$`}.run(t, base)
	eventually(t, base, "three members", count(3), "cluster", "status", "--json")

	step{name: "transfer to the leader", args: args("cluster", "transfer", old.ID), stdout: `^` + old.ID + ` leads already; nothing changed\n$`}.run(t, base)
	step{name: "transfer", args: args("cluster", "transfer"), stdout: `^leadership transferred from ` + old.ID + ` to n\d\n$`}.run(t, base)
	if n := cl.WaitForNewLeader(old); n == old {
		t.Fatal("leadership did not move")
	}
}

// members decodes `cluster status --json`.
func members(t *testing.T, r result) (n int, leader string) {
	t.Helper()
	var cs client.ClusterStatus
	decode(t, r.stdout, &cs)
	return len(cs.Nodes), cs.Leader
}

// eventually runs a command line until ok holds for its result.
func eventually(t *testing.T, environ env, what string, ok func(result) bool, args ...string) {
	t.Helper()
	testenv.WaitFor(t, 15*time.Second, what, func() bool {
		var stdout, stderr syncBuffer
		code := run(args, &stdout, &stderr, environ)
		return ok(result{code, stdout.String(), stderr.String()})
	})
}

// TestCLINoLeader: with two of three nodes gone, commands give up after
// --timeout with exit 5 (6 for a write cut off in flight), and the survivor
// is not healthy.
func TestCLINoLeader(t *testing.T) {
	cl := testenv.Start(t, 3)
	leader := cl.Leader()
	follower := cl.Followers()
	survivor := follower[1]
	base := endpointsEnv([]string{survivor.URL()})
	if r := runCLI(t, base, "acquire", "orders/1"); r.code != exitOK {
		t.Fatalf("acquire before the loss: %d", r.code)
	}
	leader.Kill()
	follower[0].Kill()
	deadNodes := leader.URL() + "," + follower[0].URL()
	// Until its election timeout the survivor still believes in the old
	// leader; from then on it answers no_leader.
	eventually(t, base, "the survivor to report no_leader", func(r result) bool {
		return r.code == exitUnavailable && strings.Contains(r.stderr, "no leader: ")
	}, "get", "--timeout", "2s", "orders/1")
	steps := []step{
		{name: "acquire", args: args("acquire", "--timeout", "2s", "orders/2"), code: exitUnavailable, stderr: `^raftlock acquire: (no leader|cluster unavailable)`},
		{name: "get", args: args("get", "--timeout", "2s", "orders/1"), code: exitUnavailable, stderr: `^raftlock get: (no leader|cluster unavailable)`},
		{name: "list, json", args: args("list", "--json", "--timeout", "2s"), code: exitUnavailable, stdout: `^\{"error":"unavailable",`, stderr: "."},
		// The survivor answers no_leader only after its LeaderWait (1s): a
		// write cut off before that may, for all the client knows, have been
		// applied.
		{name: "release cut off by --timeout", args: args("release", "--timeout", "500ms", "--lease-id", "0123456789abcdef", "orders/1"),
			code: exitUnknown, stderr: "^raftlock release: outcome unknown: "},
		{name: "get cut off by --timeout", args: args("get", "--timeout", "500ms", "orders/1"), code: exitUnavailable, stderr: "^raftlock get: cluster unavailable"},
		{name: "only dead nodes", args: args("get", "--timeout", "1s", "--endpoints", deadNodes, "orders/1"), code: exitUnavailable,
			stderr: `^raftlock get: cluster unavailable: .*connection refused`},
		{name: "health of the survivor", args: args("health", "--timeout", "1s"), code: exitError, stderr: `^raftlock health: http://127\.0\.0\.1:\d+/readyz: not ready`},
		{name: "health --live of the survivor", args: args("health", "--live"), stdout: "healthz: ok"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
}

// TestCLIUnknownOutcome: a write the cluster cannot vouch for (504
// unknown_outcome until --timeout) exits 6 with its own message, never 5
// ("nothing applied") nor 4.
func TestCLIUnknownOutcome(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Raftlock-Node", "n1")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusGatewayTimeout)
		io.WriteString(w, `{"error":"unknown_outcome","message":"outcome unknown: leadership lost with the entry in flight"}`)
	}))
	defer srv.Close()
	base := endpointsEnv([]string{srv.URL})
	lease := []string{"--lease-id", "0123456789abcdef", "--timeout", "300ms"}
	steps := []step{
		{name: "release", args: args(append([]string{"release", "orders/1"}, lease...)...), code: exitUnknown,
			stderr: `^raftlock release: outcome unknown: the request may have been applied, or may still be; check with 'raftlock get' or resend it with the same --lease-id \(.*leadership lost`},
		{name: "renew, json", args: args(append([]string{"renew", "--json", "orders/1"}, lease...)...), code: exitUnknown,
			stdout: `^\{"error":"unknown_outcome","message":"outcome unknown: `, stderr: "outcome unknown"},
		{name: "acquire", args: args(append([]string{"acquire", "orders/1"}, lease...)...), code: exitUnknown, stderr: "^raftlock acquire: outcome unknown"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) < 3 {
		t.Errorf("requests %v", paths)
	}
}

// TestCLIClassify: every command maps the errors of sessions and
// semaphores to the exit codes of docs/API.md ("Command line"), as it maps
// held and not_holder; an unknown outcome stays 6 whatever it wraps.
func TestCLIClassify(t *testing.T) {
	apiErr := func(status int, code string) *client.APIError {
		return &client.APIError{Status: status, Code: code, Message: code}
	}
	full := &client.FullError{APIError: *apiErr(http.StatusConflict, client.CodeFull), Name: "pool",
		Holders: []client.Holder{{Owner: "a", Token: 5}, {Owner: "b", Slot: 1, Token: 6}}}
	mismatch := &client.LimitMismatchError{APIError: *apiErr(http.StatusConflict, client.CodeLimitMismatch), Name: "pool", Limit: 2}
	tests := []struct {
		name string
		err  error
		code int
		kind string
		msg  string // regexp
	}{
		{"full", full, exitHeld, client.CodeFull, `^semaphore pool is full: all 2 permits are held$`},
		{"full, wrapped", fmt.Errorf("acquire: %w", full), exitHeld, client.CodeFull, `is full`},
		{"limit mismatch", mismatch, exitError, client.CodeLimitMismatch, `^semaphore pool is held with limit 2 \(the first holder sets it\)$`},
		{"no session", apiErr(http.StatusNotFound, client.CodeNoSession), exitNotHolder, client.CodeNoSession, `^no session: it expired or was closed`},
		{"session full", apiErr(http.StatusConflict, client.CodeSessionFull), exitError, client.CodeSessionFull, `^the session holds 4096 leases, the most it may$`},
		{"no session, outcome unknown", fmt.Errorf("%w: %w", client.ErrUnknownOutcome, apiErr(http.StatusNotFound, client.CodeNoSession)),
			exitUnknown, client.CodeUnknownOutcome, `^outcome unknown`},
		{"held, as before", &client.HeldError{APIError: *apiErr(http.StatusConflict, client.CodeHeld), Name: "x", Owner: "o", Token: 3},
			exitHeld, client.CodeHeld, `^x is held by "o" \(fencing token 3\)$`},
		{"not holder, as before", apiErr(http.StatusConflict, client.CodeNotHolder), exitNotHolder, client.CodeNotHolder, `^not holder`},
		// The client gives up on it after a few seconds: exit 5, as when
		// --timeout is shorter.
		{"not supported yet", apiErr(http.StatusServiceUnavailable, api.CodeNotSupportedYet), exitUnavailable, "unavailable", `^not supported yet, nothing applied: not_supported_yet$`},
		{"not supported yet, --timeout first", fmt.Errorf("%w (last error: %w)", context.DeadlineExceeded, apiErr(http.StatusServiceUnavailable, api.CodeNotSupportedYet)),
			exitUnavailable, "unavailable", `^cluster unavailable: no answer in time; last error: not_supported_yet`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, kind, msg := classify(tt.err)
			if code != tt.code || kind != tt.kind || !regexp.MustCompile(tt.msg).MatchString(msg) {
				t.Errorf("classify = %d, %q, %q; want %d, %q, %q", code, kind, msg, tt.code, tt.kind, tt.msg)
			}
		})
	}
}

// On a single node a leadership transfer has nobody to go to: exit 1 with
// the server's reason, and the node still leads.
func TestCLITransferSingleNode(t *testing.T) {
	cl := testenv.Start(t, 1)
	base := endpointsEnv(cl.Endpoints())
	eventually(t, base, "a leader", func(r result) bool { return r.code == exitOK }, "health")
	step{name: "transfer", args: args("cluster", "transfer"), code: exitError, stderr: `^raftlock cluster transfer: .*no other voter to hand leadership to: n1 is the only voter; nothing changed`}.run(t, base)
	if id, _ := cl.Nodes[0].Leader(); id != "n1" {
		t.Errorf("leader %q after a refused transfer, want n1", id)
	}
}
