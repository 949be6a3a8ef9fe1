package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/api"
)

// Limits bound what one client can hold of a node: time to send a request,
// header size, connections and requests in flight. Zero values take the
// defaults below.
//
// Why these and not others:
//   - A body gets BodyTimeout from the end of its headers, set per request
//     on the connection (ReadHeaderTimeout bounds the headers). It is a
//     deadline the handlers can move: to now, to refuse a body that will not
//     be read (refuseBody), and back to none once the body is read, so that
//     an acquire may wait its wait_ms (up to 300 s) after that. Go 1.26's
//     net/http also lifts the connection's read deadline when a body hits
//     EOF, so http.Server.ReadTimeout would not cut such a wait either; it
//     was not used because it cannot be moved per request and counts from
//     the first header byte.
//   - A connection cap cannot tell a probe from an API call: it is applied
//     before a byte is read. So connections are capped at MaxConns plus a
//     small ProbeReserve; a connection accepted into the reserve is served
//     only for /healthz and /readyz and answered 503 otherwise, at once,
//     before its body. Past both, connections are accepted and closed at
//     once, so that the kernel's backlog does not fill with clients nobody
//     will serve and the process never runs out of file descriptors.
//   - MaxInflight caps API requests being served (probes and /metrics are
//     not counted), so goroutines and buffers stay bounded however many
//     connections there are; beyond it requests get 429.
//   - MaxFirstReads caps new connections doing the work of their first
//     bytes at once: with TLS the handshake (a signature and a key
//     exchange, about a millisecond of CPU), without it the first request's
//     headers. A ramp opening thousands of connections would otherwise
//     make thousands of goroutines runnable at once, and every other
//     goroutine of the node (a probe's, a calm tenant's request, Raft's)
//     would wait behind all of them for its turn on the CPU. Gated, the
//     rest of the ramp waits blocked, off the run queue. A connection
//     takes a place only once its first bytes have arrived, and gives it
//     back at its next read (when the handshake waits for the client, or
//     the request is read), so a client that sends nothing, or dribbles,
//     holds no place.
type Limits struct {
	BodyTimeout    time.Duration // 0: 10s
	HeaderTimeout  time.Duration // 0: 10s
	IdleTimeout    time.Duration // 0: 2m
	MaxHeaderBytes int           // 0: 16 KiB (tokens and a few headers)
	// MaxConns is the number of API connections; 0: 4096, or less when the
	// file descriptor limit is lower (half of it, leaving the rest for Raft,
	// the stores and the reserve).
	MaxConns     int
	ProbeReserve int // 0: 64
	MaxInflight  int // 0: 2048
	// MaxFirstReads: 0: four per CPU the Go runtime uses (GOMAXPROCS), at
	// least 8.
	MaxFirstReads int
}

func (l *Limits) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.BodyTimeout, 10*time.Second)
	def(&l.HeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 2*time.Minute)
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	if l.MaxConns == 0 {
		l.MaxConns = 4096
		if fds := fdLimit(); fds > 0 && fds/2 < l.MaxConns {
			l.MaxConns = max(fds/2, 16)
		}
	}
	if l.ProbeReserve == 0 {
		l.ProbeReserve = 64
	}
	if l.MaxInflight == 0 {
		l.MaxInflight = 2048
	}
	if l.MaxFirstReads == 0 {
		l.MaxFirstReads = max(4*runtime.GOMAXPROCS(0), 8)
	}
}

// fdLimit is the soft limit on open files (Go raises it to the hard limit
// at start), 0 when unknown.
func fdLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

// HTTPServer returns the http.Server for this API with the limits applied:
// serve it on Listener(ln), which enforces the connection caps.
func (s *Server) HTTPServer(tlsConfig *tls.Config) *http.Server {
	l := s.opts.Limits
	return &http.Server{
		Handler:           s,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: l.HeaderTimeout,
		IdleTimeout:       l.IdleTimeout, // clients keep connections alive; dead ones must not pile up
		MaxHeaderBytes:    l.MaxHeaderBytes,
		// TLS handshake failures and the like: a flood must not flood the log.
		ErrorLog:    log.New(s.rateLog, "", 0),
		ConnContext: connContext,
	}
}

// Listener wraps ln with the connection caps of Limits.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: s.opts.Limits.MaxConns, reserve: s.opts.Limits.ProbeReserve, log: s.rateLog,
		firstReads: make(chan struct{}, s.opts.Limits.MaxFirstReads), firstReadWait: s.opts.Limits.HeaderTimeout}
}

// limitListener counts open connections: up to max they are served as
// usual, the next reserve ones only for probes, and the rest are closed as
// soon as they are accepted.
type limitListener struct {
	net.Listener
	max, reserve int
	open         atomic.Int64
	log          *rateLogger
	// firstReads are the places of MaxFirstReads (nil: no gate), waited
	// for at most firstReadWait.
	firstReads    chan struct{}
	firstReadWait time.Duration
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := int(l.open.Add(1))
		if n > l.max+l.reserve {
			l.open.Add(-1)
			c.Close()
			l.log.Warn("connection limit reached: closing new connection", "limit", l.max+l.reserve, "remote", c.RemoteAddr().String())
			continue
		}
		return &limitedConn{Conn: c, reserve: n > l.max, done: func() { l.open.Add(-1) }, framer: &headFramer{},
			gate: l.firstReads, gateWait: l.firstReadWait}, nil
	}
}

