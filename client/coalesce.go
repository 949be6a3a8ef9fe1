package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Coalescing. The lock cycle's calls to one node (an acquire that does not
// wait, a renew, a release) go out at once while the node has no exchange
// of this client under way, or only lone calls, fewer than
// coalesceInflight of them. Calls made meanwhile wait until another
// exchange may start (the batch under way, or a lone call, has been
// answered) and then go together, in one POST /v1/batch. The node
// serves each call of a batch as the request it stands for, so each answer
// is the one the call would have had alone. What a batch saves is the
// node's work per exchange (a read, a write, a wake-up and a response
// head) and per Raft round: the node offers a batch's entries to Raft
// together, so they share the leader's fdatasync and each follower's
// AppendEntries, where calls sent apart each start a round of their own.
// A lone call, or two at once, is never held back: coalescing only starts
// when calls would otherwise queue at the node.

// coalesceInflight is how many lone calls to one node may be under way
// before further calls wait to go together. While a batch is under way
// the calls made meanwhile wait for it: a second exchange then would start
// a second Raft round for a few calls that the next batch carries for
// nothing (docs/PERFORMANCE.md).
const coalesceInflight = 2

// batchable reports whether r may go in a batch: the routes the API
// batches, and no server-side wait, which would hold the batch's answers.
func batchable(r request) bool {
	if r.method != http.MethodPost || r.serverWait > 0 || r.query != "" {
		return false
	}
	switch r.path {
	case "/v1/locks/acquire", "/v1/locks/renew", "/v1/locks/release":
		return true
	}
	return false
}

// coalescer is the queue of calls to one node.
type coalescer struct {
	c *Client
	u string

	mu       sync.Mutex
	inflight int // exchanges under way
	batches  int // of them, those carrying more than one call
	queue    []*queued
	alone    bool // the node answered a batch 404: it has none, every call goes alone

	// quiet and longest bound awaitCallers (awaitCallersQuiet and
	// awaitCallersMax; tests set others).
	quiet, longest time.Duration
}

// mayStart says whether another exchange may start now; q.mu is held.
func (q *coalescer) mayStart() bool {
	return q.inflight == 0 || q.inflight < coalesceInflight && q.batches == 0
}

type queued struct {
	ctx  context.Context
	r    request
	body []byte
	done chan sent // buffered: the sender never waits for the caller
}

type sent struct {
	resp *response
	err  error
}

// errNotSent is the error of a call whose context ended while it waited
// for a batch: it never left the client.
type errNotSent struct{ err error }

func (e *errNotSent) Error() string { return "not sent: " + e.err.Error() }
func (e *errNotSent) Unwrap() error { return e.err }

func (c *Client) coalescerFor(u string) *coalescer {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.coalescers[u]
	if q == nil {
		q = &coalescer{c: c, u: u, quiet: awaitCallersQuiet, longest: awaitCallersMax}
		c.coalescers[u] = q
	}
	return q
}

// send sends r to the node in an exchange of its own, or queues it for
// the next batch.
func (q *coalescer) send(ctx context.Context, r request, body []byte) (*response, error) {
	q.mu.Lock()
	if q.alone || len(q.queue) == 0 && q.mayStart() {
		q.inflight++
		q.mu.Unlock()
		resp, err := q.c.sendOne(ctx, q.u, r, body)
		q.exchangeDone(false)
		return resp, err
	}
	it := &queued{ctx: ctx, r: r, body: body, done: make(chan sent, 1)}
	q.queue = append(q.queue, it)
	q.mu.Unlock()
	select {
	case res := <-it.done:
		return res.resp, res.err
	case <-ctx.Done():
	}
	q.mu.Lock()
	for i, other := range q.queue {
		if other == it {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.mu.Unlock()
			return nil, &errNotSent{ctx.Err()}
		}
	}
	q.mu.Unlock()
	// Already taken into a batch, which may have been sent: the call's
	// outcome is unknown, and the caller is not kept waiting for it (the
	// batch's answer goes to it.done, buffered, and is dropped).
	return nil, ctx.Err()
}

// exchangeDone ends one exchange (a batch, if batch); the calls queued
// meanwhile, if any, go out next once another exchange may start.
func (q *coalescer) exchangeDone(batch bool) {
	q.mu.Lock()
	q.inflight--
	if batch {
		q.batches--
	}
	if len(q.queue) == 0 || !q.mayStart() {
		q.mu.Unlock()
		return
	}
	n := batchFits(q.queue)
	calls := append([]*queued(nil), q.queue[:n]...)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	q.inflight++
	if n > 1 {
		q.batches++
	}
	q.mu.Unlock()
	go func() {
		waiting := q.sendBatch(calls)
		if n > 1 {
			q.awaitCallers(waiting + n)
		}
		q.exchangeDone(n > 1)
	}()
}

// awaitCallers waits at most awaitCallersMax, and gives up once the
// queue has not grown for awaitCallersQuiet. A caller takes some
// microseconds of its own before it calls again (its answer, its next
// request), on whichever P runs it: a bound in yields ended while callers
// on the other P were still on their way, and a third of the batches at
// W16 then left without some of them.
const (
	awaitCallersQuiet = 30 * time.Microsecond
	awaitCallersMax   = 200 * time.Microsecond
)

