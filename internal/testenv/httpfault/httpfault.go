// Package httpfault serves HTTP answers that break on the way, for tests of
// what a node or a client makes of them. It imports nothing of raftlock, so
// the tests of any package may use it.
package httpfault

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BreakingLeader is a leader whose connection breaks in the middle of every
// answer: it reads the whole request (so the write may have been applied),
// writes head (raw bytes, "" for none), then resets the connection.
// head is an answer's status line and headers, for an answer cut off
// after them.
func BreakingLeader(t testing.TB, head string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := Break(w, r, head); err != nil {
			t.Errorf("break the answer: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Break is BreakingLeader's answer, for a handler that breaks only some.
func Break(w http.ResponseWriter, r *http.Request, head string) error {
	io.ReadAll(r.Body)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	if head != "" {
		buf.WriteString(head)
		buf.Flush()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // RST, not FIN
	}
	return conn.Close()
}

// HeadWithoutBody is an answer's head that promises a body which never
// comes (BreakingLeader).
const HeadWithoutBody = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
