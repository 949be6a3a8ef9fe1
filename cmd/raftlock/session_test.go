package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// stubAnswer is a canned answer of stubCluster.
type stubAnswer struct {
	status int
	body   string
}

// stubCluster answers "METHOD /path" with canned bodies and records the
// request bodies it got, for the CLI's output and exit codes of sessions
// and semaphores without a cluster.
type stubCluster struct {
	mu      sync.Mutex
	answers map[string]stubAnswer
	got     map[string][]map[string]any
}

func startStub(t *testing.T, answers map[string]stubAnswer) (*stubCluster, env) {
	t.Helper()
	s := &stubCluster{answers: answers, got: map[string][]map[string]any{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, env{"RAFTLOCK_ENDPOINTS=" + srv.URL}
}

func (s *stubCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.EscapedPath()
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.got[key] = append(s.got[key], body)
	a, ok := s.answers[key]
	s.mu.Unlock()
	w.Header().Set("X-Raftlock-Node", "n1")
	w.Header().Set("X-Raftlock-Leader", "n1")
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"not_found","message":"`+key+`"}`)
		return
	}
	// An answer echoes the ids the client chose, as the API does.
	out := a.body
	for _, k := range []string{"session_id", "lease_id"} {
		if v, ok := body[k].(string); ok {
			out = strings.ReplaceAll(out, "$"+k, v)
		}
	}
	w.WriteHeader(a.status)
	io.WriteString(w, out)
}

// requests returns the bodies sent to key ("POST /v1/sessions").
func (s *stubCluster) requests(key string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[key]
}

const stubSID = "sess_ABCDEFGHIJKLMNOP"

func TestCLISessionCommands(t *testing.T) {
	stub, base := startStub(t, map[string]stubAnswer{
		"POST /v1/sessions":       {200, `{"session_id":"$session_id","owner":"ingest-7","ttl_ms":30000,"lock_delay_ms":0}`},
		"POST /v1/sessions/renew": {404, `{"error":"no_session","message":"session unknown or ended"}`},
		"POST /v1/sessions/close": {200, `{"closed":true,"released":3}`},
		"GET /v1/sessions/" + stubSID: {200, `{"session_id":"` + stubSID + `","owner":"ingest-7","ttl_ms":30000,"lock_delay_ms":1000,"remaining_ms":29000,"index":52,
			"leases":[{"kind":"lock","name":"shards/1","fencing_token":50},{"kind":"lock","name":"schema","fencing_token":51,"mode":"shared"},{"kind":"semaphore","name":"exporters","fencing_token":52,"slot":2}]}`},
	})
	withID := func() env { return env{"RAFTLOCK_SESSION_ID=" + stubSID} }
	steps := []step{
		{name: "create, json", args: args("session", "create", "--json", "--ttl", "30s", "--owner", "ingest-7"),
			stdout: `^\{"session_id":"[A-Za-z0-9_-]{22}","owner":"ingest-7","ttl_ms":30000,"lock_delay_ms":0\}\n$`,
			check: func(t *testing.T, r result) {
				got := stub.requests("POST /v1/sessions")
				if len(got) != 1 || got[0]["ttl_ms"] != 30000.0 || got[0]["owner"] != "ingest-7" || !strings.Contains(r.stdout, got[0]["session_id"].(string)) {
					t.Fatalf("create sent %v, want ttl, owner and the session id it printed", got)
				}
			}},
		{name: "create, text", args: args("session", "create", "--session-id", stubSID), stdout: `^session_id:  ` + stubSID + `\nowner:       ingest-7\nttl:         30s\nlock_delay:  0s\n$`},
		{name: "renew of an ended session", env: withID, args: args("session", "renew"), code: exitNotHolder,
			stderr: `^raftlock session renew: no session: it expired or was closed`},
		{name: "renew of an ended session, json", env: withID, args: args("session", "renew", "--json"), code: exitNotHolder, stderr: "no session",
			stdout: `^\{"error":"no_session","message":"no session: .*"\}\n$`},
		{name: "show, text", args: args("session", "show", stubSID),
			stdout: `^owner:       ingest-7\nttl:         30s\nlock_delay:  1s\nremaining:   29s\nleases:      3\n  lock       shards/1  token 50\n  lock       schema  shared  token 51\n  semaphore  exporters  slot 2  token 52\n$`},
		{name: "show, json", env: withID, args: args("session", "show", "--json"),
			stdout: `^\{"session_id":"` + stubSID + `","owner":"ingest-7","ttl_ms":30000,"lock_delay_ms":1000,"remaining_ms":29000,"index":52,"leases":\[\{"kind":"lock","name":"shards/1","fencing_token":50\},\{"kind":"lock","name":"schema","fencing_token":51,"mode":"shared"\},\{"kind":"semaphore","name":"exporters","fencing_token":52,"slot":2\}\]\}\n$`},
		{name: "close", env: withID, args: args("session", "close"), stdout: "^closed the session; released 3 leases\n$"},
		{name: "close, json", env: withID, args: args("session", "close", "--json"), stdout: `^\{"closed":true,"released":3\}\n$`},
		{name: "renew without an id", args: args("session", "renew"), code: exitUsage, stderr: `--session-id \(or RAFTLOCK_SESSION_ID\) is required`},
		{name: "show with a bad id", args: args("session", "show", "short"), code: exitUsage, stderr: `--session-id: must be 16 to 128`},
		{name: "show with the id twice", args: args("session", "show", "--session-id", stubSID, stubSID), code: exitUsage, stderr: "give the session id once"},
		{name: "unknown subcommand", args: args("session", "open"), code: exitUsage, stderr: `unknown subcommand "open"`},
		{name: "help", args: args("session", "--help"), stdout: "^Usage: raftlock session"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
}

func TestCLISemaphoreCommands(t *testing.T) {
	lease := "perm_ABCDEFGHIJKLMNOP"
	stub, base := startStub(t, map[string]stubAnswer{
		"POST /v1/semaphores/acquire": {200, `{"name":"exporters","owner":"exp-a","lease_id":"$lease_id","slot":1,"fencing_token":77,"limit":3,"ttl_ms":30000}`},
		"POST /v1/semaphores/renew":   {409, `{"error":"not_holder","message":"lease does not hold a permit"}`},
		"POST /v1/semaphores/release": {200, `{"released":true}`},
		"GET /v1/semaphores/exporters": {200, `{"name":"exporters","limit":3,"index":80,"waiters":2,"holders":[
			{"owner":"exp-a","slot":0,"fencing_token":70,"ttl_ms":30000,"remaining_ms":12000},{"owner":"exp-b","slot":2,"fencing_token":80,"ttl_ms":30000}]}`},
		"GET /v1/semaphores/idle": {200, `{"name":"idle","limit":0,"holders":[],"index":0}`},
	})
	withLease := func() env { return env{"RAFTLOCK_LEASE_ID=" + lease} }
	steps := []step{
		{name: "acquire, json", args: args("semaphore", "acquire", "--json", "--limit", "3", "--ttl", "30s", "--owner", "exp-a", "--lease-id", lease, "exporters"),
			stdout: `^\{"name":"exporters","owner":"exp-a","lease_id":"` + lease + `","slot":1,"fencing_token":77,"limit":3,"ttl_ms":30000\}\n$`,
			check: func(t *testing.T, r result) {
				got := stub.requests("POST /v1/semaphores/acquire")
				if len(got) != 1 || got[0]["limit"] != 3.0 || got[0]["ttl_ms"] != 30000.0 || got[0]["session_id"] != nil {
					t.Fatalf("acquire sent %v", got)
				}
			}},
		{name: "acquire, text, sem", args: args("sem", "acquire", "--limit", "3", "--owner", "exp-a", "--ttl", "30s", "--lease-id", lease, "exporters"),
			stdout: `^name:      exporters\nowner:     exp-a\nslot:      1\ntoken:     77\nlease_id:  ` + lease + `\nlimit:     3\nttl:       30s\n$`},
		{name: "acquire without --limit", args: args("semaphore", "acquire", "exporters"), code: exitUsage, stderr: `--limit must be 1 to 1024`},
		{name: "acquire, limit too high", args: args("semaphore", "acquire", "--limit", "1025", "exporters"), code: exitUsage, stderr: `--limit must be 1 to 1024`},
		{name: "renew, not holder", env: withLease, args: args("semaphore", "renew", "exporters"), code: exitNotHolder, stderr: "not holder"},
		{name: "release", env: withLease, args: args("semaphore", "release", "exporters"), stdout: "^released a permit of exporters\n$"},
		{name: "release without a lease id", args: args("semaphore", "release", "exporters"), code: exitUsage, stderr: "--lease-id"},
		{name: "show, text", args: args("sem", "show", "exporters"),
			stdout: `^exporters: limit 3, 2 held, 2 waiting\nSLOT +OWNER +TOKEN +TTL +REMAINING\n0 +exp-a +70 +30s +12s\n2 +exp-b +80 +30s +-\n$`},
		{name: "show, json", args: args("semaphore", "show", "--json", "exporters"),
			stdout: `^\{"name":"exporters","limit":3,"holders":\[\{"owner":"exp-a","slot":0,"fencing_token":70,"ttl_ms":30000,"remaining_ms":12000\},\{"owner":"exp-b","slot":2,"fencing_token":80,"ttl_ms":30000\}\],"index":80,"waiters":2\}\n$`},
		{name: "show, nobody holds", args: args("semaphore", "show", "idle"), stdout: "^idle: no permit held\n$"},
		{name: "show, nobody holds, json", args: args("semaphore", "show", "--json", "idle"), stdout: `^\{"name":"idle","limit":0,"holders":\[\],"index":0\}\n$`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
}

func TestCLISemaphoreFullAndMismatch(t *testing.T) {
	_, full := startStub(t, map[string]stubAnswer{
		"POST /v1/semaphores/acquire": {409, `{"error":"full","message":"semaphore full","holders":[{"owner":"a","slot":0,"fencing_token":5},{"owner":"b","slot":1,"fencing_token":6}]}`},
	})
	_, bounded := startStub(t, map[string]stubAnswer{
		"POST /v1/semaphores/acquire": {409, `{"error":"full","message":"semaphore full","holders":[{"owner":"a","slot":0,"fencing_token":5}],"holders_total":40}`},
	})
	_, mismatch := startStub(t, map[string]stubAnswer{
		"POST /v1/semaphores/acquire": {409, `{"error":"limit_mismatch","message":"held with limit 2","limit":2}`},
	})
	steps := []struct {
		base env
		step
	}{
		{full, step{name: "full", args: args("semaphore", "acquire", "--limit", "2", "pool"), code: exitHeld,
			stderr: `^raftlock semaphore acquire: semaphore pool is full: all 2 permits are held\n$`}},
		{full, step{name: "full, json", args: args("semaphore", "acquire", "--json", "--limit", "2", "pool"), code: exitHeld, stderr: "is full",
			stdout: `^\{"error":"full","holders":\[\{"owner":"a","slot":0,"fencing_token":5\},\{"owner":"b","slot":1,"fencing_token":6\}\],"holders_total":2,"message":"semaphore pool is full: all 2 permits are held"\}\n$`}},
		// A server that lists the first holders only and counts them all.
		{bounded, step{name: "full, bounded list", args: args("semaphore", "acquire", "--limit", "40", "pool"), code: exitHeld,
			stderr: `^raftlock semaphore acquire: semaphore pool is full: all 40 permits are held\n$`}},
		{mismatch, step{name: "limit mismatch, json", args: args("semaphore", "acquire", "--json", "--limit", "3", "pool"), code: exitError, stderr: "held with limit 2",
			stdout: `^\{"error":"limit_mismatch","limit":2,"message":"semaphore pool is held with limit 2 \(the first holder sets it\)"\}\n$`}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, s.base) })
	}
}

// exec --semaphore gives the command its slot and token and releases the
// permit after; exec --shared asks for the lock shared.
func TestCLIExecSemaphoreAndShared(t *testing.T) {
	lease := "perm_ABCDEFGHIJKLMNOP"
	stub, base := startStub(t, map[string]stubAnswer{
		"POST /v1/semaphores/acquire": {200, `{"name":"exporters","owner":"w","lease_id":"` + lease + `","slot":2,"fencing_token":77,"limit":3,"ttl_ms":30000}`},
		"POST /v1/semaphores/release": {200, `{"released":true}`},
		"POST /v1/locks/acquire":      {200, `{"name":"schema","owner":"w","lease_id":"` + lease + `","fencing_token":78,"ttl_ms":30000,"mode":"shared"}`},
		"POST /v1/locks/release":      {200, `{"released":true}`},
	})
	steps := []step{
		{name: "semaphore", args: args("exec", "--semaphore", "3", "--ttl", "30s", "--lease-id", lease, "exporters", "--", "sh", "-c", `echo "$RAFTLOCK_LOCK $RAFTLOCK_SEMAPHORE_SLOT $RAFTLOCK_FENCING_TOKEN"`),
			stdout: "^exporters 2 77\n$",
			check: func(t *testing.T, r result) {
				if got := stub.requests("POST /v1/semaphores/release"); len(got) != 1 || got[0]["lease_id"] != lease {
					t.Fatalf("releases %v", got)
				}
				if got := stub.requests("POST /v1/semaphores/acquire"); got[0]["limit"] != 3.0 {
					t.Fatalf("acquire %v", got)
				}
			}},
		{name: "shared", args: args("exec", "--shared", "--ttl", "30s", "--lease-id", lease, "schema", "--", "sh", "-c", `echo "$RAFTLOCK_LOCK $RAFTLOCK_FENCING_TOKEN ${RAFTLOCK_SEMAPHORE_SLOT:-none}"`),
			stdout: "^schema 78 none\n$",
			check: func(t *testing.T, r result) {
				if got := stub.requests("POST /v1/locks/acquire"); len(got) != 1 || got[0]["mode"] != "shared" {
					t.Fatalf("acquire %v", got)
				}
				if got := stub.requests("POST /v1/locks/release"); len(got) != 1 {
					t.Fatalf("releases %v", got)
				}
			}},
		{name: "both", args: args("exec", "--shared", "--semaphore", "2", "x", "--", "true"), code: exitUsage, stderr: "exclude each other"},
		{name: "semaphore with a lock delay", args: args("exec", "--semaphore", "2", "--lock-delay", "1s", "x", "--", "true"), code: exitUsage, stderr: "exclusive locks only"},
		{name: "semaphore limit out of range", args: args("exec", "--semaphore", "-1", "x", "--", "true"), code: exitUsage, stderr: "--semaphore: --limit must be"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
	if strings.Contains(execHelp, "--semaphore N") == false {
		t.Fatal("exec's help does not say --semaphore")
	}
}
