package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// raftlock release --force on a three-node cluster with tokens: a
// read-write token may not, an admin token ends the holder's lease (which
// then cannot renew), and a second force release finds nothing to end.
func TestCLIForceRelease(t *testing.T) {
	cl := testenv.Start(t, 3, testenv.Options{Tokens: cliAdmin + " admin ops-admin\n" + cliRW + " read-write\n"})
	testenv.WaitFor(t, 15*time.Second, "the leader to write command format 3", func() bool {
		return cl.Leader().CommandVersion() >= 3
	})
	base := endpointsEnv(cl.Endpoints())
	withToken := func(tok string) func() env { return func() env { return env{"RAFTLOCK_TOKEN=" + tok} } }
	var lease leaseOut
	steps := []step{
		{name: "acquire", env: withToken(cliRW), args: args("acquire", "--json", "--ttl", "60s", "--lock-delay", "1s", "--owner", "worker-a", "force/1"),
			check: func(t *testing.T, r result) { decode(t, r.stdout, &lease) }},
		{name: "force with a read-write token", env: withToken(cliRW), args: args("release", "--force", "force/1"),
			code: exitError, stderr: `^raftlock release: forbidden: a force release needs an admin token`},
		{name: "force with a lease id", env: withToken(cliAdmin), args: func() []string { return []string{"release", "--force", "--lease-id", lease.LeaseID, "force/1"} },
			code: exitUsage, stderr: `--force ends whatever lease holds the lock: give no --lease-id`},
		{name: "force", env: withToken(cliAdmin), args: args("release", "--force", "force/1"),
			check: func(t *testing.T, r result) {
				want := "force-released force/1: ended the lease of \"worker-a\" (fencing token " + strconv.FormatUint(lease.FencingToken, 10) + ")\n"
				if r.stdout != want {
					t.Errorf("stdout %q, want %q", r.stdout, want)
				}
			}},
		{name: "the holder's renew", env: withToken(cliRW), args: func() []string { return []string{"renew", "--lease-id", lease.LeaseID, "force/1"} },
			code: exitNotHolder, stderr: `^raftlock renew: not holder`},
		{name: "force again, json", env: withToken(cliAdmin), args: args("release", "--force", "--json", "force/1"),
			stdout: `^\{"name":"force/1","released":false\}\n$`},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, base) }) {
			t.FailNow()
		}
	}
}

// While a member reads only command format 2 the leader refuses a force
// release; the CLI retries the 503 until --timeout and then says why.
func TestCLIForceReleaseBeforeFormat3(t *testing.T) {
	cl := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) {
		inner := cfg.FetchProgress
		cfg.FetchProgress = func(ctx context.Context, id, addr string) (raftnode.Progress, error) {
			p, err := inner(ctx, id, addr)
			p.CommandVersion = 2 // every member reads up to 2: the leader writes 2
			return p, err
		}
	}})
	testenv.WaitFor(t, 15*time.Second, "the leader to write command format 2", func() bool {
		return cl.Leader().CommandVersion() == 2
	})
	step{name: "force before format 3", args: args("release", "--force", "--timeout", "1s", "force/2"),
		code: exitUnavailable, stderr: `^raftlock release: cluster unavailable: .*not_supported_yet.*force release needs every node at command version 3; upgrade`,
	}.run(t, endpointsEnv(cl.Endpoints()))
}
