package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testenv"
)

// startSingle runs a one-node cluster as a real process and waits until it
// answers /healthz; it returns the node's host:port.
func startSingle(t *testing.T, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	ports := testenv.FreePorts(t, 2)
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	raftAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	testenv.StartServe(t, "n1", filepath.Join(dir, "n1.log"), append([]string{"--id", "n1", "--data-dir", filepath.Join(dir, "n1"),
		"--http-addr", addr, "--raft-addr", raftAddr, "--peers", "n1=" + raftAddr}, extra...))
	testenv.WaitFor(t, 20*time.Second, "the node to answer /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

// slowHeaders are the headers of an acquire whose chunked body will come
// one byte at a time.
func slowHeaders(addr, auth string) string {
	return "POST /v1/locks/acquire HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n" + auth +
		"Transfer-Encoding: chunked\r\n\r\n"
}

// Many clients that send their body at one byte a second
// must not exhaust the server. 300 such connections are all closed by the
// server once the body timeout passes, and /healthz answers within a second
// throughout. On the old server (no body deadline) they were never closed.
func TestSlowBodiesAreCutAndProbesAnswer(t *testing.T) {
	const conns = 300
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 4*conns {
		t.Skipf("open file limit %d is too low for %d connections on both ends", lim.Cur, conns)
	}
	const bodyTimeout = 3 * time.Second
	addr := startSingle(t, "--http-body-timeout", bodyTimeout.String())

	type result struct {
		status string // first response line, "" if the server just closed
		err    error
	}
	results := make(chan result, conns)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, slowHeaders(addr, "")); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		// Drip the body, one byte a second, until the server hangs up.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				if _, err := io.WriteString(c, "1\r\n{\r\n"); err != nil {
					return
				}
			}
		}()
		go func() {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil {
				io.Copy(io.Discard, c) // the rest of the answer, until the server closes
			}
			results <- result{strings.TrimSpace(line), err}
		}()
	}

	// Probe on fresh connections while the slow ones are open, and until
	// every one of them has been closed by the server.
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.After(bodyTimeout + 30*time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	closed, probes := 0, 0
	for closed < conns {
		select {
		case r := <-results:
			closed++
			if r.err != nil && r.err != io.EOF {
				t.Errorf("slow connection: %v", r.err)
			} else if r.status != "" && !strings.HasPrefix(r.status, "HTTP/1.1 408") {
				t.Errorf("slow connection answered %q, want 408", r.status)
			}
		case <-tick.C:
			probes++
			resp, err := probe.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatalf("/healthz with %d of %d slow connections still open: %v", conns-closed, conns, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz: %d", resp.StatusCode)
			}
		case <-deadline:
			t.Fatalf("%d of %d slow connections still open %v after the body timeout", conns-closed, conns, 30*time.Second)
		}
	}
	t.Logf("all %d slow connections closed by the server; %d probes answered within 1s", conns, probes)

	// The node still works.
	resp, err := http.Post("http://"+addr+"/v1/locks/acquire", "application/json",
		strings.NewReader(`{"name":"after-slow","owner":"t","ttl_ms":10000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire after the slow clients: %d", resp.StatusCode)
	}
}

// With tokens on, a client without a token that drips its body is answered
// 401 at once, before its body, and its connection is closed. On the old
// server net/http first tried to drain the body and the 401 never came.
func TestSlowBodyWithoutTokenGets401AtOnce(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("admin-0123456789abcdef0123 admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A body timeout far beyond the read deadline below: the 401 must not
	// come from it.
	addr := startSingle(t, "--auth-tokens", tokens, "--http-body-timeout", "5m")
	for _, auth := range []string{"", "Authorization: Bearer not-a-token-0123456789\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, slowHeaders(addr, auth)+"1\r\n{\r\n"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 401") {
			t.Fatalf("auth %q: answer %q, %v; want 401 before the body", auth, line, err)
		}
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("auth %q: the server kept the connection open after the 401: %v", auth, err)
		}
	}
}

// The body deadline is lifted once the body is in: an acquire may wait its
// wait_ms well past the body timeout and is granted when the holder's lease
// runs out. (http.Server.ReadTimeout would cancel it at the timeout.)
func TestWaitOutlivesBodyTimeout(t *testing.T) {
	addr := startSingle(t, "--http-body-timeout", "1s")
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/locks/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := post(`{"name":"w","owner":"first","ttl_ms":3000}`); status != http.StatusOK {
		t.Fatalf("first acquire: %d %s", status, body)
	}
	start := time.Now()
	status, body := post(`{"name":"w","owner":"second","ttl_ms":3000,"wait_ms":20000}`)
	if status != http.StatusOK || !strings.Contains(body, `"second"`) {
		t.Fatalf("waiting acquire: %d %s after %v, want granted after the first lease expired", status, body, time.Since(start))
	}
	t.Logf("granted after waiting %v", time.Since(start))
}
