package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// TestMaxInflightCapsRequestsAcrossRequests: with MaxInflight 1, a second
// write while the first is still being served is refused 429 at once, and
// once the first is answered the next is served. The cap is one count for
// the whole server: gorilla/mux builds its middleware chain per request, so
// a cap kept in a middleware's closure would be a fresh one each time.
func TestMaxInflightCapsRequestsAcrossRequests(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	st := newLeader("n1")
	st.apply = func(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
		if cmd.Op == fsm.OpRelease {
			entered <- struct{}{}
			<-release
		}
		return st.applyLocal(cmd), nil
	}
	srv := httptest.NewServer(New(st, Options{Limits: Limits{MaxInflight: 1}}))
	defer srv.Close()
	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	const id = "0123456789abcdef0123456789abcdef"
	if code, body := post("/v1/locks/acquire", `{"name":"a","lease_id":"`+id+`","ttl_ms":10000}`); code != http.StatusOK {
		t.Fatalf("acquire: %d %s", code, body)
	}
	done := make(chan int)
	go func() {
		code, _ := post("/v1/locks/release", `{"name":"a","lease_id":"`+id+`"}`)
		done <- code
	}()
	<-entered // the release is being served
	code, body := post("/v1/locks/acquire", `{"name":"b","lease_id":"`+id+`","ttl_ms":10000}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "too many requests in flight") {
		t.Errorf("a second request while one is in flight: %d %s, want 429 too many requests in flight", code, body)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("the parked release: %d", code)
	}
	if code, body := post("/v1/locks/acquire", `{"name":"c","lease_id":"`+id+`","ttl_ms":10000}`); code != http.StatusOK {
		t.Errorf("after the first is answered: %d %s", code, body)
	}
}
