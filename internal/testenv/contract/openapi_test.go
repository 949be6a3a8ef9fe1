package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// specPath is docs/openapi.yaml, found from this file so the test runs from
// any directory.
func specPath(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "openapi.yaml")
}

// loadSpec parses and validates the spec, with servers set to urls so the
// router matches requests to the test's nodes.
func loadSpec(t *testing.T, data []byte, urls []string) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("load docs/openapi.yaml: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	doc.Servers = nil
	for _, u := range urls {
		doc.Servers = append(doc.Servers, &openapi3.Server{URL: u})
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("router from spec: %v", err)
	}
	return doc, router
}

// checker sends requests to real nodes and validates every answer against
// the spec: status declared for the operation, body schema (no unknown or
// missing fields), required headers.
type checker struct {
	t      testing.TB
	doc    *openapi3.T
	router routers.Router
	hc     *http.Client
	token  string
	// seen records "operationId status" for the coverage check.
	seen map[string]bool
	// statuses records every status validated.
	statuses map[int]bool
}

func newChecker(t *testing.T, spec []byte, c *testenv.Cluster) *checker {
	doc, router := loadSpec(t, spec, c.Endpoints())
	return &checker{t: t, doc: doc, router: router, hc: c.HTTPClient(), seen: map[string]bool{}, statuses: map[int]bool{}}
}

type call struct {
	method, url string
	body        string
	contentType string // "" with a body: application/json; "-": none
	// invalid marks a request that breaks the spec on purpose (to draw an
	// error): only its answer is validated.
	invalid bool
}

