// Package ui is the status page every node serves at /ui/: plain HTML, CSS
// and a little JavaScript embedded in the binary, no build step. The page
// holds no data itself; its script polls the node's JSON API (GET
// /v1/cluster, /v1/cluster/members, /readyz, /v1/locks) with the bearer
// token the user pastes, so it shows no more than that token may read.
// Locks are read linearizably (the leader adds time left and waiters),
// stale when no leader answers. Recent changes are found by diffing
// successive lock lists in the page.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the page is served under.
const Prefix = "/ui/"

// Handler serves the page's files under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	files := http.StripPrefix(Prefix, http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Only our own files and our own API: a pasted token cannot leave
		// the node through an injected script or image.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
