package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/raftlock/raftlock/api"
)

// What net/http does not let a handler see of a request's framing, seen
// from the connection (limitedConn) instead: whether a chunked request also
// had a Content-Length, which net/http deletes before any handler runs, and
// net/http's own plain-text answer to a request it cannot parse.

// maxFramedHead bounds the head bytes the framer keeps while it looks for
// a head's end; net/http refuses longer heads (MaxHeaderBytes, 431) anyway.
const maxFramedHead = 1 << 20

// headFramer follows the request heads of one plain HTTP/1 connection as
// net/http frames them: a head, then Content-Length body bytes, then the
// next head. It stops at the first head with Transfer-Encoding, noting
// whether that head had a Content-Length too: the guard closes the
// connection after every chunked request, so there is never a head after
// it to follow, and a chunked body never needs decoding here. It only
// reads what passes; at worst a desynchronised framer makes a chunked
// request on its own connection answer 400.
type headFramer struct {
	stopped bool   // set before the first read (TLS), or by the reading goroutine
	head    []byte // the head read so far
	skip    int64  // body bytes still to pass
	both    atomic.Bool
	// heads counts the heads followed, served the requests guard has
	// started (bodyArrived). net/http hands a connection's requests to the
	// handler one at a time, and reads for the next only after the body
	// of the one before has ended, so the handler sees these fields still.
	heads, served int64
}

// bodyArrived is called by guard for each request of the connection, in
// order. It reports whether all of the request's body has already been
// read from the connection, so that reading it cannot wait for the client.
// It answers false whenever it cannot be sure: stopped, a pipelined head
// read past this one, or a request net/http answered itself (OPTIONS *)
// leave the counts apart for the rest of the connection.
func (f *headFramer) bodyArrived() bool {
	f.served++
	return !f.stopped && f.heads == f.served && f.skip == 0
}

// stop turns the framer off before any read: under TLS it sees ciphertext.
func (f *headFramer) stop() { f.stopped = true }

// chunkedWithLength reports whether the connection's chunked request had a
// Content-Length as well. Read by the handler once net/http has parsed the
// head, so the framer has seen it whole.
func (f *headFramer) chunkedWithLength() bool { return f.both.Load() }

// feed follows p, the next bytes read from the connection. net/http reads
// one connection from one goroutine at a time.
func (f *headFramer) feed(p []byte) {
	for len(p) > 0 && !f.stopped {
		if f.skip > 0 {
			n := min(int64(len(p)), f.skip)
			f.skip -= n
			p = p[n:]
			continue
		}
		start := len(f.head)
		f.head = append(f.head, p...)
		end := headEnd(f.head, start)
		if end < 0 {
			if len(f.head) > maxFramedHead {
				f.stopped = true
			}
			return
		}
		// The head's end is among the bytes just appended (an earlier call
		// would have found it otherwise), so what follows it is the tail
		// of p: go on from there, and keep f.head's array for the next.
		length, chunked, ok := headFraming(f.head[:end])
		p = p[len(p)-(len(f.head)-end):]
		f.head = f.head[:0]
		f.heads++
		switch {
		case !ok:
			f.stopped = true // net/http refuses it too, and closes
		case chunked:
			f.both.Store(length >= 0)
			f.stopped = true
		case length > 0:
			f.skip = length
		}
	}
}

// headEnd returns the index just past the empty line that ends the head in
// b, or -1; lines end in "\n" or "\r\n", as net/http reads them. Lines that
// end before from were looked at by an earlier call.
func headEnd(b []byte, from int) int {
	i := max(bytes.LastIndexByte(b[:from], '\n')+1, 0)
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		line := b[i : i+j]
		if i > 0 && (len(line) == 0 || (len(line) == 1 && line[0] == '\r')) {
			return i + j + 1
		}
		i += j + 1
	}
}

