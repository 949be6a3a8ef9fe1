// Package leaderwatch samples GET /v1/cluster on every endpoint of a running
// cluster about every 50 ms and turns the samples into a timeline of who
// led, from which it measures leaderless spans, leader changes and the time
// to a new leader after a fault.
//
// A leader counts only when it is confirmed: its own endpoint answered
// recently (within Fresh) and named itself. Followers go on naming a
// killed or frozen leader until their election timeout fires, so their
// word alone would hide the outage. When two nodes claim to lead (a deposed
// leader that has not yet heard of the new term), the higher term wins.
package leaderwatch

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

// Sample is one endpoint's latest answer.
type Sample struct {
	Time   int64 // CLOCK_MONOTONIC when the answer arrived
	Sent   int64 // CLOCK_MONOTONIC before the request was sent: the node answered after it
	OK     bool
	Node   string // X-Raftlock-Node: who answered
	Leader string
	Term   uint64
}

// Tick is the judged state at one instant: the confirmed leader, or
// Leader == "" when none.
type Tick struct {
	Time   int64  `json:"t"`
	Leader string `json:"leader,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	// Alive is when the request of the sample that confirmed Leader was
	// sent: the leader answered it later, so it was alive then.
	Alive int64 `json:"alive,omitempty"`
}

// Watcher polls the endpoints and records the timeline.
type Watcher struct {
	Endpoints []string
	Interval  time.Duration // poll and judge period (default 50 ms)
	Fresh     time.Duration // a sample older than this is no evidence (default 4 × Interval)

	httpc  *http.Client
	mu     sync.Mutex
	latest []Sample
	ticks  []Tick
}

func (w *Watcher) defaults() {
	if w.Interval <= 0 {
		w.Interval = 50 * time.Millisecond
	}
	if w.Fresh <= 0 {
		w.Fresh = 4 * w.Interval
	}
	w.httpc = &http.Client{
		Timeout: 10 * w.Interval,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * w.Interval}).DialContext,
			MaxIdleConnsPerHost: 2,
		},
	}
	w.latest = make([]Sample, len(w.Endpoints))
}

// Run polls until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.defaults()
	var wg sync.WaitGroup
	for i := range w.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.poll(ctx, i)
		}()
	}
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			w.judge(history.Now())
		}
	}
	wg.Wait()
}

func (w *Watcher) poll(ctx context.Context, i int) {
	for ctx.Err() == nil {
		start := time.Now()
		s := w.sample(ctx, w.Endpoints[i])
		w.mu.Lock()
		w.latest[i] = s
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(w.Interval - time.Since(start)):
		}
	}
}

func (w *Watcher) sample(ctx context.Context, endpoint string) Sample {
	sent := history.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/v1/cluster", nil)
	if err != nil {
		return Sample{Time: history.Now()}
	}
	resp, err := w.httpc.Do(req)
	if err != nil {
		return Sample{Time: history.Now()}
	}
	defer resp.Body.Close()
	var body struct {
		Leader string `json:"leader"`
		Term   uint64 `json:"term"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return Sample{Time: history.Now()}
	}
	return Sample{Time: history.Now(), Sent: sent, OK: true, Node: resp.Header.Get("X-Raftlock-Node"), Leader: body.Leader, Term: body.Term}
}

func (w *Watcher) judge(now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ticks = append(w.ticks, Judge(now, w.latest, w.Fresh))
}

// Judge returns the confirmed leader at now given each endpoint's latest
// sample: a node whose own fresh answer names itself, the highest term
// winning.
func Judge(now int64, latest []Sample, fresh time.Duration) Tick {
	t := Tick{Time: now}
	for _, s := range latest {
		if s.OK && s.Node != "" && s.Leader == s.Node && now-s.Time <= int64(fresh) && s.Term >= t.Term {
			t.Leader, t.Term, t.Alive = s.Leader, s.Term, s.Sent
		}
	}
	return t
}

// Timeline returns the ticks so far.
func (w *Watcher) Timeline() []Tick {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Tick(nil), w.ticks...)
}

// Change is one change of confirmed leader.
type Change struct {
	Time     int64 // first tick with the new leader
	From, To string
	FromTerm uint64
	ToTerm   uint64
	// Gap is how long no leader was confirmed before To (0 when the ticks
	// went straight from one leader to the other, as in a transfer).
	Gap time.Duration
}

