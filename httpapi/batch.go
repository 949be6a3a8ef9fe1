package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// POST /v1/batch carries several lock calls in one HTTP exchange. Each
// call is served exactly as the request it names would be, through that
// route's own chain (metrics, in-flight cap, authorization with the
// batch's token, body rules, admission) and its own Raft entry, so its
// answer, its fencing token and what it may have done are those of the
// single request. The calls of a batch run at once and in no promised
// order: a client puts in one batch only calls it would have sent at
// once on separate connections.
//
// What the batch saves is the exchange: one read and one write on the
// connection, one goroutine wake-up and one response head for the whole
// batch, instead of one of each per call. On a store that can (Gatherer),
// it saves Raft rounds too: the calls' entries are offered together, so
// they share the leader's fdatasync and each follower's AppendEntries. A
// client with many calls in flight to one node (the Go client's
// coalescing) sends them this way.

// pathBatch is the batch route.
const pathBatch = "/v1/batch"

// batchRoutes are the routes a batch may call: the lock cycle's writes,
// which never wait. An acquire with wait_ms would hold every other answer
// of its batch until it ends, so it is refused in a batch.
var batchRoutes = map[string]bool{pathAcquire: true, pathRenew: true, pathRelease: true}

func (s *Server) batch(w http.ResponseWriter, r *http.Request) {
	if err := jsonContentType(r); err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	calls, err := decodeBatch(body)
	if err != nil {
		writeError(w, err)
		return
	}
	// Every call holds an in-flight place, as it would alone, taken here
	// before any of them starts: a batch either has places for all its
	// calls or runs none of them, and the cap bounds the goroutines too.
	if !s.takeSlots(len(calls)) {
		writeError(w, &apiError{http.StatusTooManyRequests, api.CodeOverloaded, "too many requests in flight for this batch's calls; none ran"})
		return
	}
	defer s.releaseSlots(len(calls))
	results := make([]subResponse, len(calls))
	// A call is not a request of the connection: guard, the body deadline
	// and refuseBody must not find the connection (or the batch's response
	// controller) through its context.
	ctx := context.WithValue(r.Context(), connKey{}, (*limitedConn)(nil))
	ctx = context.WithValue(ctx, controllerKey{}, nil)
	ctx = context.WithValue(ctx, batchedKey{}, true)
	ctxs, done := s.gather(ctx, len(calls))
	var wg sync.WaitGroup
	for i := range calls {
		sub := subRequest(ctxs[i], r, calls[i])
		route := s.routes.match(sub)
		serve := func() {
			s.serveCall(route.chain, &results[i], sub)
			done(i)
		}
		if i == len(calls)-1 {
			serve() // the last on this goroutine
			break
		}
		wg.Add(1)
		s.runCall(func() {
			defer wg.Done()
			serve()
		})
	}
	wg.Wait()
	writeBatch(w, results)
}

// Gatherer is a Store that can hand the writes of calls served together
// to Raft together (raftnode.Node.Gather): each is still its own entry,
// but they reach the disk and the followers as one. Gather returns the
// context to serve each call with, and done, to call with a call's number
// once it has been answered.
type Gatherer interface {
	Gather(ctx context.Context, calls int) (ctxs []context.Context, done func(call int))
}

// gather prepares a batch's calls to be written together when the store
// can; otherwise every call is served with ctx.
func (s *Server) gather(ctx context.Context, calls int) ([]context.Context, func(int)) {
	if g, ok := s.store.(Gatherer); ok {
		return g.Gather(ctx, calls)
	}
	ctxs := make([]context.Context, calls)
	for i := range ctxs {
		ctxs[i] = ctx
	}
	return ctxs, func(int) {}
}

// serveCall serves one call of a batch. A panic in it answers that call
// 500, as net/http would answer a request alone, instead of ending the node
// (the call runs on a goroutine of its own).
func (s *Server) serveCall(h http.Handler, res *subResponse, sub *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving a batched call", "path", sub.URL.Path, "panic", p, "stack", string(debug.Stack()))
			*res = subResponse{}
			writeError(res, &apiError{http.StatusInternalServerError, api.CodeInternal, "internal error serving this call; it may have been applied"})
		}
	}()
	h.ServeHTTP(res, sub)
}

// takeSlots takes n in-flight places at once, or none.
func (s *Server) takeSlots(n int) bool {
	for i := range n {
		select {
		case s.slots <- struct{}{}:
		default:
			s.releaseSlots(i)
			return false
		}
	}
	return true
}

func (s *Server) releaseSlots(n int) {
	for range n {
		<-s.slots
	}
}

