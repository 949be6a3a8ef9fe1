package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// Lease ids that the contract accepts (16 to 128 of [A-Za-z0-9_-]).
const (
	leaseA = "lease-A_0123456789"
	leaseB = "lease-B_0123456789"
)

// badRequestCase is a body that must be answered 400 bad_request with a
// message containing msg (the field's name), without reaching the store.
type badRequestCase struct {
	name string
	body string
	msg  string
}

func TestBadRequests(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	acquire := []badRequestCase{
		{"missing name", `{"ttl_ms":1000}`, "name:"},
		{"empty name", `{"name":"","ttl_ms":1000}`, "name:"},
		{"name too long", `{"name":"` + long(513) + `","ttl_ms":1000}`, "name:"},
		{"name of 171 three-byte runes", `{"name":"` + strings.Repeat("€", 171) + `","ttl_ms":1000}`, "name:"},
		{"name invalid UTF-8", "{\"name\":\"a\xffb\",\"ttl_ms\":1000}", "name:"},
		{"name truncated UTF-8", "{\"name\":\"ab\xe2\x82\",\"ttl_ms\":1000}", "name:"},
		{"name with BEL", `{"name":"a\u0007b","ttl_ms":1000}`, "name:"},
		{"name with newline", `{"name":"a\nb","ttl_ms":1000}`, "name:"},
		{"name with NUL", `{"name":"a\u0000b","ttl_ms":1000}`, "name:"},
		{"name with DEL", `{"name":"a\u007fb","ttl_ms":1000}`, "name:"},
		{"name with C1 control", `{"name":"a\u0085b","ttl_ms":1000}`, "name:"},
		{"name wrong type", `{"name":7,"ttl_ms":1000}`, "name:"},
		{"owner too long", `{"name":"a","owner":"` + long(257) + `","ttl_ms":1000}`, "owner:"},
		{"owner invalid UTF-8", "{\"name\":\"a\",\"owner\":\"w\xc3\",\"ttl_ms\":1000}", "owner:"},
		{"owner wrong type", `{"name":"a","owner":["w"],"ttl_ms":1000}`, "owner:"},
		{"ttl_ms missing", `{"name":"a"}`, "ttl_ms:"},
		{"ttl_ms null", `{"name":"a","ttl_ms":null}`, "ttl_ms:"},
		{"ttl_ms zero", `{"name":"a","ttl_ms":0}`, "ttl_ms:"},
		{"ttl_ms negative", `{"name":"a","ttl_ms":-1000}`, "ttl_ms:"},
		{"ttl_ms too low", `{"name":"a","ttl_ms":499}`, "ttl_ms:"},
		{"ttl_ms too high", `{"name":"a","ttl_ms":3600001}`, "ttl_ms:"},
		{"ttl_ms overflows int64", `{"name":"a","ttl_ms":1e30}`, "ttl_ms:"},
		{"ttl_ms string", `{"name":"a","ttl_ms":"1000"}`, "ttl_ms: must be an integer, not string"},
		{"ttl_ms fraction", `{"name":"a","ttl_ms":1000.5}`, "ttl_ms:"},
		{"ttl_ms bool", `{"name":"a","ttl_ms":true}`, "ttl_ms:"},
		{"lease_id too short", `{"name":"a","ttl_ms":1000,"lease_id":"` + long(15) + `"}`, "lease_id:"},
		{"lease_id too long", `{"name":"a","ttl_ms":1000,"lease_id":"` + long(129) + `"}`, "lease_id:"},
		{"lease_id with !", `{"name":"a","ttl_ms":1000,"lease_id":"abcdefghijklmno!"}`, "lease_id:"},
		{"lease_id with space", `{"name":"a","ttl_ms":1000,"lease_id":"abcdefgh ijklmnop"}`, "lease_id:"},
		{"lease_id with slash", `{"name":"a","ttl_ms":1000,"lease_id":"abcdefgh/ijklmnop"}`, "lease_id:"},
		{"lease_id with base64 padding", `{"name":"a","ttl_ms":1000,"lease_id":"abcdefghijklmnop=="}`, "lease_id:"},
		{"lease_id non-ASCII", `{"name":"a","ttl_ms":1000,"lease_id":"abcdefghijklmnoé"}`, "lease_id:"},
		{"lease_id wrong type", `{"name":"a","ttl_ms":1000,"lease_id":12345678901234567}`, "lease_id:"},
		{"wait_ms negative", `{"name":"a","ttl_ms":1000,"wait_ms":-1}`, "wait_ms:"},
		{"wait_ms too high", `{"name":"a","ttl_ms":1000,"wait_ms":300001}`, "wait_ms:"},
		{"wait_ms string", `{"name":"a","ttl_ms":1000,"wait_ms":"5s"}`, "wait_ms:"},
		{"lock_delay_ms negative", `{"name":"a","ttl_ms":1000,"lock_delay_ms":-1}`, "lock_delay_ms:"},
		{"lock_delay_ms too high", `{"name":"a","ttl_ms":1000,"lock_delay_ms":60001}`, "lock_delay_ms:"},
		{"lock_delay_ms fraction", `{"name":"a","ttl_ms":1000,"lock_delay_ms":0.5}`, "lock_delay_ms:"},
		{"unknown field", `{"name":"a","ttl_ms":1000,"ttl":5}`, `"ttl"`},
		{"misspelt field", `{"name":"a","ttl_ms":1000,"leaseid":"abcdefghijklmnopq"}`, `"leaseid"`},
		{"field name in another case", `{"name":"a","TTL_MS":1000}`, `"TTL_MS"`},
		// encoding/json would turn each lone surrogate into U+FFFD: "a\ud800b"
		// and "a\udbffb" would be one lock.
		{"name with a lone high surrogate", `{"name":"a\ud800b","ttl_ms":1000}`, "name:"},
		{"name ending in a high surrogate", `{"name":"a\uDBFF","ttl_ms":1000}`, "name:"},
		{"name with a lone low surrogate", `{"name":"\udc00","ttl_ms":1000}`, "name:"},
		{"name with two high surrogates", `{"name":"\ud800\ud800","ttl_ms":1000}`, "name:"},
		{"name with a high surrogate and a letter", `{"name":"\ud800\u0041","ttl_ms":1000}`, "name:"},
		{"owner with a lone surrogate", `{"name":"a","owner":"w\ud800","ttl_ms":1000}`, "owner:"},
		// encoding/json would keep the last.
		{"name given twice", `{"name":"a","name":"b","ttl_ms":1000}`, "name: given more than once"},
		{"name given twice, once escaped", `{"name":"a","n\u0061me":"b","ttl_ms":1000}`, "name: given more than once"},
		{"ttl_ms given twice", `{"name":"a","ttl_ms":1000,"ttl_ms":1000}`, "ttl_ms: given more than once"},
	}
	renew := []badRequestCase{
		{"missing name", `{"lease_id":"` + leaseA + `"}`, "name:"},
		{"name too long", `{"name":"` + long(513) + `","lease_id":"` + leaseA + `"}`, "name:"},
		{"name invalid UTF-8", "{\"name\":\"\xff\",\"lease_id\":\"" + leaseA + "\"}", "name:"},
		{"name with control character", `{"name":"a\tb","lease_id":"` + leaseA + `"}`, "name:"},
		{"missing lease_id", `{"name":"a"}`, "lease_id:"},
		{"lease_id too short", `{"name":"a","lease_id":"` + long(15) + `"}`, "lease_id:"},
		{"lease_id too long", `{"name":"a","lease_id":"` + long(129) + `"}`, "lease_id:"},
		{"lease_id bad characters", `{"name":"a","lease_id":"abcdefgh.ijklmnop"}`, "lease_id:"},
		{"ttl_ms too low", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":499}`, "ttl_ms:"},
		{"ttl_ms zero", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":0}`, "ttl_ms:"},
		{"ttl_ms too high", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":3600001}`, "ttl_ms:"},
		{"ttl_ms wrong type", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":"1s"}`, "ttl_ms:"},
		{"name with a lone surrogate", `{"name":"\ud800","lease_id":"` + leaseA + `"}`, "name:"},
		{"lease_id given twice", `{"name":"a","lease_id":"` + leaseA + `","lease_id":"` + leaseB + `"}`, "lease_id: given more than once"},
		{"owner is not a renew field", `{"name":"a","lease_id":"` + leaseA + `","owner":"w"}`, `"owner"`},
		{"wait_ms is not a renew field", `{"name":"a","lease_id":"` + leaseA + `","wait_ms":0}`, `"wait_ms"`},
	}
	release := []badRequestCase{
		{"missing name", `{"lease_id":"` + leaseA + `"}`, "name:"},
		{"name too long", `{"name":"` + long(513) + `","lease_id":"` + leaseA + `"}`, "name:"},
		{"name invalid UTF-8", "{\"name\":\"a\xc0\xafb\",\"lease_id\":\"" + leaseA + "\"}", "name:"},
		{"name with control character", `{"name":"\u001b[0m","lease_id":"` + leaseA + `"}`, "name:"},
		{"missing lease_id", `{"name":"a"}`, "lease_id:"},
		{"lease_id too short", `{"name":"a","lease_id":"short"}`, "lease_id:"},
		{"lease_id too long", `{"name":"a","lease_id":"` + long(129) + `"}`, "lease_id:"},
		{"lease_id bad characters", `{"name":"a","lease_id":"abcdefgh+ijklmnop"}`, "lease_id:"},
		{"name with a lone surrogate", `{"name":"x\udfff","lease_id":"` + leaseA + `"}`, "name:"},
		{"name given twice", `{"name":"a","lease_id":"` + leaseA + `","name":"b"}`, "name: given more than once"},
		{"ttl_ms is not a release field", `{"name":"a","lease_id":"` + leaseA + `","ttl_ms":1000}`, `"ttl_ms"`},
	}
	join := []badRequestCase{
		{"missing id", `{"raft_addr":"127.0.0.1:9004","http_addr":"127.0.0.1:8004"}`, "id:"},
		{"empty id", `{"id":"","raft_addr":"127.0.0.1:9004"}`, "id:"},
		{"missing raft_addr", `{"id":"n4","http_addr":"127.0.0.1:8004"}`, "raft_addr:"},
		{"id wrong type", `{"id":4,"raft_addr":"127.0.0.1:9004"}`, "id:"},
		{"raft_addr wrong type", `{"id":"n4","raft_addr":9004}`, "raft_addr:"},
		{"unknown field", `{"id":"n4","raft_addr":"127.0.0.1:9004","voter":true}`, `"voter"`},
	}
	leave := []badRequestCase{
		{"missing id", `{}`, "id:"},
		{"empty id", `{"id":""}`, "id:"},
		{"id wrong type", `{"id":["n4"]}`, "id:"},
		{"id given twice", `{"id":"n4","id":"n5"}`, "id: given more than once"},
		{"unknown field", `{"id":"n4","force":true}`, `"force"`},
	}
	transfer := []badRequestCase{
		{"id wrong type", `{"id":2}`, "id:"},
		{"unknown field", `{"to":"n2"}`, `"to"`},
	}
	// Every endpoint with a body rejects malformed input the same way. In
	// these, V stands for a body the endpoint accepts.
	malformed := []badRequestCase{
		{"empty body", ``, "body:"},
		{"whitespace only", " \n\t", "body:"},
		{"truncated JSON", `{"name":`, "body:"},
		{"unquoted key", `{name:"a"}`, "body:"},
		{"single quotes", `{'name':'a'}`, "body:"},
		{"trailing comma", `{"name":"a",}`, "body:"},
		{"trailing object", `V {}`, "body:"},
		{"trailing garbage", `V x`, "body:"},
		{"trailing brace", `V}`, "body:"},
		{"trailing bracket", `V]`, "body:"},
		{"array", `[]`, "body:"},
		{"string", `"name"`, "body:"},
		{"number", `42`, "body:"},
	}
	endpoints := []struct {
		path  string
		valid string
		cases []badRequestCase
	}{
		{"/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`, acquire},
		{"/v1/locks/renew", `{"name":"a","lease_id":"` + leaseA + `"}`, renew},
		{"/v1/locks/release", `{"name":"a","lease_id":"` + leaseA + `"}`, release},
		{"/v1/cluster/join", `{"id":"n4","raft_addr":"127.0.0.1:9004"}`, join},
		{"/v1/cluster/leave", `{"id":"n4"}`, leave},
		{"/v1/cluster/transfer-leadership", `{}`, transfer},
	}
	for _, ep := range endpoints {
		for _, tc := range append(ep.cases, malformed...) {
			t.Run(strings.TrimPrefix(ep.path, "/v1/")+"/"+tc.name, func(t *testing.T) {
				f := newLeader("n1")
				body := strings.ReplaceAll(tc.body, "V", ep.valid)
				rec := do(t, newServer(f), http.MethodPost, ep.path, body)
				wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, tc.msg)
				if n := f.writes(); n != 0 {
					t.Errorf("the store saw %d writes for a bad request", n)
				}
			})
		}
	}
}

// The boundaries themselves are accepted.
func TestRequestLimitsAccepted(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct{ name, path, body string }{
		{"name of 512 bytes", "/v1/locks/acquire", `{"name":"` + long(512) + `","ttl_ms":1000}`},
		{"name of 170 three-byte runes", "/v1/locks/acquire", `{"name":"` + strings.Repeat("€", 170) + `","ttl_ms":1000}`},
		{"name of one byte", "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`},
		{"name with slashes, spaces and unicode", "/v1/locks/acquire", `{"name":"orders/89041 été ✓","ttl_ms":1000}`},
		{"owner of 256 bytes", "/v1/locks/acquire", `{"name":"a","owner":"` + long(256) + `","ttl_ms":1000}`},
		{"ttl_ms 500", "/v1/locks/acquire", `{"name":"a","ttl_ms":500}`},
		{"ttl_ms 3600000", "/v1/locks/acquire", `{"name":"a","ttl_ms":3600000}`},
		{"lease_id of 16", "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"lease_id":"` + long(16) + `"}`},
		{"lease_id of 128", "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"lease_id":"` + strings.Repeat("aZ9_-", 25) + `abc"}`},
		{"wait_ms and lock_delay_ms at their maximum", "/v1/locks/acquire", `{"name":"a","ttl_ms":1000,"wait_ms":300000,"lock_delay_ms":60000}`},
		{"all fields", "/v1/locks/acquire", `{"name":"a","owner":"w","ttl_ms":1000,"lease_id":"` + leaseA + `","wait_ms":0,"lock_delay_ms":0}`},
		{"trailing whitespace", "/v1/locks/acquire", "{\"name\":\"a\",\"ttl_ms\":1000}\r\n\t "},
		{"transfer with {}", "/v1/cluster/transfer-leadership", `{}`},
		{"transfer to a node", "/v1/cluster/transfer-leadership", `{"id":"n2"}`},
		{"join without http_addr", "/v1/cluster/join", `{"id":"n4","raft_addr":"127.0.0.1:9004"}`},
		{"name with an escaped surrogate pair", "/v1/locks/acquire", `{"name":"a\ud83d\ude00","ttl_ms":1000}`},
		{"name with an escaped backslash before u", "/v1/locks/acquire", `{"name":"a\\ud800","ttl_ms":1000}`},
		{"name with other escapes", "/v1/locks/acquire", `{"name":"\"\\\/\u00e9","ttl_ms":1000}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, newServer(newLeader("n1")), http.MethodPost, tc.path, tc.body)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200; body %s", rec.Code, rec.Body)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	// A body of exactly 64 KiB is allowed: a valid object padded with spaces.
	valid := `{"name":"a","ttl_ms":1000}`
	exact := valid + strings.Repeat(" ", api.MaxBody-len(valid))
	rec := do(t, newServer(newLeader("n1")), http.MethodPost, "/v1/locks/acquire", exact)
	if rec.Code != http.StatusOK {
		t.Fatalf("a body of exactly %d bytes: status %d, body %s", api.MaxBody, rec.Code, rec.Body)
	}

	over := exact + " "
	hugeName := `{"name":"` + strings.Repeat("n", 100<<10) + `","ttl_ms":1000}`
	for _, path := range []string{"/v1/locks/acquire", "/v1/locks/renew", "/v1/locks/release",
		"/v1/cluster/join", "/v1/cluster/leave", "/v1/cluster/transfer-leadership"} {
		for i, body := range []string{over, hugeName, "[" + strings.Repeat("1,", 40<<10) + "1]"} {
			t.Run(fmt.Sprintf("%s/%d", path, i), func(t *testing.T) {
				f := newLeader("n1")
				rec := do(t, newServer(f), http.MethodPost, path, body)
				wantError(t, rec, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "65536")
				if n := f.writes(); n != 0 {
					t.Errorf("the store saw %d writes for an oversized body", n)
				}
			})
		}
	}
}

// A body must be declared JSON: browsers send text/plain and forms
// cross-site without a preflight, so accepting them would let any web page
// take and release locks through a visitor's browser.
func TestWritesRequireJSON(t *testing.T) {
	refused := []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/json; charset=latin1", "application/jsonx", "json", "application/json;;"}
	for _, w := range writeRequests {
		for _, ct := range refused {
			t.Run(w.path+"/"+ct, func(t *testing.T) {
				f := newLeader("n1")
				rec := do(t, newServer(f), http.MethodPost, w.path, w.body, "Content-Type", ct)
				wantError(t, rec, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType, "application/json")
				if n := f.writes(); n != 0 {
					t.Errorf("the store saw %d writes", n)
				}
			})
		}
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		t.Run("accepted/"+ct, func(t *testing.T) {
			rec := do(t, newServer(newLeader("n1")), http.MethodPost, "/v1/locks/acquire", `{"name":"a","ttl_ms":1000}`, "Content-Type", ct)
			if rec.Code != http.StatusOK {
				t.Errorf("status %d, want 200; body %s", rec.Code, rec.Body)
			}
		})
	}
}
