package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/raftnode/tlsconfig/tlstest"
)

// Test tokens, one per role, and one the server does not know.
const (
	tokRO      = "ro-token-0123456789abcdef"
	tokRW      = "rw-token-0123456789abcdef"
	tokAdmin   = "admin-token-0123456789abcdef"
	tokUnknown = "unknown-token-0123456789abcdef"
	tokHashed  = "hashed-admin-token-0123456789"
)

func hashOf(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

var tokenFile = `# raftlock tokens: TOKEN ROLE
` + tokRO + ` read-only
` + tokRW + `   read-write   # a comment after the role

sha256:` + hashOf(tokHashed) + ` admin
` + tokAdmin + ` admin
`

func testTokens(t *testing.T) *Tokens {
	t.Helper()
	toks, err := ParseTokens(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestParseTokens(t *testing.T) {
	toks := testTokens(t)
	for tok, want := range map[string]Role{tokRO: RoleReadOnly, tokRW: RoleReadWrite, tokAdmin: RoleAdmin, tokHashed: RoleAdmin, tokUnknown: RoleNone, "": RoleNone} {
		if got := toks.lookup(tok).role; got != want {
			t.Errorf("role of %q: %v, want %v", tok, got, want)
		}
	}
	// The hashed admin comes first but has no plain text to send.
	if got := toks.AdminToken(); got != tokAdmin {
		t.Errorf("AdminToken %q, want the first plain-text admin token", got)
	}
	secret := "s3cret-token-that-must-not-leak"
	for _, c := range []struct{ file, msg string }{
		{secret + " root", `line 1: role "root"`},
		{"# c\n" + secret, "line 2: want \"TOKEN ROLE [NAME] [prefix=P ...]\""},
		{secret + " admin name extra", "line 1: want \"TOKEN ROLE [NAME] [prefix=P ...]\" (a second name"},
		{secret + " read-write a prefix=", "line 1: prefix= needs a prefix"},
		{secret + " admin root prefix=a/", "line 1: an admin token may use every name"},
		{"short admin", "line 1: token shorter than 16"},
		{secret + " admin\n" + secret + " read-only", "line 2: token listed twice"},
		{"sha256:abcd admin", "line 1: sha256: needs 64 hex digits"},
		{"# nothing\n\n", "no tokens"},
	} {
		_, err := ParseTokens(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseTokens(%q): %v, want an error with %q", c.file, err, c.msg)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows the token", err)
		}
	}
}

// syncLog is a log sink that tests can search.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func authServer(t *testing.T, f *fakeStore, logs *syncLog) *Server {
	return New(f, Options{
		LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: testTokens(t),
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace}),
	})
}

// assertNoTokens fails if any token appears in the logs.
func assertNoTokens(t *testing.T, logs string) {
	t.Helper()
	for _, tok := range []string{tokRO, tokRW, tokAdmin, tokUnknown, tokHashed} {
		if strings.Contains(logs, tok) {
			t.Errorf("a token is in the logs:\n%s", logs)
		}
	}
}