// do sends cl and validates the answer; it returns the status and body.
func (c *checker) do(cl call) (int, []byte) {
	c.t.Helper()
	newReq := func() *http.Request {
		var body io.Reader
		if cl.body != "" {
			body = strings.NewReader(cl.body)
		}
		req, err := http.NewRequest(cl.method, cl.url, body)
		if err != nil {
			c.t.Fatalf("%s %s: %v", cl.method, cl.url, err)
		}
		switch {
		case cl.contentType == "-":
		case cl.contentType != "":
			req.Header.Set("Content-Type", cl.contentType)
		case cl.body != "":
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		return req
	}
	resp, err := c.hc.Do(newReq())
	if err != nil {
		c.t.Fatalf("%s %s: %v", cl.method, cl.url, err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: read body: %v", cl.method, cl.url, err)
	}
	c.statuses[resp.StatusCode] = true
	what := fmt.Sprintf("%s %s -> %d %s", cl.method, cl.url, resp.StatusCode, bytes.TrimSpace(respBody))

	vreq := newReq()
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		// No operation in the spec: only 404 (no such endpoint) and 405
		// (wrong method) may answer such a request, with the error body.
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			c.t.Errorf("%s: no operation in the spec: %v", what, err)
		}
		c.checkSchema(what, "Error", respBody)
		if resp.Header.Get("X-Raftlock-Node") == "" {
			c.t.Errorf("%s: no X-Raftlock-Node header", what)
		}
		return resp.StatusCode, respBody
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true, // a status the spec does not list fails
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	ctx := context.Background()
	if !cl.invalid {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			c.t.Errorf("%s: request does not match the spec: %v", what, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.t.Errorf("%s: answer does not match the spec: %v", what, err)
	}
	c.seen[fmt.Sprintf("%s %d", route.Operation.OperationID, resp.StatusCode)] = true
	return resp.StatusCode, respBody
}

// checkSchema validates body against a named component schema.
func (c *checker) checkSchema(what, name string, body []byte) {
	c.t.Helper()
	ref := c.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		c.t.Fatalf("no schema %s in the spec", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.t.Errorf("%s: body is not JSON: %v", what, err)
		return
	}
	if err := ref.Value.VisitJSON(v); err != nil {
		c.t.Errorf("%s: body does not match schema %s: %v", what, name, err)
	}
}

// want fails the test unless status is one of codes.
func (c *checker) want(status int, body []byte, codes ...int) {
	c.t.Helper()
	if !slices.Contains(codes, status) {
		c.t.Fatalf("status %d (%s), want %v", status, bytes.TrimSpace(body), codes)
	}
}

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

func readSpec(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(specPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenAPIMatchesCluster drives a real 3-node cluster through every
// operation of docs/openapi.yaml, successes and errors, and validates each
// request and answer against the spec.
func TestOpenAPIMatchesCluster(t *testing.T) {
	spec := readSpec(t)
	cl := testenv.Start(t, 3)
	runContract(t, spec, cl)
}

// TestOpenAPIDetectsDrift makes sure the check can fail: with the lease's
// fencing_token renamed in the spec (as if the server had renamed it), an
// acquire's answer must be refused.
func TestOpenAPIDetectsDrift(t *testing.T) {
	spec := readSpec(t)
	broken := spec
	for _, r := range [][2]string{
		{"required: [name, owner, lease_id, fencing_token, ttl_ms]", "required: [name, owner, lease_id, fence, ttl_ms]"},
		{"        fencing_token: {type: integer, minimum: 1}", "        fence: {type: integer, minimum: 1}"},
	} {
		next := bytes.Replace(broken, []byte(r[0]), []byte(r[1]), 1)
		if bytes.Equal(next, broken) {
			t.Fatalf("%q is no longer in the spec; update this test", r[0])
		}
		broken = next
	}
	cl := testenv.Start(t, 1)
	c := newChecker(t, broken, cl)
	rec := &recorder{TB: t}
	c.t = rec
	st, b := c.do(call{method: "POST", url: cl.Nodes[0].URL() + "/v1/locks/acquire", body: `{"name":"drift","ttl_ms":10000}`})
	c.want(st, b, 200)
	if len(rec.errs) == 0 {
		t.Fatal("an acquire answer passed a spec whose lease has no fencing_token: the check cannot catch drift")
	}
	t.Logf("refused as it should be: %s", rec.errs[0])
}

// TestOpenAPIDetectsPermitDrift does the same for a semaphore permit: with
// its slot renamed in the spec, an acquire's answer must be refused.
func TestOpenAPIDetectsPermitDrift(t *testing.T) {
	spec := readSpec(t)
	old := "required: [name, owner, lease_id, slot, fencing_token, limit, ttl_ms]"
	broken := bytes.Replace(spec, []byte(old), []byte("required: [name, owner, lease_id, permit_slot, fencing_token, limit, ttl_ms]"), 1)
	if bytes.Equal(broken, spec) {
		t.Fatalf("%q is no longer in the spec; update this test", old)
	}
	cl := testenv.Start(t, 1)
	c := newChecker(t, broken, cl)
	rec := &recorder{TB: t}
	c.t = rec
	testenv.WaitFor(t, 15*time.Second, "a semaphore acquire (command format 5)", func() bool {
		st, b := c.do(call{method: "POST", url: cl.Nodes[0].URL() + "/v1/semaphores/acquire", body: `{"name":"drift","limit":1,"ttl_ms":10000,"lease_id":"drift-permit-000000"}`})
		c.want(st, b, 200, 503)
		return st == 200
	})
	if len(rec.errs) == 0 || !strings.Contains(rec.errs[len(rec.errs)-1], "permit_slot") {
		t.Fatalf("a permit answer passed a spec that requires permit_slot: the check cannot catch drift (%q)", rec.errs)
	}
	t.Logf("refused as it should be: %s", rec.errs[len(rec.errs)-1])
}

// recorder keeps Errorf calls instead of failing the test; Fatalf still fails.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func runContract(t *testing.T, spec []byte, cl *testenv.Cluster) {
	c := newChecker(t, spec, cl)
	leader := cl.Leader()
	follower := cl.Followers()[0]
	L, F := leader.URL(), follower.URL()

	// Probes, metrics and the cluster view on every node.
	for _, n := range cl.Nodes {
		st, b := c.do(call{method: "GET", url: n.URL() + "/healthz"})
		c.want(st, b, 200)
		testenv.WaitFor(t, 10*time.Second, n.ID+" ready", func() bool {
			st, _ := c.do(call{method: "GET", url: n.URL() + "/readyz"})
			return st == 200
		})
		st, b = c.do(call{method: "GET", url: n.URL() + "/v1/cluster"})
		c.want(st, b, 200)
	}
	st, b := c.do(call{method: "GET", url: F + "/metrics"})
	c.want(st, b, 200)
	// Every member's own progress, asked by a follower: all reachable, all
	// ready (each answered /readyz 200 above), the lag known.
	testenv.WaitFor(t, 10*time.Second, "every member reachable and ready", func() bool {
		st, b := c.do(call{method: "GET", url: F + "/v1/cluster/members"})
		c.want(st, b, 200)
		ms := decode[api.Members](t, b)
		if len(ms.Members) != len(cl.Nodes) {
			return false
		}
		for _, m := range ms.Members {
			if !m.Reachable || !m.Ready || m.Lag == nil || m.AppliedIndex == 0 || m.Term == 0 {
				return false
			}
		}
		return true
	})

	// Locks, through a follower (forwarded) and the leader.
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-a","owner":"worker-a","ttl_ms":10000}`})
	c.want(st, b, 200)
	lease := decode[struct {
		LeaseID string `json:"lease_id"`
	}](t, b)
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/acquire", body: fmt.Sprintf(`{"name":"contract-a","owner":"worker-a","ttl_ms":10000,"lease_id":%q}`, lease.LeaseID)})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"contract-a","owner":"worker-b","ttl_ms":10000,"wait_ms":0,"lock_delay_ms":0}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-b","owner":"worker-b","ttl_ms":10000,"lease_id":"bbbbbbbbbbbbbbbbbbbb"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/renew", body: fmt.Sprintf(`{"name":"contract-a","lease_id":%q,"ttl_ms":20000}`, lease.LeaseID)})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/renew", body: `{"name":"contract-a","lease_id":"zzzzzzzzzzzzzzzzzzzz"}`})
	c.want(st, b, 409)
	// A value update (503 not_supported_yet until the leader's survey finds
	// every node at command format 4), not_holder for another lease, and a
	// blocking read with an older index (answered at once).
	testenv.WaitFor(t, 15*time.Second, "a value update", func() bool {
		st, b := c.do(call{method: "POST", url: F + "/v1/locks/update", body: fmt.Sprintf(`{"name":"contract-a","lease_id":%q,"value":"10.0.0.1:80"}`, lease.LeaseID)})
		c.want(st, b, 200, 503)
		return st == 200
	})
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/update", body: `{"name":"contract-a","lease_id":"zzzzzzzzzzzzzzzzzzzz","value":""}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "GET", url: F + "/v1/locks/contract-a?index=1&wait_ms=60000"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "GET", url: F + "/v1/locks/contract-a"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "GET", url: F + "/v1/locks/contract-free?stale=true"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "GET", url: L + "/v1/locks?prefix=contract-&limit=1"})
	c.want(st, b, 200)
	if !decode[struct {
		Truncated bool `json:"truncated"`
	}](t, b).Truncated {
		t.Errorf("list with limit=1 of two locks: not truncated: %s", b)
	}
	st, b = c.do(call{method: "GET", url: F + "/v1/locks?prefix=" + url.QueryEscape("contract-") + "&stale=true"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/release", body: `{"name":"contract-a","lease_id":"zzzzzzzzzzzzzzzzzzzz"}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/release", body: fmt.Sprintf(`{"name":"contract-a","lease_id":%q}`, lease.LeaseID)})
	c.want(st, b, 200)
	// Force release (tokens off: anyone may): 503 not_supported_yet until
	// the leader's survey finds every node at command format 3, then the
	// lease it ended, then nothing left to end.
	testenv.WaitFor(t, 15*time.Second, "a force release", func() bool {
		st, b := c.do(call{method: "POST", url: F + "/v1/locks/release", body: `{"name":"contract-b","force":true}`})
		c.want(st, b, 200, 503)
		return st == 200
	})
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/release", body: `{"name":"contract-b","force":true}`})
	c.want(st, b, 200)

	// A batch: each call answered as it would be alone, in the order sent,
	// through a follower (each call forwarded) and on the leader.
	st, b = c.do(call{method: "POST", url: F + "/v1/batch", body: `{"calls":[` +
		`{"path":"/v1/locks/acquire","body":{"name":"contract-batch","owner":"o","ttl_ms":10000,"lease_id":"batchbatchbatch-01"}},` +
		`{"path":"/v1/locks/release","body":{"name":"contract-nothing","lease_id":"batchbatchbatch-02"}}]}`})
	c.want(st, b, 200)
	res := decode[api.BatchAnswer](t, b).Results
	if len(res) != 2 || res[0].Status != 200 || res[1].Status != 409 {
		t.Fatalf("batch through a follower: %s, want an acquire's 200 then a release's 409", b)
	}
	st, b = c.do(call{method: "POST", url: L + "/v1/batch", body: `{"calls":[` +
		`{"path":"/v1/locks/renew","body":{"name":"contract-batch","lease_id":"batchbatchbatch-01","ttl_ms":20000}},` +
		`{"path":"/v1/locks/acquire","body":{"name":"contract-batch","ttl_ms":10000}}]}`})
	c.want(st, b, 200)
	if !strings.Contains(string(b), `"status":200`) || !strings.Contains(string(b), `"status":409`) {
		t.Fatalf("batch on the leader: %s, want a renew's 200 and a held acquire's 409", b)
	}

	// A lock delay: held answers carry retry_after_ms once the lease expires.
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"contract-d","ttl_ms":500,"lock_delay_ms":60000}`})
	c.want(st, b, 200)
	testenv.WaitFor(t, 15*time.Second, "a held answer with retry_after_ms", func() bool {
		st, b := c.do(call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"contract-d","ttl_ms":500}`})
		c.want(st, b, 409)
		return strings.Contains(string(b), `"retry_after_ms"`)
	})

	// Client errors. The too-large body is one byte over the limit: the node
	// reads it all before answering, so the client's write is not reset.
	tooLarge := `{"name":"","ttl_ms":10000}`
	tooLarge = `{"name":"` + strings.Repeat("x", api.MaxBody+1-len(tooLarge)) + `","ttl_ms":10000}`
	for _, e := range []struct {
		call
		status int
	}{
		{call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":`, invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"x","ttl_ms":10000,"TTL_MS":1}`, invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/locks/renew", body: `{"name":"x"}`, invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/locks/release", body: `{"name":"x","lease_id":"short"}`, invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/locks/release", body: `{"name":"x"}`}, 400},
		{call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"x","ttl_ms":10000}`, contentType: "-", invalid: true}, 415},
		{call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"x","ttl_ms":10000}`, contentType: "text/plain", invalid: true}, 415},
		{call{method: "POST", url: L + "/v1/locks/acquire", body: tooLarge, invalid: true}, 413},
		{call{method: "GET", url: F + "/v1/locks/x?stale=maybe", invalid: true}, 400},
		{call{method: "GET", url: L + "/v1/locks?prefix=%zz", invalid: true}, 400},
		{call{method: "GET", url: L + "/v1/locks?limit=0", invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/batch", body: `{"calls":[]}`, invalid: true}, 400},
		{call{method: "POST", url: F + "/v1/batch", body: `{"calls":[{"path":"/v1/sessions","body":{}}]}`, invalid: true}, 400},
		{call{method: "POST", url: L + "/v1/batch", body: `{"calls":[{"path":"/v1/locks/acquire","body":{"name":"x","wait_ms":100}}]}`}, 200},
		{call{method: "GET", url: F + "/v1/nothing-here"}, 404},
		{call{method: "PUT", url: F + "/v1/cluster", body: `{}`}, 405},
		{call{method: "POST", url: L + "/v1/cluster/join", body: `{"id":"n9","raft_addr":"0.0.0.0:0"}`, invalid: true}, 400},
		{call{method: "POST", url: F + "/v1/cluster/leave", body: `{"id":"nobody"}`}, 404},
	} {
		st, b := c.do(e.call)
		c.want(st, b, e.status)
	}

	// Sessions, shared locks and semaphores (command format 5).
	runFormat5Contract(t, c, L, F)

	// Backup and restore: the leader only, the file back as it came.
	st, b = c.do(call{method: "GET", url: F + "/v1/snapshot"})
	c.want(st, b, 503)
	st, backup := c.do(call{method: "GET", url: L + "/v1/snapshot"})
	c.want(st, backup, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/snapshot", body: string(backup), contentType: "application/octet-stream"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/snapshot", body: "not a backup file", contentType: "application/octet-stream"})
	c.want(st, b, 400)
	st, b = c.do(call{method: "POST", url: L + "/v1/snapshot", body: `{}`, invalid: true})
	c.want(st, b, 415)

	// Membership and admin calls. n9 never comes up: it joins as a
	// non-voter, which cannot cost the quorum, and leaves again.
	st, b = c.do(call{method: "POST", url: F + "/v1/cluster/join", body: `{"id":"n9","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "GET", url: L + "/v1/cluster"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/cluster/leave", body: `{"id":"n9"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/cluster/check-state", body: `{}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/cluster/transfer-leadership", body: `{"id":"` + leader.ID + `"}`})
	c.want(st, b, 200)
	if tr := decode[api.Transferred](t, b); tr.Leader != leader.ID || tr.Message == "" {
		t.Errorf("transfer to the leader itself: %s, want it named with a message", b)
	}
	st, b = c.do(call{method: "POST", url: F + "/v1/cluster/transfer-leadership", body: `{}`})
	c.want(st, b, 200)

	// No leader: stop two of three, and ask the one left.
	last := cl.Nodes[2]
	for _, n := range cl.Nodes[:2] {
		n.Kill()
	}
	// Not /readyz: a node that was just handed leadership is not ready until
	// its Barrier commits, yet still leads, and a write it takes then may
	// commit or not (504, correctly). Wait until it knows no leader at all.
	testenv.WaitFor(t, 15*time.Second, "the last node to know no leader", func() bool {
		id, _ := last.Leader()
		return id == ""
	})
	st, b = c.do(call{method: "POST", url: last.URL() + "/v1/locks/acquire", body: `{"name":"contract-x","ttl_ms":10000}`})
	c.want(st, b, 503)
	st, b = c.do(call{method: "GET", url: last.URL() + "/v1/locks/contract-x"})
	c.want(st, b, 503)

	// Every operation answered 2xx at least once.
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			ok := false
			for code := 200; code < 300; code++ {
				ok = ok || c.seen[fmt.Sprintf("%s %d", op.OperationID, code)]
			}
			if !ok {
				t.Errorf("%s %s (%s): never answered 2xx in this test", method, path, op.OperationID)
			}
		}
	}
	for _, code := range []int{400, 404, 405, 409, 413, 415, 503} {
		if !c.statuses[code] {
			t.Errorf("status %d never checked", code)
		}
	}
}