type limitedConn struct {
	net.Conn
	reserve bool
	once    sync.Once
	done    func()
	framer  *headFramer // follows request heads on a plain connection (framing.go)

	// bodyDeadline: guard set the current request's body deadline (its
	// body had not all arrived), so bodyFirst lifts it.
	bodyDeadline bool

	// The first-read gate (see Limits.MaxFirstReads); reads of a
	// connection come from one goroutine at a time.
	gate     chan struct{}
	gateWait time.Duration
	reads    int         // Read calls so far, counted up to 2
	holding  atomic.Bool // a place in gate
}

// errFirstReadWait ends a connection that waited too long for its turn.
var errFirstReadWait = errors.New("no turn for a new connection's first read in time")

// readInTurn reads from the connection; a new connection's first read (its
// TLS handshake, or its first request) waits for a place in the first-read
// gate, held until its second read.
func (c *limitedConn) readInTurn(p []byte) (int, error) {
	if c.gate == nil || c.reads >= 2 {
		return c.Conn.Read(p)
	}
	c.reads++
	if c.reads == 2 {
		c.release()
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 || err != nil {
		return n, err
	}
	timer := time.NewTimer(c.gateWait)
	defer timer.Stop()
	select {
	case c.gate <- struct{}{}:
		c.holding.Store(true)
		return n, nil
	case <-timer.C:
		return 0, errFirstReadWait
	}
}

func (c *limitedConn) release() {
	if c.holding.CompareAndSwap(true, false) {
		<-c.gate
	}
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.done()
		c.release() // a connection closed in its handshake (Shutdown)
	})
	return c.Conn.Close()
}

type (
	reserveKey    struct{}
	controllerKey struct{}
	framerKey     struct{}
	connKey       struct{}
)

// setReadDeadline sets the read deadline of r's connection. An HTTP/1
// request has its connection to itself while it is served, so the
// deadline is set on the connection (connContext kept it; under TLS its
// deadlines are those of the connection beneath), which is what net/http's
// ResponseController does for HTTP/1; any other request (HTTP/2, or a
// server not built by HTTPServer) goes through the controller guard kept.
func setReadDeadline(r *http.Request, t time.Time) {
	if c := plainConn(r); c != nil {
		_ = c.SetReadDeadline(t)
		return
	}
	if rc, ok := r.Context().Value(controllerKey{}).(*http.ResponseController); ok {
		_ = rc.SetReadDeadline(t) // fails only where the writer cannot (tests)
	}
}

// plainConn is the connection of an HTTP/1 request served by HTTPServer
// on Listener, nil for any other.
func plainConn(r *http.Request) *limitedConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	c, _ := r.Context().Value(connKey{}).(*limitedConn)
	return c
}

// liftBodyDeadline lifts the deadline guard set for the request's body,
// once the body is read.
func liftBodyDeadline(r *http.Request) {
	if c := plainConn(r); c != nil && !c.bodyDeadline {
		return
	}
	setReadDeadline(r, time.Time{})
}

// connContext (http.Server.ConnContext) tags the context of a connection
// accepted into the probe reserve, and gives the handlers a plain
// connection's head framer (framing.go); under TLS the framer would see
// only ciphertext, so it is stopped before the first read.
func connContext(ctx context.Context, c net.Conn) context.Context {
	tc, isTLS := c.(*tls.Conn)
	if isTLS {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return ctx
	}
	ctx = context.WithValue(ctx, connKey{}, lc)
	if isTLS {
		lc.framer.stop()
	} else {
		ctx = context.WithValue(ctx, framerKey{}, lc.framer)
	}
	if lc.reserve {
		ctx = context.WithValue(ctx, reserveKey{}, true)
	}
	return ctx
}

