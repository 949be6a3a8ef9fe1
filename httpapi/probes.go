package httpapi

import (
	"log"
	"net"
	"net/http"
	"time"
)

// ProbeServer returns an http.Server that answers only GET /healthz and
// GET /readyz (as the API does), for a listener of its own (serve's
// --probe-addr), in plain HTTP: probes carry no secret and get no data.
//
// On the API port a probe shares the connection cap with every client: a
// ramp of thousands of connections fills the cap and the reserve kept for
// probes (a reserve connection is only known to be a probe once its
// request is read), and each connection costs a TLS handshake first. On a
// port of its own a probe waits behind no client's connection, handshake
// or request: what is left is the scheduler. etcd serves /health on its
// --listen-metrics-urls apart from client traffic for the same reason.
func (s *Server) ProbeServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	return &http.Server{
		Handler:           s.identify(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    4 << 10,
		ErrorLog:          log.New(s.rateLog, "", 0),
	}
}

// ProbeListener wraps ln with a cap of Limits.ProbeReserve connections:
// probes come a few at a time, and a flood on this port must not cost the
// node its file descriptors.
func (s *Server) ProbeListener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, max: s.opts.Limits.ProbeReserve, log: s.rateLog}
}
