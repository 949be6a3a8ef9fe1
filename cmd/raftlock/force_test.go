package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/clustertest"
)

// raftlock release --force on a three-node cluster with tokens: a
// read-write token may not, an admin token ends the holder's lease (which
// then cannot renew), and a second force release finds nothing to end.
func TestCLIForceRelease(t *testing.T) {
	cl := clustertest.Start(t, 3, clustertest.Options{Tokens: cliAdmin + " admin ops-admin\n" + cliRW + " read-write\n"})
	clustertest.WaitFor(t, 15*time.Second, "the leader to write command format 3", func() bool {
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
