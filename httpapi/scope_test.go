package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// Tokens of two tenants limited to their own prefixes, a read-only one of
// tenantA's, and an admin.
const (
	tokTenantA   = "tenant-a-token-0123456789"
	tokTenantB   = "tenant-b-token-0123456789"
	tokTenantARO = "tenant-a-ro-token-0123456"
)

const prefixTokenFile = tokAdmin + ` admin root
` + tokTenantA + ` read-write tenantA prefix=tenantA/
` + tokTenantB + ` read-write tenantB prefix=tenantB/ prefix=shared/b/
` + tokTenantARO + ` read-only tenantA-ro prefix=tenantA/
` + tokRW + ` read-write legacy
`

func prefixServer(t *testing.T, f *fakeStore) *Server {
	t.Helper()
	toks, err := ParseTokens(strings.NewReader(prefixTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	return New(f, Options{LeaderWait: testLeaderWait, Metrics: http.NotFoundHandler(), Tokens: toks})
}

func bearerOf(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// listNames lists prefix with tok and returns the names and index.
func listNames(t *testing.T, s http.Handler, tok, query string) ([]string, uint64) {
	t.Helper()
	rec := do(t, s, "GET", "/v1/locks"+query, "", bearerOf(tok)...)
	if rec.Code != http.StatusOK {
		t.Fatalf("list %s: %d %s", query, rec.Code, rec.Body)
	}
	var l struct {
		Locks []struct {
			Name string `json:"name"`
		} `json:"locks"`
		Index uint64 `json:"index"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range l.Locks {
		names = append(names, x.Name)
	}
	return names, l.Index
}

// tenantA's token can neither see nor take tenantB's locks; tenantB then
// gets the lock tenantA was refused.
func TestPrefixTenantCannotReachAnother(t *testing.T) {
	s := prefixServer(t, newLeader("n1"))
	post := func(tok, path, body string) *httptest.ResponseRecorder {
		return do(t, s, "POST", path, body, bearerOf(tok)...)
	}

	if rec := post(tokTenantB, "/v1/locks/acquire", `{"name":"tenantB/payroll","owner":"b","ttl_ms":60000}`); rec.Code != http.StatusOK {
		t.Fatalf("tenantB acquire: %d %s", rec.Code, rec.Body)
	}
	if rec := post(tokTenantA, "/v1/locks/acquire", `{"name":"tenantA/jobs","owner":"a","ttl_ms":60000}`); rec.Code != http.StatusOK {
		t.Fatalf("tenantA acquire: %d %s", rec.Code, rec.Body)
	}

	rec := do(t, s, "GET", "/v1/locks?prefix=tenantB/", "", bearerOf(tokTenantA)...)
	wantError(t, rec, http.StatusForbidden, "forbidden", `"tenantA/"`)
	rec = post(tokTenantA, "/v1/locks/acquire", `{"name":"tenantB/payroll-next","owner":"a","ttl_ms":60000}`)
	wantError(t, rec, http.StatusForbidden, "forbidden", `only names under "tenantA/"; "tenantB/payroll-next" is outside them`)
	if rec := post(tokTenantB, "/v1/locks/acquire", `{"name":"tenantB/payroll-next","owner":"b","ttl_ms":60000}`); rec.Code != http.StatusOK {
		t.Fatalf("tenantB acquire of the lock tenantA was refused: %d %s", rec.Code, rec.Body)
	}

	// Every other route that names a lock or semaphore.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/locks/tenantB/payroll", ""},
		{"GET", "/v1/locks/tenantB/payroll?index=1&wait_ms=10", ""},
		{"GET", "/v1/semaphores/tenantB/pool", ""},
		{"POST", "/v1/locks/renew", `{"name":"tenantB/payroll","lease_id":"0123456789abcdef0123456789abcdef"}`},
		{"POST", "/v1/locks/release", `{"name":"tenantB/payroll","lease_id":"0123456789abcdef0123456789abcdef"}`},
		{"POST", "/v1/locks/update", `{"name":"tenantB/payroll","lease_id":"0123456789abcdef0123456789abcdef","value":"x"}`},
		{"POST", "/v1/semaphores/acquire", `{"name":"tenantB/pool","limit":2,"ttl_ms":60000}`},
		{"POST", "/v1/semaphores/renew", `{"name":"tenantB/pool","lease_id":"0123456789abcdef0123456789abcdef"}`},
		{"POST", "/v1/semaphores/release", `{"name":"tenantB/pool","lease_id":"0123456789abcdef0123456789abcdef"}`},
	} {
		rec := do(t, s, c.method, c.path, c.body, bearerOf(tokTenantA)...)
		wantError(t, rec, http.StatusForbidden, "forbidden", `"tenantA/"`)
	}
	// A read-only token with a prefix reads only under it.
	if rec := do(t, s, "GET", "/v1/locks/tenantA/jobs", "", bearerOf(tokTenantARO)...); rec.Code != http.StatusOK {
		t.Errorf("read-only tenantA read of its own lock: %d %s", rec.Code, rec.Body)
	}
	wantError(t, do(t, s, "GET", "/v1/locks/tenantB/payroll", "", bearerOf(tokTenantARO)...), http.StatusForbidden, "forbidden", `"tenantA/"`)

	// A list wider than the token's prefixes shows only what it may read;
	// tenantB's two prefixes are listed in order. Admin and a token without
	// prefixes see everything.
	if names, _ := listNames(t, s, tokTenantA, ""); strings.Join(names, ",") != "tenantA/jobs" {
		t.Errorf("tenantA lists %v, want only tenantA/jobs", names)
	}
	if names, _ := listNames(t, s, tokTenantA, "?prefix=ten"); strings.Join(names, ",") != "tenantA/jobs" {
		t.Errorf("tenantA lists %v under ten, want only tenantA/jobs", names)
	}
	post(tokTenantB, "/v1/locks/acquire", `{"name":"shared/b/1","owner":"b","ttl_ms":60000}`)
	if names, _ := listNames(t, s, tokTenantB, "?limit=2"); strings.Join(names, ",") != "shared/b/1,tenantB/payroll" {
		t.Errorf("tenantB lists %v with limit 2", names)
	}
	for _, tok := range []string{tokAdmin, tokRW} {
		if names, _ := listNames(t, s, tok, ""); len(names) != 4 {
			t.Errorf("a token without prefixes lists %v, want all 4 locks", names)
		}
	}
}

// A list's index, and what wakes a blocking list, are the token's names
// only: another tenant's writes do not show, not even as a new index.
func TestPrefixListIndexIsTheTokens(t *testing.T) {
	s := prefixServer(t, newLeader("n1"))
	post := func(tok, body string) {
		if rec := do(t, s, "POST", "/v1/locks/acquire", body, bearerOf(tok)...); rec.Code != http.StatusOK {
			t.Fatalf("acquire %s: %d %s", body, rec.Code, rec.Body)
		}
	}
	post(tokTenantA, `{"name":"tenantA/1","owner":"a","ttl_ms":60000}`)
	_, before := listNames(t, s, tokTenantA, "")
	post(tokTenantB, `{"name":"tenantB/1","owner":"b","ttl_ms":60000}`)
	_, after := listNames(t, s, tokTenantA, "")
	if after != before {
		t.Errorf("tenantA's list index moved from %d to %d on tenantB's write", before, after)
	}
	if _, all := listNames(t, s, tokAdmin, ""); all <= before {
		t.Errorf("admin's list index %d, want above %d", all, before)
	}
	// A blocking list at tenantA's index is not woken by tenantB: it
	// answers at the end of its wait with the same index.
	post(tokTenantB, `{"name":"tenantB/2","owner":"b","ttl_ms":60000}`)
	if _, idx := listNames(t, s, tokTenantA, "?index="+strconv.FormatUint(before, 10)+"&wait_ms=60"); idx != before {
		t.Errorf("blocking list answered index %d, want %d", idx, before)
	}
}

// A session belongs to the names it holds: another tenant's token cannot
// renew, close or read it, even with its id.
func TestPrefixSessionOfAnotherTenant(t *testing.T) {
	s := prefixServer(t, newLeader("n1"))
	rec := do(t, s, "POST", "/v1/sessions", `{"owner":"b","ttl_ms":60000}`, bearerOf(tokTenantB)...)
	if rec.Code != http.StatusOK {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var ss struct {
		ID string `json:"session_id"`
	}
	json.Unmarshal(rec.Body.Bytes(), &ss)
	if rec := do(t, s, "POST", "/v1/locks/acquire", `{"name":"tenantB/s","session_id":"`+ss.ID+`"}`, bearerOf(tokTenantB)...); rec.Code != http.StatusOK {
		t.Fatalf("acquire in session: %d %s", rec.Code, rec.Body)
	}
	body := `{"session_id":"` + ss.ID + `"}`
	wantError(t, do(t, s, "POST", "/v1/sessions/renew", body, bearerOf(tokTenantA)...), http.StatusForbidden, "forbidden", `the session's lease on "tenantB/s"`)
	wantError(t, do(t, s, "POST", "/v1/sessions/close", body, bearerOf(tokTenantA)...), http.StatusForbidden, "forbidden", `"tenantA/"`)
	wantError(t, do(t, s, "GET", "/v1/sessions/"+ss.ID, "", bearerOf(tokTenantARO)...), http.StatusForbidden, "forbidden", `"tenantA/"`)
	if rec := do(t, s, "POST", "/v1/sessions/renew", body, bearerOf(tokTenantB)...); rec.Code != http.StatusOK {
		t.Errorf("tenantB renew of its session: %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, s, "POST", "/v1/sessions/close", body, bearerOf(tokAdmin)...); rec.Code != http.StatusOK {
		t.Errorf("admin close: %d %s", rec.Code, rec.Body)
	}
}

func TestMinimalPrefixes(t *testing.T) {
	got := minimalPrefixes([]string{"b/", "a/x", "a/", "b/", "c"})
	if strings.Join(got, ",") != "a/,b/,c" {
		t.Errorf("minimalPrefixes: %v", got)
	}
}