// awaitCallers lets the callers of a batch just answered call again
// before the next batch leaves. They often do at once (a release after an
// acquire), and a call that misses the next batch waits for the one after
// it, one more exchange and one more Raft round: callers that fall apart
// this way stay apart, in batches that alternate. The exchange still
// counts as under way, so their calls queue. It yields until the queue
// holds want calls (one for each caller answered besides those that were
// queued when the answers were handed out), or stops growing.
func (q *coalescer) awaitCallers(want int) {
	start := time.Now()
	grew, last := start, -1
	for {
		runtime.Gosched()
		q.mu.Lock()
		queued, quiet, longest := len(q.queue), q.quiet, q.longest
		q.mu.Unlock()
		if queued >= want {
			return
		}
		now := time.Now()
		if queued != last {
			grew, last = now, queued
		} else if now.Sub(grew) > quiet || now.Sub(start) > longest {
			return
		}
	}
}

// batchOverhead bounds the bytes a batch's body adds to its calls' own:
// the envelope, and each call's path and punctuation.
const (
	batchOverhead = 16
	callOverhead  = 64
)

// batchFits is how many calls from the head of queue go in the next batch:
// at most api.MaxBatchCalls, and no more than fit api.MaxBody, so that a
// call is never refused for the size of the others (a call too large alone
// goes alone, and gets its own answer).
func batchFits(queue []*queued) int {
	size := batchOverhead
	for i, it := range queue {
		size += len(it.body) + callOverhead
		if i == api.MaxBatchCalls || (i > 0 && size > api.MaxBody) {
			return i
		}
	}
	return len(queue)
}

// sendBatch sends calls in one exchange and hands each its answer. It
// returns how many other calls were queued when it did.
func (q *coalescer) sendBatch(calls []*queued) (waiting int) {
	if len(calls) == 1 {
		it := calls[0]
		resp, err := q.c.sendOne(it.ctx, q.u, it.r, it.body)
		return q.handOut(calls, func(int) sent { return sent{resp, err} })
	}
	var b bytes.Buffer
	b.WriteString(`{"calls":[`)
	for i, it := range calls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"path":"`)
		b.WriteString(it.r.path) // one of batchable's, nothing to escape
		b.WriteString(`","body":`)
		b.Write(it.body)
		b.WriteByte('}')
	}
	b.WriteString("]}")
	// The exchange is the calls', not any one caller's: a caller that gives
	// up meanwhile returns at once with its outcome unknown (send), and
	// the others get their answers.
	ctx := context.WithoutCancel(calls[0].ctx)
	resp, err := q.c.sendOne(ctx, q.u, request{method: http.MethodPost, path: "/v1/batch"}, b.Bytes())
	switch {
	case err == nil && resp.status == http.StatusNotFound:
		// A node from before batches: the router ran none of the calls.
		q.mu.Lock()
		q.alone = true
		q.mu.Unlock()
		q.c.log.Debug("node has no batches: sending each call alone", "endpoint", q.u)
		waiting = q.queued()
		var wg sync.WaitGroup
		for _, it := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := q.c.sendOne(it.ctx, q.u, it.r, it.body)
				it.done <- sent{resp, err}
			}()
		}
		wg.Wait()
		return waiting
	case err != nil || resp.status != http.StatusOK:
		// The exchange failed (every call's outcome is unknown) or the
		// batch was refused as a whole before any call ran (a 401, a 429,
		// a 503): either way each call has that answer.
		return q.handOut(calls, func(int) sent { return sent{resp, err} })
	}
	answers, err := splitBatchAnswer(resp, len(calls))
	return q.handOut(calls, func(i int) sent {
		if err != nil {
			return sent{nil, err}
		}
		return sent{answers[i], nil}
	})
}

// handOut gives each call its answer, and returns how many other calls
// were queued just before: the callers answered may call again at once,
// and awaitCallers tells their calls from those by this count.
func (q *coalescer) handOut(calls []*queued, answer func(i int) sent) int {
	waiting := q.queued()
	for i, it := range calls {
		it.done <- answer(i)
	}
	return waiting
}

// queued is how many calls wait for the next batch.
func (q *coalescer) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// errBatchAnswer: the node answered a batch 200 with a body that does not
// give each call its answer. The calls ran, so their outcomes are unknown.
var errBatchAnswer = errors.New("raftlock: malformed answer to a batch")

// splitBatchAnswer turns a batch's answer into each call's, with the
// headers of the batch's answer (the node's and the leader's ids) and the
// call's own.
func splitBatchAnswer(resp *response, calls int) ([]*response, error) {
	var ans api.BatchAnswer
	if err := json.Unmarshal(resp.body, &ans); err != nil {
		return nil, fmt.Errorf("%w: %w", errBatchAnswer, err)
	}
	if len(ans.Results) != calls {
		return nil, fmt.Errorf("%w: %d results for %d calls", errBatchAnswer, len(ans.Results), calls)
	}
	out := make([]*response, calls)
	for i, res := range ans.Results {
		h := resp.header.Clone()
		h.Del("Content-Type")
		for k, v := range res.Headers {
			h.Set(k, v)
		}
		out[i] = &response{status: res.Status, header: h, body: res.Body}
	}
	return out, nil
}