// Every endpoint against every kind of caller: 401 without or with an
// unknown token, 403 for too weak a role, through otherwise.
func TestAuthEveryEndpointAndRole(t *testing.T) {
	endpoints := []struct {
		method, path, body string
		need               Role
	}{
		{"GET", "/healthz", "", RoleNone},
		{"GET", "/readyz", "", RoleNone},
		{"GET", "/metrics", "", RoleReadOnly},
		{"GET", "/v1/locks", "", RoleReadOnly},
		{"GET", "/v1/locks/orders%2F89041", "", RoleReadOnly},
		{"GET", "/v1/locks/orders%2F89041?stale=true", "", RoleReadOnly},
		{"GET", "/v1/cluster", "", RoleReadOnly},
		{"POST", "/v1/locks/acquire", writeRequests[0].body, RoleReadWrite},
		{"POST", "/v1/locks/renew", writeRequests[1].body, RoleReadWrite},
		{"POST", "/v1/locks/release", writeRequests[2].body, RoleReadWrite},
		{"POST", "/v1/cluster/join", writeRequests[3].body, RoleAdmin},
		{"POST", "/v1/cluster/leave", writeRequests[4].body, RoleAdmin},
		{"POST", "/v1/cluster/transfer-leadership", writeRequests[5].body, RoleAdmin},
		{"POST", "/v1/cluster/check-state", `{}`, RoleAdmin},
		{"GET", "/v1/sessions/" + sessA, "", RoleReadOnly},
		{"GET", "/v1/semaphores/pool%2Fa", "", RoleReadOnly},
		{"GET", "/v1/semaphores/pool/a?stale=true", "", RoleReadOnly},
	}
	for _, w := range issue15Writes {
		endpoints = append(endpoints, struct {
			method, path, body string
			need               Role
		}{"POST", w.path, w.body, RoleReadWrite})
	}
	callers := []struct {
		name  string
		auth  string // the Authorization header
		role  Role
		known bool
	}{
		{"no token", "", RoleNone, false},
		{"not bearer", "Basic " + tokAdmin, RoleNone, false},
		{"unknown token", "Bearer " + tokUnknown, RoleNone, false},
		{"read-only", "Bearer " + tokRO, RoleReadOnly, true},
		{"read-write", "Bearer " + tokRW, RoleReadWrite, true},
		{"admin", "Bearer " + tokAdmin, RoleAdmin, true},
		{"admin by hash", "bearer " + tokHashed, RoleAdmin, true},
	}
	var logs syncLog
	f := newLeader("n1")
	s := authServer(t, f, &logs)
	for _, e := range endpoints {
		for _, c := range callers {
			t.Run(e.method+" "+e.path+" "+c.name, func(t *testing.T) {
				before := f.writes()
				rec := do(t, s, e.method, e.path, e.body, "Authorization", c.auth)
				switch {
				case e.need == RoleNone || c.role >= e.need:
					if rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden {
						t.Fatalf("status %d, want the request through; body %s", rec.Code, rec.Body)
					}
					return
				case !c.known:
					wantError(t, rec, http.StatusUnauthorized, "unauthorized", "token")
					if h := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
						t.Errorf("WWW-Authenticate %q", h)
					}
				default:
					wantError(t, rec, http.StatusForbidden, "forbidden", e.need.String())
				}
				if rec.Header().Get(api.HeaderNode) != "n1" {
					t.Errorf("a refusal lacks %s: %v", api.HeaderNode, rec.Header())
				}
				if f.writes() != before {
					t.Error("a refused request reached the store")
				}
			})
		}
	}
	assertNoTokens(t, logs.String())
	if !strings.Contains(logs.String(), "unknown bearer token") || !strings.Contains(logs.String(), "forbidden") {
		t.Errorf("refusals are not logged:\n%s", logs.String())
	}
}

// A follower checks the token, forwards the Authorization header unchanged
// (here over https), and the leader checks it again.
func TestAuthForwardedKeepsToken(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	var logs syncLog
	lf := newLeader("n1")
	leader := httptest.NewUnstartedServer(authServer(t, lf, &logs))
	leader.TLS = ca.Bundle("n1").Server(false)
	leader.StartTLS()
	defer leader.Close()

	f := follower(strings.TrimPrefix(leader.URL, "https://"))
	s := New(f, Options{
		LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: testTokens(t),
		ForwardTLS: ca.Bundle("n2").Client(),
		Logger:     hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace}),
	})

	acq := writeRequests[0].body
	rec := do(t, s, "POST", "/v1/locks/acquire", acq, "Authorization", "Bearer "+tokRW)
	if rec.Code != http.StatusOK || rec.Header().Get(api.HeaderLeader) != "n1" {
		t.Fatalf("forwarded acquire: %d %s", rec.Code, rec.Body)
	}
	if len(lf.commands()) != 1 {
		t.Fatalf("the leader applied %d commands, want 1", len(lf.commands()))
	}
	// The leader refuses what the follower let through (say their token
	// files differ): its 401 reaches the client with its challenge.
	s.opts.Tokens.entries = append(s.opts.Tokens.entries, tokenEntry{hash: sha256.Sum256([]byte(tokUnknown)), role: RoleAdmin})
	rec = do(t, s, "POST", "/v1/cluster/leave", `{"id":"n4"}`, "Authorization", "Bearer "+tokUnknown)
	wantError(t, rec, http.StatusUnauthorized, "unauthorized", "unknown bearer token")
	if !strings.Contains(rec.Header().Get("WWW-Authenticate"), "invalid_token") {
		t.Errorf("the leader's challenge was not relayed: %v", rec.Header())
	}
	// A read-only token cannot make a follower forward a write.
	rec = do(t, s, "POST", "/v1/locks/release", writeRequests[2].body, "Authorization", "Bearer "+tokRO)
	wantError(t, rec, http.StatusForbidden, "forbidden", "read-write")
	if len(lf.commands()) != 1 || lf.writes() != 1 {
		t.Errorf("a refused request reached the leader's store")
	}
	assertNoTokens(t, logs.String())
}
