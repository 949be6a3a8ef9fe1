package httpapi

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// gatedPair is a limitedConn on one end of a pipe, and the other end.
func gatedPair(gate chan struct{}, wait time.Duration) (*limitedConn, net.Conn) {
	server, client := net.Pipe()
	return &limitedConn{Conn: server, done: func() {}, framer: &headFramer{}, gate: gate, gateWait: wait}, client
}

// A new connection's first bytes wait for a place among MaxFirstReads;
// the place is given back at the connection's next read.
func TestFirstReadGate(t *testing.T) {
	gate := make(chan struct{}, 1)
	c1, p1 := gatedPair(gate, time.Minute)
	c2, p2 := gatedPair(gate, time.Minute)
	go p1.Write([]byte("a"))
	buf := make([]byte, 8)
	if n, err := c1.Read(buf); n != 1 || err != nil {
		t.Fatalf("first read: %d %v", n, err)
	}
	go p2.Write([]byte("b"))
	second := make(chan error, 1)
	go func() {
		_, err := c2.Read(make([]byte, 8))
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("a second first read passed a full gate: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	// c1's next read (its handshake waiting for the client) frees the place.
	go p1.Write([]byte("c"))
	if n, err := c1.Read(buf); n != 1 || err != nil {
		t.Fatalf("second read: %d %v", n, err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the waiting first read: %v", err)
	}
	c2.Close() // closed holding its place: gives it back
	if len(gate) != 0 {
		t.Fatalf("%d places still taken", len(gate))
	}
}

// A connection that sends nothing holds no place; one that waits longer
// than its wait for a place is ended.
func TestFirstReadGateWaitsBounded(t *testing.T) {
	gate := make(chan struct{}, 1)
	gate <- struct{}{} // full
	c, p := gatedPair(gate, 10*time.Millisecond)
	go p.Write([]byte("a"))
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, errFirstReadWait) {
		t.Fatalf("read at a full gate: %v, want errFirstReadWait", err)
	}
}

// The probe server answers /healthz and /readyz as the API does, and
// nothing else: no lock, no metrics, whatever the token.
func TestProbeServerServesOnlyProbes(t *testing.T) {
	f := newLeader("n1")
	ready := false
	f.ready = func() bool { return ready }
	h := prefixServer(t, f).ProbeServer().Handler
	if rec := do(t, h, "GET", "/healthz", ""); rec.Code != http.StatusOK || rec.Header().Get(api.HeaderNode) != "n1" {
		t.Errorf("/healthz: %d %v", rec.Code, rec.Header())
	}
	if rec := do(t, h, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a node not ready: %d", rec.Code)
	}
	ready = true
	if rec := do(t, h, "GET", "/readyz", ""); rec.Code != http.StatusOK {
		t.Errorf("/readyz: %d", rec.Code)
	}
	for _, path := range []string{"/v1/locks", "/metrics", "/v1/cluster"} {
		if rec := do(t, h, "GET", path, "", bearerOf(tokAdmin)...); rec.Code != http.StatusNotFound {
			t.Errorf("%s on the probe server: %d, want 404", path, rec.Code)
		}
	}
}
