package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	resp := rec.Result()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

var refAttr = regexp.MustCompile(`(?:src|href)="([^"]*)"`)

// The page is served, and everything it loads is one of our embedded files,
// by a relative path: no CDN, no other origin, nothing a build would make.
func TestPageReferencesOnlyEmbeddedAssets(t *testing.T) {
	h := Handler()
	resp, page := get(t, h, Prefix)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", Prefix, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy %q: want only this origin", csp)
	}
	refs := refAttr.FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %d assets, want the script and the stylesheet", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "/") {
			t.Errorf("index.html references %q: not a relative path to an embedded file", ref)
			continue
		}
		if _, err := fs.Stat(static, "static/"+ref); err != nil {
			t.Errorf("index.html references %q, which is not embedded: %v", ref, err)
		}
		resp, _ := get(t, h, Prefix+ref)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s%s: %d", Prefix, ref, resp.StatusCode)
		}
	}
	// The script reads only the node's own JSON API, by relative paths.
	_, js := get(t, h, Prefix+"app.js")
	for _, want := range []string{`"/v1/cluster"`, `"/v1/cluster/members"`, `"/readyz"`, `"/v1/locks?"`, `"Authorization"`} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js does not use %s", want)
		}
	}
	if strings.Contains(js, "innerHTML") {
		t.Error("app.js uses innerHTML: lock names and owners come from clients and must go in as text")
	}
	if resp, _ := get(t, h, Prefix+"nope.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET a missing asset: %d, want 404", resp.StatusCode)
	}
}
