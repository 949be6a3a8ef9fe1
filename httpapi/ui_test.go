package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The status page is open like the probes (it holds no data), while the
// JSON it reads still needs a token; the page is served on every node,
// leader or not, without forwarding.
func TestStatusPageRoute(t *testing.T) {
	srv := httptest.NewServer(New(newLeader("n1"), Options{Tokens: testTokens(t), Metrics: http.NotFoundHandler()}))
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/ui/", http.StatusOK},
		{"/ui/app.js", http.StatusOK},
		{"/v1/cluster", http.StatusUnauthorized},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s without a token: %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
		if tc.status == http.StatusOK && resp.Header.Get("X-Raftlock-Node") != "n1" {
			t.Errorf("GET %s: no X-Raftlock-Node", tc.path)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("POST /ui/: 200, want it refused")
	}
}

// A browser pointed at a node (/, or /ui without its slash) lands on the
// status page; other unknown paths stay 404 with the JSON error body.
func TestStatusPageRedirects(t *testing.T) {
	h := New(newLeader("n1"), Options{Tokens: testTokens(t), Metrics: http.NotFoundHandler()})
	for _, path := range []string{"/", "/ui"} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			rec := do(t, h, method, path, "")
			if rec.Code != http.StatusFound || rec.Header().Get("Location") != "/ui/" {
				t.Errorf("%s %s: %d Location %q, want 302 to /ui/", method, path, rec.Code, rec.Header().Get("Location"))
			}
		}
	}
	wantError(t, do(t, h, http.MethodGet, "/nope", ""), http.StatusNotFound, "not_found", "/nope")
	rec := do(t, h, http.MethodPost, "/", "{}")
	if rec.Code == http.StatusFound {
		t.Errorf("POST / redirected")
	}
}
