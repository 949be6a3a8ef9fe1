// Package proxy puts a relay in front of each node through which the
// workload talks to the cluster. It exists for seeded bugs: a build with
// -tags raftlock_seeded_bugs can make the relay misbehave the way a broken
// server would (grant over a holder, expire early, acknowledge a release it
// never applied), so the tests can show the checker catches each one.
// Ordinary builds have no bugs to select and never start a proxy.
package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"time"
)

// Exchange is one request through the proxy.
type Exchange struct {
	Path string
	Body []byte
}

// Answer is a relayed or made-up response.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Bug intercepts requests. Forward sends a (possibly changed) request to the
// proxied node.
type Bug interface {
	Handle(x Exchange, forward func(Exchange) (Answer, error)) (Answer, error)
}

// Proxy relays to one node.
type Proxy struct {
	target string
	bug    Bug
	client *http.Client
	srv    *http.Server
	URL    string
}

// Start relays from a fresh loopback port to target (a base URL).
func Start(target string, bug Bug) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, bug: bug, client: &http.Client{Timeout: 30 * time.Second}, URL: "http://" + ln.Addr().String()}
	p.srv = &http.Server{Handler: p}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *Proxy) forward(method string, uri string) func(Exchange) (Answer, error) {
	return func(x Exchange) (Answer, error) {
		path := x.Path
		if path == "" {
			path = uri
		}
		req, err := http.NewRequest(method, p.target+path, bytes.NewReader(x.Body))
		if err != nil {
			return Answer{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.client.Do(req)
		if err != nil {
			return Answer{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return Answer{resp.StatusCode, resp.Header, b}, err
	}
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fwd := p.forward(r.Method, r.URL.RequestURI())
	var a Answer
	var err error
	if p.bug != nil && r.Method == http.MethodPost {
		a, err = p.bug.Handle(Exchange{Path: r.URL.Path, Body: body}, fwd)
	} else {
		a, err = fwd(Exchange{Path: r.URL.RequestURI(), Body: body})
	}
	if err != nil {
		// The node did not answer: make the client see a dropped connection,
		// an unknown outcome, as it would without the proxy.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, herr := hj.Hijack(); herr == nil {
				c.Close()
				return
			}
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range a.Header {
		if k != "Content-Length" { // a bug may have changed the body
			w.Header()[k] = v
		}
	}
	w.WriteHeader(a.Status)
	w.Write(a.Body)
}

// Close stops the relay.
func (p *Proxy) Close() error { return p.srv.Close() }
