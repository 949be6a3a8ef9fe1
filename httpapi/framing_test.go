package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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

// rawAcquire is a raw acquire of lock name framed by Content-Length,
// with extra header lines.
func rawAcquire(name, extra string) string {
	body := `{"name":"` + name + `","ttl_ms":10000}`
	return "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
}

// rawChunkedAcquire is a raw acquire of lock name with a chunked body and the
// extra header lines (and then, maybe, more bytes after the body).
func rawChunkedAcquire(name, extra string) string {
	body := `{"name":"` + name + `","ttl_ms":10000}`
	return "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + extra +
		"\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

func acquired(f *fakeStore) string {
	var names []string
	for _, c := range f.commands() {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

// A request with both Transfer-Encoding: chunked and Content-Length, as a
// proxy that frames by length would pass it on with a second request
// inside: it is refused, 400 with the JSON error body, the connection is
// closed, and neither it nor the bytes after its chunked body run.
func TestChunkedWithContentLengthRefused(t *testing.T) {
	f := newLeader("n1")
	addr := serveRaw(t, newServer(f))
	tail := rawAcquire("smuggled", "")
	front := rawChunkedAcquire("front", "")
	head, body, _ := strings.Cut(front, "\r\n\r\n")
	body += tail
	req := head + fmt.Sprintf("\r\nContent-Length: %d\r\n\r\n", len(body)) + body
	// Ahead of it on the same connection, a request framed by length alone:
	// the framer must follow it to find the next head.
	resps := rawExchange(t, addr, rawAcquire("before", "")+req)
	if len(resps) != 2 {
		t.Fatalf("%d responses, want 2 (the request before, and the refusal): the bytes after the chunked body ran as a request", len(resps))
	}
	b, _ := io.ReadAll(resps[1].Body)
	var e api.Error
	if resps[1].StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error != api.CodeBadRequest || !strings.Contains(e.Message, "Content-Length") {
		t.Errorf("answer %d %s, want 400 bad_request naming Content-Length", resps[1].StatusCode, b)
	}
	if !resps[1].Close || resps[1].Header.Get(api.HeaderNode) != "n1" {
		t.Errorf("the refusal keeps the connection open (%v) or lacks X-Raftlock-Node (%q)", !resps[1].Close, resps[1].Header.Get(api.HeaderNode))
	}
	if got := acquired(f); got != "before" {
		t.Fatalf("the store got acquires of %q, want only \"before\"", got)
	}
}

// A chunked request alone is served, and its connection closed after the
// answer, so nothing after its body is read as a request (the guard for
// TLS, where the framer sees only ciphertext).
func TestChunkedRequestClosesConnection(t *testing.T) {
	f := newLeader("n1")
	addr := serveRaw(t, newServer(f))
	resps := rawExchange(t, addr, rawChunkedAcquire("front", "")+rawAcquire("after", ""))
	if len(resps) != 1 || resps[0].StatusCode != http.StatusOK || !resps[0].Close {
		t.Fatalf("%d responses (first %d, close %v), want one 200 that closes", len(resps), resps[0].StatusCode, resps[0].Close)
	}
	if got := acquired(f); got != "front" {
		t.Fatalf("the store got acquires of %q, want only \"front\"", got)
	}
	// Two requests framed by length alone on one connection are two: the
	// checks above can tell one from two.
	if resps := rawExchange(t, addr, rawAcquire("first", "")+rawAcquire("second", "Connection: close\r\n")); len(resps) != 2 {
		t.Fatalf("two length-framed requests got %d responses, want 2", len(resps))
	}
}

// The framer follows heads as net/http frames them, however the bytes are
// split across reads.
func TestHeadFramer(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		both         bool
	}{
		{"chunked and length", rawChunkedAcquire("a", "Content-Length: 5\r\n"), true},
		{"chunked alone", rawChunkedAcquire("a", ""), false},
		{"length alone, then chunked and length", rawAcquire("a", "") + rawChunkedAcquire("b", "content-length: 9\r\n"), true},
		{"a body that looks like a head", rawAcquire("x\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", ""), false},
		{"bare newlines", "POST / HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\nContent-Length: 3\n\n", true},
		{"HTTP/1.0 frames by length", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", false},
		{"GET without a body, then both", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n" + rawChunkedAcquire("b", "Content-Length: 1\r\n"), true},
	} {
		for _, step := range []int{1, 7, len(tc.stream)} {
			f := &headFramer{}
			for s := tc.stream; len(s) > 0; {
				n := min(step, len(s))
				f.feed([]byte(s[:n]))
				s = s[n:]
			}
			if f.chunkedWithLength() != tc.both {
				t.Errorf("%s, in reads of %d bytes: chunkedWithLength %v, want %v", tc.name, step, f.chunkedWithLength(), tc.both)
			}
		}
	}
	f := &headFramer{}
	f.stop()
	f.feed([]byte(rawChunkedAcquire("a", "Content-Length: 5\r\n")))
	if f.chunkedWithLength() {
		t.Error("a stopped framer (TLS) still reads heads")
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

// TestBodyDeadlineOnPlainConnection: on a connection served by HTTPServer
// and Listener, a body that stops short of its Content-Length is cut at
// the body timeout (408 and the connection closed), and a request whose
// body came whole is answered after the deadline was lifted.
func TestBodyDeadlineOnPlainConnection(t *testing.T) {
	addr := serveRaw(t, New(newLeader("n1"), Options{Limits: Limits{BodyTimeout: 200 * time.Millisecond}}))
	const body = `{"name":"a","owner":"o","lease_id":"0123456789abcdef0123456789abcdef","ttl_ms":10000}`
	head := "POST /v1/locks/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
	resps := rawExchange(t, addr, head+strconv.Itoa(len(body)+10)+"\r\n\r\n"+body)
	if len(resps) != 1 || resps[0].StatusCode != http.StatusRequestTimeout {
		t.Fatalf("short body: %d responses, want one 408: %+v", len(resps), resps)
	}
	whole := head + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	release := `{"name":"a","lease_id":"0123456789abcdef0123456789abcdef"}`
	resps = rawExchange(t, addr, whole+"POST /v1/locks/release HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(release))+"\r\n\r\n"+release)
	if len(resps) != 2 || resps[0].StatusCode != http.StatusOK || resps[1].StatusCode != http.StatusOK {
		t.Fatalf("whole bodies: %d responses, want two 200s: %+v", len(resps), resps)
	}
}

// headFramingByStrings is headFraming as it was first written, on
// strings: the reference the allocation-free one must agree with.
func headFramingByStrings(head []byte) (length int64, chunked, ok bool) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	http10 := strings.HasSuffix(lines[0], " HTTP/1.0")
	length = -1
	for _, line := range lines[1:] {
		name, value, found := strings.Cut(line, ":")
		if !found || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		value = strings.TrimSpace(value)
		switch {
		case strings.EqualFold(name, "Transfer-Encoding"):
			chunked = !http10
		case strings.EqualFold(name, "Content-Length"):
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || (length >= 0 && n != length) {
				return 0, false, false
			}
			length = n
		}
	}
	return length, chunked, true
}

func TestHeadFramingAgreesWithStrings(t *testing.T) {
	heads := []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\nTRANSFER-encoding: chunked\ncontent-LENGTH:  7 \n\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"POST / HTTP/1.1\r\n Content-Length: 3\r\n\tContent-Length: 4\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: -0\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 0000000000000000000000042\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 5\r\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length:\u00a05\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Lengt: 5\r\nTransfer-Encodin: x\r\n\r\n",
		"POST / HTTP/1.1\r\nX: a:b\r\n\r\n",
		"POST / HTTP/1.0\r\n\r\n",
		"\r\n\r\n",
		"",
	}
	for _, h := range heads {
		l1, c1, ok1 := headFraming([]byte(h))
		l0, c0, ok0 := headFramingByStrings([]byte(h))
		if l1 != l0 || c1 != c0 || ok1 != ok0 {
			t.Errorf("%q: headFraming %d %v %v, by strings %d %v %v", h, l1, c1, ok1, l0, c0, ok0)
		}
	}
}

// The framer follows a connection's requests with no allocation once its
// buffer has grown: it sees every byte a plain connection reads.
func TestHeadFramerAllocatesNothing(t *testing.T) {
	req := []byte(rawAcquire("a", "") + rawAcquire("b", ""))
	f := &headFramer{}
	f.feed(req)
	if n := testing.AllocsPerRun(100, func() { f.feed(req) }); n != 0 {
		t.Fatalf("%v allocations per feed, want 0", n)
	}
	if f.stopped || f.skip != 0 || len(f.head) != 0 {
		t.Fatalf("framer lost the requests: stopped %v, skip %d, head %q", f.stopped, f.skip, f.head)
	}
}

// bodyArrived says a body has arrived only when the framer is sure the
// request it answers for is the last head it followed and all of its body
// has passed; guard then starts no body clock.
func TestBodyArrived(t *testing.T) {
	whole := rawAcquire("a", "")
	head, body, _ := strings.Cut(whole, "\r\n\r\n")
	head += "\r\n\r\n"
	steps := []struct {
		name    string
		feed    []string // reads before the request is served
		arrived bool
	}{
		{"whole in one read", []string{whole}, true},
		{"head, then body", []string{head, body}, true},
		{"head and part of the body", []string{head + body[:5]}, false},
		{"the rest of it, next request", []string{body[5:] + head + body}, true},
		{"head only (Expect: 100-continue)", []string{head}, false},
		{"its body; then two pipelined", []string{body, whole + whole}, false},
		{"the second of the two", nil, true},
	}
	f := &headFramer{}
	for _, st := range steps {
		for _, p := range st.feed {
			f.feed([]byte(p))
		}
		if got := f.bodyArrived(); got != st.arrived {
			t.Errorf("%s: bodyArrived %v, want %v", st.name, got, st.arrived)
		}
	}
	// A request net/http answers itself never reaches guard: the counts
	// stay apart, and bodies are never taken as arrived again.
	f = &headFramer{}
	f.feed([]byte("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + whole))
	if f.bodyArrived() {
		t.Error("after an OPTIONS * that guard did not see, a body was taken as arrived")
	}
	f = &headFramer{}
	f.stop()
	f.feed([]byte(whole))
	if f.bodyArrived() {
		t.Error("a stopped framer (TLS) took a body as arrived")
	}
}