func isProbe(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// guard is the outermost handler: it turns away API requests on reserve
// connections and starts the body's clock.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := plainConn(r)
		arrived := c != nil && c.framer.bodyArrived() // counts every request
		switch {
		case !hasBody(r):
		case c == nil:
			// The controller, kept for refuseBody and bodyFirst: the
			// writers they get are wrapped (metrics) and may not unwrap.
			// An HTTP/1 request on a connection connContext saw needs
			// none (setReadDeadline).
			rc := http.NewResponseController(w)
			r = r.WithContext(context.WithValue(r.Context(), controllerKey{}, rc))
			setReadDeadline(r, time.Now().Add(s.opts.Limits.BodyTimeout))
		case arrived:
			// Already read from the connection whole: nothing to wait for,
			// so no clock to start (and none to lift).
			c.bodyDeadline = false
		default:
			c.bodyDeadline = true
			setReadDeadline(r, time.Now().Add(s.opts.Limits.BodyTimeout))
		}
		if r.Context().Value(reserveKey{}) != nil && !isProbe(r) {
			refuseBody(w, r)
			// Closed after the answer, body or not: the client reconnects,
			// and a probe may get this place in the reserve.
			w.Header().Set("Connection", "close")
			writeError(w, &apiError{http.StatusServiceUnavailable, api.CodeOverloaded, "too many connections; only /healthz and /readyz are served on this one"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// refuseBody makes sure an answer given before the request's body was read
// goes out at once and ends the connection: without it net/http would first
// read (to discard) what the client still sends, at whatever pace it sends.
func refuseBody(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) || batched(r.Context()) { // a batched call's body is the batch's, already read
		return
	}
	w.Header().Set("Connection", "close")
	setReadDeadline(r, time.Now())
}

// inflight caps API requests being served. Probes and /metrics pass: they
// must answer while the API is saturated.
func (s *Server) inflight(next http.Handler) http.Handler {
	slots := s.slots // one count for the server, however many routes
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isProbe(r) || r.URL.Path == "/metrics" || batched(r.Context()) { // a batch took its calls' places
			next.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			refuseBody(w, r)
			writeError(w, &apiError{http.StatusTooManyRequests, api.CodeOverloaded, "too many requests in flight"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bodyFirst reads the whole body (up to one byte past the contract's limit)
// under the body deadline, then lifts the deadline so that the request may
// take as long as its own timeout allows. It runs after authorize: a body
// is read only for a client allowed to send it. A route that streams its
// body (its limit is far above api.MaxBody) reads it itself.
func (s *Server) bodyFirst(streams bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) || streams {
			next.ServeHTTP(w, r)
			return
		}
		body, err := readFirst(r.Body, r.ContentLength)
		switch {
		case isTimeout(err):
			refuseBody(w, r)
			writeError(w, &apiError{http.StatusRequestTimeout, api.CodeBadRequest, "request body not received within " + s.opts.Limits.BodyTimeout.String()})
			return
		case err != nil:
			refuseBody(w, r)
			writeError(w, badRequest("reading body: %v", err))
			return
		case len(body) > api.MaxBody:
			refuseBody(w, r) // the rest is not read; readBody answers 413
		default:
			liftBodyDeadline(r)
			// A tenant over its share is refused before the strict parse,
			// which is most of what a 429 would cost under a flood.
			if s.shedEarly(w, r, body) {
				return
			}
		}
		ra := &readAhead{body: body}
		ra.Reset(body)
		r.Body = ra
		next.ServeHTTP(w, r)
	})
}

// readFirst reads body to its end, up to one byte past api.MaxBody, as
// io.ReadAll of an io.LimitReader would. When the request's length is
// known and within the limit, net/http ends the body there, so one buffer
// of that length (and a byte for the read that meets the end) takes it all.
func readFirst(body io.Reader, length int64) ([]byte, error) {
	if length < 0 || length > api.MaxBody {
		return io.ReadAll(io.LimitReader(body, api.MaxBody+1))
	}
	b := make([]byte, 0, length+1)
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			// More than its Content-Length: not from net/http, but read on
			// within the limit all the same.
			rest, err := io.ReadAll(io.LimitReader(body, api.MaxBody+1-int64(len(b))))
			return append(b, rest...), err
		}
	}
}

// isTimeout reports whether err is a deadline's (the body deadline's).
func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readAhead is a request body bodyFirst has read: readBody takes its bytes
// once instead of copying them again; anything else reads it as a body.
type readAhead struct {
	bytes.Reader
	body  []byte
	taken bool
}

func (*readAhead) Close() error { return nil }

// rateLogger logs through hclog at most burst lines per interval, and says
// how many it dropped: failed authentication and TLS handshakes are the
// client's doing, and a flood of them must not flood the log.
type rateLogger struct {
	log      hclog.Logger
	burst    int
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	start   time.Time // of the current interval
	used    int
	dropped int
}

func newRateLogger(l hclog.Logger, burst int, interval time.Duration) *rateLogger {
	return &rateLogger{log: l, burst: burst, interval: interval, now: time.Now}
}

// allow reports whether a line may be logged now, and how many were
// dropped since the last one that was.
func (r *rateLogger) allow() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.start) >= r.interval {
		r.start, r.used = now, 0
	}
	if r.used >= r.burst {
		r.dropped++
		return false, 0
	}
	r.used++
	d := r.dropped
	r.dropped = 0
	return true, d
}

func (r *rateLogger) Warn(msg string, args ...any) {
	ok, dropped := r.allow()
	if !ok {
		return
	}
	if dropped > 0 {
		args = append(args, "suppressed", dropped)
	}
	r.log.Warn(msg, args...)
}

// Write makes it an io.Writer for http.Server.ErrorLog (one line a call).
func (r *rateLogger) Write(p []byte) (int, error) {
	r.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
