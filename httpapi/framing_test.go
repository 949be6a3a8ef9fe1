package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// serveRaw serves s as cmd/raftlock does (its http.Server on its Listener)
// on a loopback port, and returns the address.
func serveRaw(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer(nil)
	go srv.Serve(s.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// rawExchange writes req on a fresh connection and returns every response
// the server sends before it closes the connection.
func rawExchange(t *testing.T, addr, req string) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		if _, err := br.Peek(1); err != nil {
			return out // closed by the server
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("after %d responses: %v", len(out), err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
}

// A request with both Transfer-Encoding: chunked and Content-Length, as a
// proxy that frames by length would pass it on: the bytes after the
// chunked body must not run as a second request. The server answers the
// chunked request and closes the connection; the smuggled acquire never
// reaches the store.
func TestChunkedWithContentLengthRunsNoSecondRequest(t *testing.T) {
	f := newLeader("n1")
	addr := serveRaw(t, newServer(f))
	acquire := func(name, extra string) string {
		body := `{"name":"` + name + `","ttl_ms":10000}`
		return "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
			fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	body := `{"name":"front","ttl_ms":10000}`
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	tail := acquire("smuggled", "")
	req := "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Transfer-Encoding: chunked\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(chunked)+len(tail)) + chunked + tail
	resps := rawExchange(t, addr, req)
	if len(resps) != 1 {
		t.Fatalf("%d responses, want 1: the bytes after the chunked body ran as a request", len(resps))
	}
	if !resps[0].Close {
		t.Errorf("the answer to a chunked request keeps the connection open (Connection: %q)", resps[0].Header.Get("Connection"))
	}
	var names []string
	for _, c := range f.commands() {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "front" {
		t.Fatalf("the store got acquires of %v, want only the chunked request's (front)", names)
	}

	// Two requests framed by Content-Length alone on one connection are
	// two requests: the check above can tell one from two.
	if resps := rawExchange(t, addr, acquire("first", "")+acquire("second", "Connection: close\r\n")); len(resps) != 2 {
		t.Fatalf("two length-framed requests got %d responses, want 2", len(resps))
	}
}

// A request Go's server cannot parse (a bad %-escape in the path) is
// answered before any handler runs; it still gets the contract's JSON
// error body, not Go's plain text.
func TestMalformedRequestAnswersJSON(t *testing.T) {
	addr := serveRaw(t, newServer(newLeader("n1")))
	for _, req := range []string{
		"GET /v1/locks/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/locks/a HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n",
	} {
		resps := rawExchange(t, addr, req)
		if len(resps) != 1 {
			t.Fatalf("%q: %d responses, want 1", req, len(resps))
		}
		resp := resps[0]
		b, _ := io.ReadAll(resp.Body)
		var e api.Error
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(b, &e) != nil || e.Error != api.CodeBadRequest || !strings.Contains(e.Message, "malformed") {
			t.Errorf("%q: %d %s %q, want 400 application/json bad_request", req, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
}
