package httpapi

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkHandlerWriteCycle is one acquire and one release through the
// whole handler (guard, identify, router, metrics, in-flight cap, body
// read, strict parse, admission, response) over a store with no Raft: the
// HTTP layer's own CPU and allocations per lock cycle.
func BenchmarkHandlerWriteCycle(b *testing.B) {
	s := New(newLeader("n1"), Options{})
	post := func(path, body string) int {
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code
	}
	b.ReportAllocs()
	for i := range b.N {
		name := fmt.Sprintf("bench/%d", i%64)
		id := fmt.Sprintf("%032x", i)
		if c := post("/v1/locks/acquire", `{"name":"`+name+`","owner":"w","lease_id":"`+id+`","ttl_ms":10000}`); c != http.StatusOK {
			b.Fatalf("acquire: %d", c)
		}
		if c := post("/v1/locks/release", `{"name":"`+name+`","lease_id":"`+id+`"}`); c != http.StatusOK {
			b.Fatalf("release: %d", c)
		}
	}
}

// BenchmarkServerWriteCycle is BenchmarkHandlerWriteCycle over a real
// keep-alive loopback connection to HTTPServer on Listener, as a node
// serves: net/http's reading and writing, the connection's wrappers and
// the deadlines included. The client writes prepared bytes and scans the
// answers in place, so the allocations counted are the server's.
func BenchmarkServerWriteCycle(b *testing.B) {
	s := New(newLeader("n1"), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := s.HTTPServer(nil)
	go srv.Serve(s.Listener(ln))
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	request := func(path, body string) []byte {
		return []byte("POST " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	}
	// One lock per slot, each cycle with a lease of its own, as a bench
	// worker does: the requests are built before the clock starts.
	const slots = 64
	var acquires, releases [slots][]byte
	for i := range slots {
		id := fmt.Sprintf("%032x", i)
		acquires[i] = request("/v1/locks/acquire", `{"name":"bench/`+strconv.Itoa(i)+`","owner":"w","lease_id":"`+id+`","ttl_ms":10000}`)
		releases[i] = request("/v1/locks/release", `{"name":"bench/`+strconv.Itoa(i)+`","lease_id":"`+id+`"}`)
	}
	buf := make([]byte, 64<<10)
	exchange := func(req []byte) {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			m, err := c.Read(buf[n:])
			if err != nil {
				b.Fatal(err)
			}
			n += m
			head := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if head < 0 {
				continue
			}
			if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
				b.Fatalf("answer: %q", buf[:n])
			}
			i := bytes.Index(buf[:head], []byte("\r\nContent-Length: "))
			if i < 0 {
				b.Fatalf("answer without Content-Length: %q", buf[:n])
			}
			i += len("\r\nContent-Length: ")
			length := 0
			for ; buf[i] >= '0' && buf[i] <= '9'; i++ {
				length = length*10 + int(buf[i]-'0')
			}
			if n >= head+4+length {
				return
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		exchange(acquires[i%slots])
		exchange(releases[i%slots])
	}
}
