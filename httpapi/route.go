package httpapi

import (
	"net/http"
	"strings"
)

// lockPathPrefix is the path of GET /v1/locks/{name:.+} before the name.
const lockPathPrefix = "/v1/locks/"

// hotRoutes serves the routes every lock cycle takes (acquire, renew,
// release, a batch of them and a lock's read) without the router's matching: a regexp run
// per route tried, a map of path variables and two copies of the request
// to carry the match. It picks exactly the route the router would: the router
// matches the escaped path (UseEncodedPath, SkipClean) against each
// route's template and method in order, and a request whose path was sent
// escaped (RawPath set) or that is not plainly one of these goes to the
// router. The handler run is the route's own chain, so metrics, in-flight
// cap, authorization and body rules are the same either way.
type hotRoutes struct {
	router                                    http.Handler
	acquire, renew, release, getByName, batch hotRoute
}

// hotRoute is one route's chain, and its template for the tests.
type hotRoute struct {
	tmpl  string
	chain http.Handler
}

// add notes the chain of one route if it is a hot one.
func (h *hotRoutes) add(method, tmpl string, chain http.Handler) {
	switch method + " " + tmpl {
	case "POST /v1/locks/acquire":
		h.acquire = hotRoute{tmpl, chain}
	case "POST /v1/locks/renew":
		h.renew = hotRoute{tmpl, chain}
	case "POST /v1/locks/release":
		h.release = hotRoute{tmpl, chain}
	case "POST " + pathBatch:
		h.batch = hotRoute{tmpl, chain}
	case "GET " + lockPathPrefix + "{name:.+}":
		h.getByName = hotRoute{tmpl, chain}
	}
}

func (h *hotRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if route := h.match(r); route != nil {
		route.chain.ServeHTTP(w, r)
		return
	}
	h.router.ServeHTTP(w, r)
}

// match returns the hot route r is for, nil when r is for the router.
func (h *hotRoutes) match(r *http.Request) *hotRoute {
	if r.URL.RawPath != "" {
		return nil
	}
	switch r.Method {
	case http.MethodPost:
		switch r.URL.Path {
		case "/v1/locks/acquire":
			return &h.acquire
		case "/v1/locks/renew":
			return &h.renew
		case "/v1/locks/release":
			return &h.release
		case pathBatch:
			return &h.batch
		}
	case http.MethodGet:
		// No route before GET /v1/locks/{name:.+} matches a GET of such a
		// path (the POSTs under /v1/locks/ differ in method), and its
		// ".+" takes any non-empty rest: an escaped path has no newline.
		if name, ok := strings.CutPrefix(r.URL.Path, lockPathPrefix); ok && name != "" {
			return &h.getByName
		}
	}
	return nil
}

// lockPathName is the {name} of GET /v1/locks/{name:.+}, still escaped,
// as the router would give it: the rest of the escaped path.
func lockPathName(r *http.Request) string {
	return strings.TrimPrefix(r.URL.EscapedPath(), lockPathPrefix)
}
