package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
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