// TestOpenAPISingleNodeTransfer checks the 409 no_successor of a
// leadership transfer with nobody to take over, which a 3-node cluster
// never answers.
func TestOpenAPISingleNodeTransfer(t *testing.T) {
	cl := testenv.Start(t, 1)
	c := newChecker(t, readSpec(t), cl)
	testenv.WaitFor(t, 15*time.Second, "the node to lead", func() bool {
		id, _ := cl.Nodes[0].Leader()
		return id != ""
	})
	st, b := c.do(call{method: "POST", url: cl.Nodes[0].URL() + "/v1/cluster/transfer-leadership", body: `{}`})
	c.want(st, b, 409)
	if e := decode[api.Error](t, b); e.Error != api.CodeNoSuccessor {
		t.Errorf("transfer on one node: %s, want no_successor", b)
	}
}

// TestOpenAPIAuthErrors checks 401 and 403 on a node with tokens.
func TestOpenAPIAuthErrors(t *testing.T) {
	ro, rw := strings.Repeat("r", 24), strings.Repeat("w", 24)
	admin := strings.Repeat("a", 24)
	cl := testenv.Start(t, 1, testenv.Options{Tokens: admin + " admin\n" + rw + " read-write\n" + ro + " read-only\n"})
	c := newChecker(t, readSpec(t), cl)
	u := cl.Nodes[0].URL()
	st, b := c.do(call{method: "GET", url: u + "/v1/cluster"})
	c.want(st, b, 401)
	st, b = c.do(call{method: "GET", url: u + "/v1/cluster/members"})
	c.want(st, b, 401)
	c.token = "unknown-token-unknown"
	st, b = c.do(call{method: "GET", url: u + "/v1/locks"})
	c.want(st, b, 401)
	c.token = ro
	st, b = c.do(call{method: "GET", url: u + "/v1/locks"})
	c.want(st, b, 200)
	// The member view passes the caller's token on: the node itself answers.
	st, b = c.do(call{method: "GET", url: u + "/v1/cluster/members"})
	c.want(st, b, 200)
	if ms := decode[api.Members](t, b); len(ms.Members) != 1 || !ms.Members[0].Reachable {
		t.Errorf("members with a read-only token: %s", b)
	}
	st, b = c.do(call{method: "POST", url: u + "/v1/locks/acquire", body: `{"name":"a","ttl_ms":10000}`})
	c.want(st, b, 403)
	c.token = rw
	st, b = c.do(call{method: "POST", url: u + "/v1/cluster/check-state", body: `{}`})
	c.want(st, b, 403)
	st, b = c.do(call{method: "POST", url: u + "/v1/locks/release", body: `{"name":"a","force":true}`})
	c.want(st, b, 403)
	c.token = ""
	st, b = c.do(call{method: "GET", url: u + "/healthz"})
	c.want(st, b, 200)
}

