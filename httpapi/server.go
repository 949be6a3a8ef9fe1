// Package httpapi serves raftlock's HTTP API (docs/API.md, the contract) on top of a
// small Store interface. Writes and linearizable reads that reach a follower
// are forwarded to the leader in exactly one hop (forward.go).
package httpapi

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi/ui"
	"github.com/raftlock/raftlock/internal/nodeapi"
)

// Store is what the API needs of a node. raftnode.Node implements it; tests
// use a struct of function fields. Reads get a read-only view: nothing here
// can change state except through Apply and Acquire, that is through Raft.
type Store interface {
	ID() string
	Leader() (id, httpAddr string)
	WaitForLeader(ctx context.Context) (id, httpAddr string, err error)
	Apply(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Acquire(ctx context.Context, cmd fsm.Command, wait time.Duration) (fsm.Result, error)
	Read(ctx context.Context, stale bool) (nodeapi.LockReader, error)
	Ready() bool
	Status() (nodeapi.Status, error)
	Join(ctx context.Context, id, raftAddr, httpAddr string) error
	Leave(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
	// CheckState runs a cross-replica state check and returns the index
	// every replica hashes its state at.
	CheckState(ctx context.Context) (uint64, error)
}

// Options tune the server; zero values take defaults.
type Options struct {
	Logger hclog.Logger
	// LeaderWait is how long a request waits for a leader to be known
	// before answering 503 no_leader. 0: 2s.
	LeaderWait time.Duration
	// RequestTimeout bounds one request's work, on top of any wait_ms. 0: 10s.
	RequestTimeout time.Duration
	// Registry receives the API's metrics and, unless Metrics is set, is
	// what /metrics serves. nil: a registry of the server's own.
	Registry *prometheus.Registry
	// Metrics, when set, serves /metrics instead of Registry.
	Metrics http.Handler
	// Tokens, when set, turns on bearer-token authentication (auth.go).
	// nil: every request is allowed.
	Tokens *Tokens
	// ForwardTLS, when set, makes forwarding to the leader use https with
	// this client config (the cluster's CA, and the node's certificate in
	// case the leader asks for one).
	ForwardTLS *tls.Config
	// Limits bound slow and numerous clients (limits.go).
	Limits Limits
	// Admission is the adaptive, per-tenant limit on writes (admission.go).
	Admission Admission
	// Caps are fixed per-tenant bounds on sessions, parked acquires and
	// blocking reads (caps.go).
	Caps TenantCaps
}

// Server is the HTTP API of one node.
type Server struct {
	store   Store
	opts    Options
	log     hclog.Logger
	handler http.Handler
	forward *forwarder
	rateLog *rateLogger // client-caused warnings, at a bounded rate
	// admission gates writes into the store; nil when off.
	admission *admitter
	caps      *tenantCaps
	// slots count the API requests being served (Limits.MaxInflight).
	slots chan struct{}
	// callWork hands a batch's calls to idle call workers (batch.go).
	callWork chan func()
	// routes serves the hot routes and hands the rest to the router.
	routes *hotRoutes
}

// New builds the API handler for store.
func New(store Store, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.LeaderWait == 0 {
		opts.LeaderWait = 2 * time.Second
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Metrics == nil {
		opts.Metrics = promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})
	}
	opts.Limits.setDefaults()
	s := &Server{store: store, opts: opts, log: opts.Logger.Named("http"), forward: newForwarder(store.ID(), opts.ForwardTLS)}
	s.rateLog = newRateLogger(s.log, 20, 10*time.Second)
	s.admission = newAdmitter(opts.Admission, opts.Registry)
	s.caps = newTenantCaps(opts.Caps, opts.Registry)
	r := mux.NewRouter().SkipClean(true).UseEncodedPath() // never redirect p//q to p/q: another lock
	// Each route's middleware chain is built once, here. mux's r.Use would
	// build it anew on every request: closures to allocate each time, and
	// no state kept in a middleware (the in-flight cap's slots) would outlive
	// the request. Like r.Use, the chain runs only on a matched route. It
	// is given its route (method and template) here, so nothing in it asks
	// the router which route matched: the hot routes (route.go) are served
	// without the router, through the same chain.
	metrics := newHTTPMetrics(opts.Registry)
	s.slots = make(chan struct{}, opts.Limits.MaxInflight)
	s.callWork = make(chan func())
	chain := func(method, tmpl string, h http.Handler) http.Handler {
		h = s.bodyFirst(tmpl == snapshotPath, h) // after authorize: no body is read for a client that may not send it
		if opts.Tokens != nil {
			h = s.authorize(routeRole(method, tmpl), h) // after instrument, so 401 and 403 are counted per route
		}
		return metrics.instrumentRoute(tmpl, s.inflight(h))
	}
	s.routes = &hotRoutes{router: r}
	handle := func(method, tmpl string, h http.HandlerFunc) {
		c := chain(method, tmpl, h)
		r.Handle(tmpl, c).Methods(method)
		s.routes.add(method, tmpl, c)
	}
	handle(http.MethodPost, "/v1/locks/acquire", writeHandler(s, acquireWait, s.acquire))
	handle(http.MethodPost, "/v1/locks/renew", writeHandler(s, nil, s.renew))
	handle(http.MethodPost, "/v1/locks/release", writeHandler(s, nil, s.release))
	handle(http.MethodPost, "/v1/locks/update", writeHandler(s, nil, s.update))
	handle(http.MethodPost, pathBatch, s.batch)
	handle(http.MethodGet, "/v1/locks", s.list)
	handle(http.MethodGet, "/v1/locks/{name:.+}", s.get)
	handle(http.MethodPost, "/v1/sessions", writeHandler(s, nil, s.createSession))
	handle(http.MethodPost, "/v1/sessions/renew", writeHandler(s, nil, s.renewSession))
	handle(http.MethodPost, "/v1/sessions/close", writeHandler(s, nil, s.closeSession))
	handle(http.MethodGet, "/v1/sessions/{id}", s.getSession)
	handle(http.MethodPost, "/v1/semaphores/acquire", writeHandler(s, semAcquireWait, s.acquireSemaphore))
	handle(http.MethodPost, "/v1/semaphores/renew", writeHandler(s, nil, s.renewSemaphore))
	handle(http.MethodPost, "/v1/semaphores/release", writeHandler(s, nil, s.releaseSemaphore))
	handle(http.MethodGet, "/v1/semaphores/{name:.+}", s.getSemaphore)
	handle(http.MethodGet, "/v1/cluster", s.cluster)
	handle(http.MethodGet, "/v1/cluster/members", s.members)
	handle(http.MethodPost, "/v1/cluster/join", writeHandler(s, nil, s.join))
	handle(http.MethodPost, "/v1/cluster/leave", writeHandler(s, nil, s.leave))
	handle(http.MethodPost, "/v1/cluster/transfer-leadership", writeHandler(s, nil, s.transfer))
	handle(http.MethodPost, "/v1/cluster/check-state", writeHandler(s, nil, s.checkState))
	handle(http.MethodGet, snapshotPath, s.saveSnapshot)
	handle(http.MethodPost, snapshotPath, s.restoreSnapshot) // binary body: bodyFirst leaves it (streamsBody)
	handle(http.MethodGet, "/healthz", s.healthz)
	handle(http.MethodGet, "/readyz", s.readyz)
	handle(http.MethodGet, "/metrics", opts.Metrics.ServeHTTP)
	r.PathPrefix(ui.Prefix).Handler(chain(http.MethodGet, ui.Prefix, ui.Handler())).Methods(http.MethodGet) // status page: static files, data by the API
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/" || r.URL.Path+"/" == ui.Prefix) {
			// Where a browser pointed at a node lands: the status page.
			w.Header().Set("Location", ui.Prefix)
			w.WriteHeader(http.StatusFound)
			return
		}
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusNotFound, api.CodeNotFound, "no such endpoint: " + r.URL.Path})
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuseBody(w, r)
		writeError(w, &apiError{http.StatusMethodNotAllowed, api.CodeBadRequest, r.Method + " is not allowed on " + r.URL.Path})
	})
	// Around the router, not r.Use: mux runs middleware only on a matched
	// route, and 404, 405 and redirects must carry the headers too.
	s.handler = s.guard(s.identify(s.frame(s.routes)))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// identify stamps every response with this node's id and the leader's.
// The header values are built once (per leader) and shared by every
// response: net/http only reads them, and an Add would copy.
func (s *Server) identify(next http.Handler) http.Handler {
	node := []string{s.store.ID()}
	var leader atomic.Pointer[[]string]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h[api.HeaderNode] = node
		if id, _ := s.store.Leader(); id != "" {
			l := leader.Load()
			if l == nil || (*l)[0] != id {
				l = &[]string{id}
				leader.Store(l)
			}
			h[api.HeaderLeader] = *l
		}
		next.ServeHTTP(w, r)
	})
}
