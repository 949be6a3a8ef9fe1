package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

const sharedHolders = `"holders":[{"owner":"r1","fencing_token":5,"ttl_ms":30000,"remaining_ms":1000},{"owner":"r2","fencing_token":7,"ttl_ms":30000}]`

// acquire --shared asks for the lock shared and prints the mode.
func TestCLIAcquireShared(t *testing.T) {
	lease := "read_ABCDEFGHIJKLMNOP"
	stub, base := startStub(t, map[string]stubAnswer{
		"POST /v1/locks/acquire": {200, `{"name":"schema","owner":"r3","lease_id":"$lease_id","fencing_token":78,"ttl_ms":30000,"mode":"shared"}`},
	})
	steps := []step{
		{name: "json", args: args("acquire", "--shared", "--json", "--ttl", "30s", "--owner", "r3", "--lease-id", lease, "schema"),
			stdout: `^\{"name":"schema","owner":"r3","lease_id":"` + lease + `","fencing_token":78,"ttl_ms":30000,"mode":"shared"\}\n$`,
			check: func(t *testing.T, r result) {
				got := stub.requests("POST /v1/locks/acquire")
				if len(got) != 1 || got[0]["mode"] != "shared" {
					t.Fatalf("acquire sent %v, want mode shared", got)
				}
			}},
		{name: "text", args: args("acquire", "--shared", "--ttl", "30s", "--owner", "r3", "--lease-id", lease, "schema"),
			stdout: `^name:      schema\nowner:     r3\nmode:      shared\ntoken:     78\nlease_id:  ` + lease + `\nttl:       30s\n$`},
		{name: "with a lock delay", args: args("acquire", "--shared", "--lock-delay", "1s", "schema"), code: exitUsage,
			stderr: `^raftlock acquire: --lock-delay is for exclusive locks only`},
		{name: "exec with a lock delay", args: args("exec", "--shared", "--lock-delay", "1s", "schema", "--", "true"), code: exitUsage,
			stderr: `^raftlock exec: --lock-delay is for exclusive locks only`},
		{name: "elect has no --shared", args: args("elect", "--shared", "svc", "--", "true"), code: exitUsage,
			stderr: "flag provided but not defined: -shared"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
	if !strings.Contains(acquireHelp, "--shared") {
		t.Error("acquire's help does not say --shared")
	}
}

// heldAfterWaitStub never answers an acquire before the client gives up
// (as when the server's "held" answer to the last round of waiting comes
// just after --wait ends) and reads lock schema as held shared.
func heldAfterWaitStub(t *testing.T) (env, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var modes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Raftlock-Node", "n1")
		w.Header().Set("X-Raftlock-Leader", "n1")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/locks/acquire":
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			modes = append(modes, map[bool]string{true: "shared", false: "exclusive"}[strings.Contains(string(body), `"mode":"shared"`)])
			mu.Unlock()
			<-r.Context().Done()
		case "POST /v1/locks/release":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":"not_holder","message":"lease does not hold the lock"}`)
		case "GET /v1/locks/schema":
			io.WriteString(w, `{"name":"schema","held":true,"mode":"shared","owner":"r1","fencing_token":5,"ttl_ms":30000,"index":7,`+sharedHolders+`}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not_found","message":"no such endpoint"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return env{"RAFTLOCK_ENDPOINTS=" + srv.URL}, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), modes...)
	}
}

// A shared acquire still held when --wait ends exits 3, for acquire and
// exec alike (one code path), and names every shared holder.
func TestCLIAcquireSharedHeldAfterWait(t *testing.T) {
	base, modes := heldAfterWaitStub(t)
	steps := []step{
		{name: "acquire", args: args("acquire", "--shared", "--wait", "300ms", "schema"), code: exitHeld,
			stderr: `^raftlock acquire: schema is held by "r1" \(fencing token 5\) and 1 other shared holder\n$`},
		{name: "acquire, json", args: args("acquire", "--shared", "--json", "--wait", "300ms", "schema"), code: exitHeld, stderr: "is held by",
			stdout: `^\{"error":"held","holder":\{"fencing_token":5,"owner":"r1"\},"holders":\[\{"fencing_token":5,"owner":"r1"\},\{"fencing_token":7,"owner":"r2"\}\],"holders_total":2,"message":".*"\}\n$`},
		{name: "exec", args: args("exec", "--shared", "--wait", "300ms", "schema", "--", "true"), code: exitHeld,
			stderr: `^raftlock exec: schema is held by "r1" \(fencing token 5\) and 1 other shared holder\n$`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) { s.run(t, base) })
	}
	for _, m := range modes() {
		if m != "shared" {
			t.Errorf("acquires sent in modes %v, want shared only", modes())
			break
		}
	}
}