// runCall runs a batch's call on an idle call worker, or on a new one.
// A call's handlers reach deep into raftnode and outgrow a new goroutine's
// stack; a fresh goroutine per call spent a tenth of the leader's CPU
// copying stacks as they grew (runtime.copystack). A worker keeps its grown
// stack from call to call, as a connection's goroutine does for the
// requests of a connection.
func (s *Server) runCall(f func()) {
	select {
	case s.callWork <- f:
	default:
		go s.callWorker(f)
	}
}

// callWorkerIdle is how long a call worker waits for another call before
// it ends: the pool shrinks back after a burst.
const callWorkerIdle = 5 * time.Second

func (s *Server) callWorker(f func()) {
	idle := time.NewTimer(callWorkerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(callWorkerIdle)
		select {
		case f = <-s.callWork:
		case <-idle.C:
			return
		}
	}
}

// batchedKey marks the context of a batched call.
type batchedKey struct{}

func batched(ctx context.Context) bool { return ctx.Value(batchedKey{}) != nil }

// decodeBatch parses and checks a batch as a whole; a refused batch runs
// none of its calls. Each call's body is checked by its own route.
func decodeBatch(body []byte) ([]api.BatchCall, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req api.BatchRequest
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("batch: %v", err)
	}
	if dec.More() {
		return nil, badRequest("batch: data after the JSON object")
	}
	if len(req.Calls) == 0 || len(req.Calls) > api.MaxBatchCalls {
		return nil, badRequest("calls: %d calls; a batch has 1 to %d", len(req.Calls), api.MaxBatchCalls)
	}
	for i, c := range req.Calls {
		if !batchRoutes[c.Path] {
			return nil, badRequest("calls[%d].path: %q cannot be batched; a batch carries %s, %s and %s", i, c.Path, pathAcquire, pathRenew, pathRelease)
		}
		if b := bytes.TrimLeft(c.Body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
			return nil, badRequest("calls[%d].body: want the JSON object the path's request would carry", i)
		}
	}
	return req.Calls, nil
}

// subRequest is the request call stands for, with the batch's headers (its
// token among them) and its body.
func subRequest(ctx context.Context, r *http.Request, call api.BatchCall) *http.Request {
	sub := &http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: call.Path},
		Proto:         r.Proto,
		ProtoMajor:    r.ProtoMajor,
		ProtoMinor:    r.ProtoMinor,
		Header:        r.Header, // read only: no handler writes a request's header
		Body:          io.NopCloser(bytes.NewReader(call.Body)),
		ContentLength: int64(len(call.Body)),
		Host:          r.Host,
		RemoteAddr:    r.RemoteAddr,
		RequestURI:    call.Path,
		TLS:           r.TLS,
	}
	return sub.WithContext(ctx)
}

// subResponse records one call's answer.
type subResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (s *subResponse) Header() http.Header {
	if s.header == nil {
		s.header = make(http.Header, 4)
	}
	return s.header
}

func (s *subResponse) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
}

func (s *subResponse) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.body.Write(p)
}

// settle answers a call whose handler wrote no body (none does on
// purpose) 504 unknown_outcome: it may have been applied. Bodies are whole
// JSON objects when written: writeJSON encodes before it writes, and a
// relayed answer is read whole before it is passed on (forward.go).
func (s *subResponse) settle() {
	if len(bytes.TrimSpace(s.body.Bytes())) > 0 {
		return
	}
	*s = subResponse{}
	writeError(s, fmt.Errorf("%w: the call was answered without a body", errUnknownOutcome))
}

// writeBatch answers 200 with each call's status, the headers its own
// answer would have had (Retry-After, say) and its body, in the order of
// the calls.
func writeBatch(w http.ResponseWriter, results []subResponse) {
	size := len(`{"results":[]}`) + 1
	for i := range results {
		results[i].settle()
		size += results[i].body.Len() + resultOverhead
	}
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(`{"results":[`)
	for i := range results {
		res := &results[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"status":`)
		b.WriteString(strconv.Itoa(res.status))
		first := true
		for k, vs := range res.header {
			if k == "Content-Type" || k == "Connection" || len(vs) == 0 {
				continue
			}
			if first {
				b.WriteString(`,"headers":{`)
				first = false
			} else {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, vs[0])
		}
		if !first {
			b.WriteByte('}')
		}
		b.WriteString(`,"body":`)
		b.Write(bytes.TrimSpace(res.body.Bytes()))
		b.WriteByte('}')
	}
	b.WriteString("]}\n")
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

// resultOverhead is about what a result adds to its body in a batch's
// answer (its status, a header or two, punctuation), so that the answer
// is built in one buffer without growing it.
const resultOverhead = 64

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}
