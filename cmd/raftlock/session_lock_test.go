package main

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// acquire --session-id and exec --session-id take a lock in a session made
// by 'raftlock session create', on a real node: the lease has the session's
// owner and TTL and lives as long as the session (acquire leaves it held,
// exec releases it and leaves the session open); closing the session ends
// the lease, and an ended session is exit 4.
func TestCLILockInSession(t *testing.T) {
	cl := testenv.Start(t, 1)
	base := endpointsEnv(cl.Endpoints())
	r := runCLI(t, base, "session", "create", "--json", "--ttl", "30s", "--owner", "ingest-7")
	if r.code != exitOK {
		t.Fatalf("session create: exit %d %s", r.code, r.stderr)
	}
	var sess api.Session
	decode(t, r.stdout, &sess)
	sid := sess.SessionID

	r = runCLI(t, base, "acquire", "--json", "--session-id", sid, "s/a")
	if r.code != exitOK {
		t.Fatalf("acquire --session-id: exit %d %s", r.code, r.stderr)
	}
	var l api.Lease
	decode(t, r.stdout, &l)
	if l.Owner != "ingest-7" || l.SessionID != sid || l.TTLMs != 30000 {
		t.Errorf("lease %+v: want the session's owner, id and TTL", l)
	}
	r = runCLI(t, base, "exec", "--session-id", sid, "s/b", "--", "sh", "-c", `echo "$RAFTLOCK_LOCK $RAFTLOCK_FENCING_TOKEN"`)
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "s/b ") {
		t.Fatalf("exec --session-id: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, base, "session", "show", "--json", sid)
	var info struct {
		Leases []struct{ Name string }
	}
	decode(t, r.stdout, &info)
	if len(info.Leases) != 1 || info.Leases[0].Name != "s/a" {
		t.Errorf("session's leases %+v: want s/a only (exec released s/b, and left the session open)", info.Leases)
	}
	if r := runCLI(t, base, "session", "close", "--session-id", sid); r.code != exitOK || !strings.Contains(r.stdout, "released 1") {
		t.Fatalf("session close: exit %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, base, "get", "s/a"); r.code != exitOK || !strings.Contains(r.stdout, "free") {
		t.Errorf("s/a after its session closed: %q, want free", r.stdout)
	}
	if r := runCLI(t, base, "acquire", "--session-id", sid, "s/c"); r.code != exitNotHolder || !strings.Contains(r.stderr, "no session") {
		t.Errorf("acquire in a closed session: exit %d %q, want 4 no session", r.code, r.stderr)
	}
}