// notAPI are routes that serve no JSON contract: the status page's files.
var notAPI = map[string]bool{"GET /ui/": true}

var roleLine = regexp.MustCompile(`(?m)^\s*"(GET|POST|PUT|DELETE|PATCH) (/[^"]*)":`)

// TestOpenAPICoversEveryRoute reads the server's route table (httpapi's
// routeRoles, which every route must be in or it needs admin) and wants an
// operation in the spec for each, and no operation the server lacks.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(filepath.Dir(specPath(t)), "..", "httpapi", "auth.go"))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := loadSpec(t, readSpec(t), nil)
	routes := map[string]bool{}
	for _, m := range roleLine.FindAllStringSubmatch(string(src), -1) {
		key := m[1] + " " + strings.ReplaceAll(m[2], "{name:.+}", "{name}")
		if notAPI[key] {
			continue
		}
		routes[key] = true
		item := doc.Paths.Find(strings.SplitN(key, " ", 2)[1])
		if item == nil || item.GetOperation(m[1]) == nil {
			t.Errorf("%s is served but not in docs/openapi.yaml", key)
		}
	}
	if len(routes) < 10 {
		t.Fatalf("found %d routes in httpapi/auth.go: the parsing is broken", len(routes))
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !routes[method+" "+path] {
				t.Errorf("%s %s is in docs/openapi.yaml but the server has no such route", method, path)
			}
		}
	}
}