// headFraming reads a request head's framing as net/http does: the
// Content-Length (-1 when absent), and whether Transfer-Encoding applies
// (HTTP/1.1 only: net/http ignores it on HTTP/1.0). ok is false for a head
// net/http would refuse (an unreadable or conflicting Content-Length). It
// allocates nothing: it runs on every request a plain connection carries.
func headFraming(head []byte) (length int64, chunked, ok bool) {
	line, rest, _ := cutLine(head)
	http10 := bytes.HasSuffix(line, []byte(" HTTP/1.0"))
	length = -1
	for len(rest) > 0 {
		line, rest, _ = cutLine(rest)
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || line[0] == ' ' || line[0] == '\t' {
			continue // the empty last line, or a folded continuation
		}
		value = bytes.TrimSpace(value)
		switch {
		case equalFoldASCII(name, "Transfer-Encoding"):
			chunked = !http10
		case equalFoldASCII(name, "Content-Length"):
			n, valid := parseLength(value)
			if !valid || (length >= 0 && n != length) {
				return 0, false, false
			}
			length = n
		}
	}
	return length, chunked, true
}

// cutLine splits b at its first newline; a "\r\n" ends a line as "\n"
// does.
func cutLine(b []byte) (line, rest []byte, found bool) {
	line, rest, found = bytes.Cut(b, []byte("\n"))
	if found {
		line = bytes.TrimSuffix(line, []byte("\r"))
	}
	return line, rest, found
}

// equalFoldASCII reports whether b is s, ignoring ASCII case.
func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length as strconv.ParseInt(s, 10, 64)
// does, a negative value refused: decimal digits after an optional sign.
func parseLength(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, !neg || n == 0
}

// frame closes the connection after every request with a chunked body, and
// refuses one that also had a Content-Length.
func (s *Server) frame(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			// A chunked body ends the connection. With Content-Length beside
			// it, a proxy in front that framed the request by length would
			// send the bytes after the chunked body as the start of its next
			// request, and they must never run as one here (request
			// smuggling); RFC 9112 section 6.3 has the connection closed
			// after such a request. Closing after every chunked body also
			// covers TLS, where the framer cannot see the head.
			w.Header().Set("Connection", "close")
			if f, ok := r.Context().Value(framerKey{}).(*headFramer); ok && f.chunkedWithLength() {
				refuseBody(w, r)
				writeError(w, badRequest("a request may not have both Transfer-Encoding and Content-Length (RFC 9112 section 6.3); send one of them"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Read passes what net/http reads through the head framer.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.readInTurn(p)
	if n > 0 {
		c.framer.feed(p[:n])
	}
	return n, err
}

// Write gives net/http's own 400 answers the contract's JSON body. net/http
// refuses a request it cannot parse (a request target with a bad %-escape,
// a malformed header line) before any handler runs, writing a plain-text
// answer straight to the connection in one Write; that answer is recognised
// here by its fixed form and rewritten. Under TLS this connection carries
// only ciphertext, nothing matches, and the plain answer goes out as it is.
func (c *limitedConn) Write(p []byte) (int, error) {
	if out, ok := jsonParseError(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// Go's answer to a request it could not parse: status line, these headers,
// and the status again as the body (net/http/server.go, conn.serve).
const (
	goBadRequest   = "HTTP/1.1 400 Bad Request"
	goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
)

// jsonParseError returns the JSON form of net/http's plain 400 answer p,
// and false when p is not one.
func jsonParseError(p []byte) ([]byte, bool) {
	if !bytes.HasPrefix(p, []byte(goBadRequest)) {
		return nil, false
	}
	i := bytes.Index(p, []byte(goErrorHeaders))
	if i < 0 {
		return nil, false
	}
	detail := strings.TrimPrefix(string(p[i+len(goErrorHeaders):]), "400 Bad Request")
	detail = strings.TrimPrefix(detail, ": ")
	msg := "malformed HTTP request (check the path's %-escapes and the header lines)"
	if detail != "" {
		msg = "malformed HTTP request: " + detail
	}
	body, err := json.Marshal(api.Error{Error: api.CodeBadRequest, Message: msg})
	if err != nil {
		return nil, false
	}
	body = append(body, '\n')
	head := fmt.Sprintf("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	return append([]byte(head), body...), true
}
