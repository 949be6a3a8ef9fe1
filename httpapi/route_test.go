package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// TestHotRoutesMatchTheRouter checks that every request the hot routes
// take is one the router would give the same route, with the same path
// variable, and that they take the plain forms of all four.
func TestHotRoutesMatchTheRouter(t *testing.T) {
	s := New(newLeader("n1"), Options{})
	router := s.routes.router.(*mux.Router)
	cases := []struct {
		method, target string
		hot            bool
	}{
		{"POST", "/v1/locks/acquire", true},
		{"POST", "/v1/locks/renew", true},
		{"POST", "/v1/locks/release", true},
		{"GET", "/v1/locks/a", true},
		{"GET", "/v1/locks/a/b/c", true},
		{"GET", "/v1/locks/acquire", true},
		{"GET", "/v1/locks/a%20b", true},
		{"GET", "/v1/locks/a%2Fb", false}, // sent escaped: RawPath
		{"GET", "/v1/locks/%61", false},
		{"GET", "/v1/locks//x", true},
		{"GET", "/v1/locks/", false},
		{"GET", "/v1/locks", false},
		{"HEAD", "/v1/locks/a", false},
		{"POST", "/v1/locks/a", false},
		{"POST", "/v1/locks/update", false},
		{"POST", "/v1/locks/acquire/", false},
		{"POST", "/v1/locks//acquire", false},
		{"POST", "/v1/locks/%61cquire", false},
		{"PUT", "/v1/locks/acquire", false},
		{"GET", "/v1/semaphores/a", false},
		{"POST", "/v1/sessions", false},
		{"GET", "/healthz", false},
		{"GET", "http://h/v1/locks/x", true},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.target, nil)
		got := s.routes.match(r)
		if (got != nil) != c.hot {
			t.Errorf("%s %s: hot route %v, want %v", c.method, c.target, got != nil, c.hot)
		}
		if got == nil {
			continue
		}
		var m mux.RouteMatch
		if !router.Match(r, &m) || m.MatchErr != nil {
			t.Errorf("%s %s: hot route %s, the router matches none (%v)", c.method, c.target, got.tmpl, m.MatchErr)
			continue
		}
		tmpl, _ := m.Route.GetPathTemplate()
		methods, _ := m.Route.GetMethods()
		if tmpl != got.tmpl || len(methods) != 1 || methods[0] != c.method {
			t.Errorf("%s %s: hot route %s, the router's %v %s", c.method, c.target, got.tmpl, methods, tmpl)
		}
		if name, ok := m.Vars["name"]; ok && name != lockPathName(r) {
			t.Errorf("%s %s: name %q, the router's %q", c.method, c.target, lockPathName(r), name)
		}
	}
}

// TestHotRoutesServeLikeTheRouter sends requests of the hot routes to a
// server and to one whose hot routes are off (all through the router) and
// compares the answers' status and error code.
func TestHotRoutesServeLikeTheRouter(t *testing.T) {
	const lease = "0123456789abcdef0123456789abcdef"
	acquire := `{"name":"a","owner":"o","lease_id":"` + lease + `","ttl_ms":10000}`
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/locks/acquire", acquire},
		{"POST", "/v1/locks/acquire", `{"name":"","owner":"o","lease_id":"` + lease + `","ttl_ms":10000}`},
		{"GET", "/v1/locks/a", ""},
		{"GET", "/v1/locks/b c", ""},
		{"GET", "/v1/locks/b%zz", ""},
		{"GET", "/v1/locks/\x00", ""},
		{"POST", "/v1/locks/renew", `{"name":"a","lease_id":"` + lease + `","ttl_ms":10000}`},
		{"POST", "/v1/locks/release", `{"name":"a","lease_id":"` + lease + `"}`},
		{"POST", "/v1/locks/release", `{"name":"a"`},
	} {
		var answers [2]string
		for i, viaRouter := range []bool{false, true} {
			s := New(newLeader("n1"), Options{})
			if viaRouter {
				s.handler = s.guard(s.identify(s.frame(s.routes.router)))
			}
			if c.body != acquire {
				post(t, s, "/v1/locks/acquire", acquire, nil)
			}
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			r := httptest.NewRequest(c.method, "/", body)
			r.URL.Path = c.path // unescaped, as net/http gives it
			r.Header.Set("Content-Type", "application/json")
			if s.routes.match(r) == nil {
				t.Fatalf("%s %s: not a hot route", c.method, c.path)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			var e struct{ Error string }
			_ = json.Unmarshal(w.Body.Bytes(), &e)
			answers[i] = fmt.Sprintf("%d %q", w.Code, e.Error)
		}
		if answers[0] != answers[1] {
			t.Errorf("%s %s: hot route answered %s, the router %s", c.method, c.path, answers[0], answers[1])
		}
	}
}