// runFormat5Contract drives sessions, shared locks and semaphores (command
// format 5) through follower F (forwarded) and leader L.
func runFormat5Contract(t *testing.T, c *checker, L, F string) {
	const sessB = "contract-session-bbbbbbbb"
	st, b := c.do(call{method: "GET", url: F + "/v1/sessions/" + sessB})
	c.want(st, b, 404)
	st, b = c.do(call{method: "GET", url: F + "/v1/semaphores/contract-sem"})
	c.want(st, b, 200)

	// A session (503 until the leader's survey finds every node at format 5).
	var sess api.Session
	testenv.WaitFor(t, 15*time.Second, "a session create", func() bool {
		st, b := c.do(call{method: "POST", url: F + "/v1/sessions", body: `{"owner":"contract","ttl_ms":10000,"lock_delay_ms":0}`})
		c.want(st, b, 200, 503)
		sess = decode[api.Session](t, b)
		return st == 200
	})
	sid := sess.SessionID
	st, b = c.do(call{method: "POST", url: L + "/v1/sessions", body: `{"owner":"contract","ttl_ms":10000,"session_id":"` + sessB + `"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/sessions/renew", body: `{"session_id":"` + sid + `","ttl_ms":20000}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/sessions/renew", body: `{"session_id":"contract-nobody-nobody"}`})
	c.want(st, b, 404)

	// Locks in the session, and a shared lock with two readers.
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-s1","owner":"contract","session_id":"` + sid + `"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-s2","session_id":"contract-nobody-nobody"}`})
	c.want(st, b, 404)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-r","owner":"r1","ttl_ms":10000,"mode":"shared"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/locks/acquire", body: `{"name":"contract-r","owner":"r2","session_id":"` + sid + `","mode":"shared"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"contract-r","owner":"w","ttl_ms":10000,"mode":"exclusive"}`})
	c.want(st, b, 409)
	if len(decode[api.HeldError](t, b).Holders) != 2 {
		t.Errorf("held by two readers: %s", b)
	}
	st, b = c.do(call{method: "GET", url: F + "/v1/locks/contract-r"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "GET", url: F + "/v1/locks/contract-r?stale=true"})
	c.want(st, b, 200)

	// Semaphores: a permit in the session, one with a TTL, full, mismatch.
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/acquire", body: `{"name":"contract-sem","limit":2,"owner":"p0","session_id":"` + sid + `"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/acquire", body: `{"name":"contract-sem","limit":2,"owner":"p1","ttl_ms":10000,"lease_id":"contract-permit-1111","wait_ms":0}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/semaphores/acquire", body: `{"name":"contract-sem","limit":2,"owner":"p2","ttl_ms":10000}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/acquire", body: `{"name":"contract-sem","limit":3,"owner":"p2","ttl_ms":10000}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/acquire", body: `{"name":"contract-sem","limit":2,"session_id":"contract-nobody-nobody"}`})
	c.want(st, b, 404)
	st, b = c.do(call{method: "GET", url: F + "/v1/semaphores/contract-sem"})
	c.want(st, b, 200)
	if sem := decode[api.Semaphore](t, b); sem.Limit != 2 || len(sem.Holders) != 2 {
		t.Errorf("semaphore read: %s", b)
	}
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/renew", body: `{"name":"contract-sem","lease_id":"contract-permit-1111","ttl_ms":20000}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/semaphores/renew", body: `{"name":"contract-sem","lease_id":"contract-permit-2222"}`})
	c.want(st, b, 409)
	st, b = c.do(call{method: "POST", url: L + "/v1/semaphores/release", body: `{"name":"contract-sem","lease_id":"contract-permit-1111"}`})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: L + "/v1/semaphores/release", body: `{"name":"contract-sem","lease_id":"contract-permit-1111"}`})
	c.want(st, b, 409)

	// The session's read, then its close ends its three leases.
	st, b = c.do(call{method: "GET", url: F + "/v1/sessions/" + sid})
	c.want(st, b, 200)
	if info := decode[api.SessionInfo](t, b); len(info.Leases) != 3 {
		t.Errorf("session read: %s, want 3 leases", b)
	}
	st, b = c.do(call{method: "GET", url: L + "/v1/sessions/" + sid + "?stale=true"})
	c.want(st, b, 200)
	st, b = c.do(call{method: "POST", url: F + "/v1/sessions/close", body: `{"session_id":"` + sid + `"}`})
	c.want(st, b, 200)
	if cl := decode[api.SessionClosed](t, b); cl.Released != 3 {
		t.Errorf("close: %s, want 3 released", b)
	}
	st, b = c.do(call{method: "POST", url: F + "/v1/sessions/close", body: `{"session_id":"` + sid + `"}`})
	c.want(st, b, 404)
	st, b = c.do(call{method: "POST", url: F + "/v1/sessions/close", body: `{"session_id":"` + sessB + `"}`})
	c.want(st, b, 200)

	// Bad requests: 400 naming the field.
	for _, e := range []call{
		{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"x","ttl_ms":10000,"session_id":"` + sessB + `"}`, invalid: true},
		{method: "POST", url: F + "/v1/locks/acquire", body: `{"name":"x","ttl_ms":10000,"mode":"shared","lock_delay_ms":5}`},
		{method: "POST", url: L + "/v1/semaphores/acquire", body: `{"name":"x","limit":0,"ttl_ms":10000}`, invalid: true},
		{method: "POST", url: L + "/v1/semaphores/acquire", body: `{"name":"x","limit":1,"ttl_ms":10000,"lock_delay_ms":0}`, invalid: true},
		{method: "POST", url: F + "/v1/sessions", body: `{"owner":"x"}`, invalid: true},
		{method: "GET", url: F + "/v1/sessions/short", invalid: true},
	} {
		st, b := c.do(e)
		c.want(st, b, 400)
	}
}