// Stats summarises a timeline.
type Stats struct {
	Changes []Change
	// LongestLeaderless is the longest span with no confirmed leader after
	// the first one was seen, starting at LongestFrom.
	LongestLeaderless time.Duration
	LongestFrom       int64
	Leaderless        time.Duration // all leaderless spans together
}

// Analyse finds the leader changes and leaderless spans of a timeline.
func Analyse(ticks []Tick) Stats {
	var st Stats
	var last *Tick     // last tick with a confirmed leader
	var noneFrom int64 // first leaderless tick of the current span, 0 when none
	closeSpan := func(end int64) {
		if noneFrom != 0 {
			d := time.Duration(end - noneFrom)
			st.Leaderless += d
			if d > st.LongestLeaderless {
				st.LongestLeaderless, st.LongestFrom = d, noneFrom
			}
		}
	}
	for i := range ticks {
		t := &ticks[i]
		if t.Leader == "" {
			if last != nil && noneFrom == 0 {
				noneFrom = t.Time
			}
			continue
		}
		if last != nil && (last.Leader != t.Leader || last.Term != t.Term) {
			c := Change{Time: t.Time, From: last.Leader, To: t.Leader, FromTerm: last.Term, ToTerm: t.Term}
			if noneFrom != 0 {
				c.Gap = time.Duration(t.Time - noneFrom)
			}
			st.Changes = append(st.Changes, c)
		}
		closeSpan(t.Time)
		noneFrom = 0
		last = t
	}
	if len(ticks) > 0 {
		closeSpan(ticks[len(ticks)-1].Time)
	}
	return st
}

// NewLeaderAfter returns how long after at a leader of a higher term than
// the one confirmed last before at was first confirmed, and that leader.
// ok is false when none was (the leader stayed, or the run ended first).
func NewLeaderAfter(ticks []Tick, at int64) (d time.Duration, leader string, ok bool) {
	i := sort.Search(len(ticks), func(i int) bool { return ticks[i].Time >= at })
	var base uint64
	for j := i - 1; j >= 0; j-- {
		if ticks[j].Leader != "" {
			base = ticks[j].Term
			break
		}
	}
	for ; i < len(ticks); i++ {
		if ticks[i].Leader != "" && ticks[i].Term > base {
			return time.Duration(ticks[i].Time - at), ticks[i].Leader, true
		}
	}
	return 0, "", false
}

// LeaderAt returns the leader confirmed last at or before at ("" if none).
func LeaderAt(ticks []Tick, at int64) string {
	for i := sort.Search(len(ticks), func(i int) bool { return ticks[i].Time > at }) - 1; i >= 0; i-- {
		if ticks[i].Leader != "" {
			return ticks[i].Leader
		}
	}
	return ""
}

// Outage is a span in which the FSM clock may have stood still because
// leadership was lost: from when the last confirmed leader was last known
// alive (its confirming sample's request was sent: Alive of the last tick
// that confirmed it) to the first tick that confirmed a leader again,
// itself or another. Every leaderless span after the first leader makes
// one, and so does every change of leader or term between two ticks with
// none between them (a transfer). A leader that stepped down and the
// moment the watcher noticed may lie anywhere inside.
type Outage struct {
	From, To int64
	// Change: the leader confirmed after it is another node, or the same
	// in a higher term; otherwise only the watcher's samples were late.
	Change bool
}

// Outages lists the outages of a timeline in order.
func Outages(ticks []Tick) []Outage {
	var out []Outage
	var last *Tick // last tick with a confirmed leader
	gap := false   // a leaderless tick since last
	for i := range ticks {
		t := &ticks[i]
		if t.Leader == "" {
			gap = gap || last != nil
			continue
		}
		if last != nil && (gap || last.Leader != t.Leader || last.Term != t.Term) {
			out = append(out, Outage{From: last.Alive, To: t.Time, Change: last.Leader != t.Leader || last.Term != t.Term})
		}
		last, gap = t, false
	}
	if last != nil && gap {
		// Leaderless at the end: open to the end of the timeline.
		out = append(out, Outage{From: last.Alive, To: ticks[len(ticks)-1].Time, Change: true})
	}
	return out
}
