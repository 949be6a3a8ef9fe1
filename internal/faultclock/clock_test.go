//go:build raftlock_faults

package faultclock

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeReal is host monotonic time moved by hand.
type fakeReal struct{ d time.Duration }

func (f *fakeReal) now() time.Duration { return f.d }

func newFake() (*Clock, *fakeReal) {
	r := &fakeReal{}
	return newClock(r.now, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), r
}

func TestRateScalesElapsedTime(t *testing.T) {
	c, r := newFake()
	r.d = time.Second
	if got := c.Now(); got != int64(time.Second) {
		t.Fatalf("rate 1: %v after 1s", time.Duration(got))
	}
	if err := c.Apply(Fault{Rate: 1.2}); err != nil {
		t.Fatal(err)
	}
	r.d += 10 * time.Second
	if got, want := time.Duration(c.Now()), 13*time.Second; got != want {
		t.Fatalf("rate 1.2 for 10s after 1s: %v, want %v", got, want)
	}
	c.Apply(Fault{Rate: 0.99})
	r.d += 100 * time.Second
	if got, want := time.Duration(c.Now()), 112*time.Second; got != want {
		t.Fatalf("then rate 0.99 for 100s: %v, want %v", got, want)
	}
	if w, want := c.Wall(), time.Date(2030, 1, 1, 0, 0, 112, 0, time.UTC); !w.Equal(want) {
		t.Fatalf("wall %v, want %v: the wall clock runs at the same rate", w, want)
	}
}

func TestMonotonicJumpIsForwardAndInstant(t *testing.T) {
	c, r := newFake()
	r.d = time.Second
	c.Apply(Fault{JumpMonoMs: 3_600_000})
	if got, want := time.Duration(c.Now()), time.Hour+time.Second; got != want {
		t.Fatalf("after a 1h jump: %v, want %v", got, want)
	}
	r.d += time.Second
	if got, want := time.Duration(c.Now()), time.Hour+2*time.Second; got != want {
		t.Fatalf("1s later: %v, want %v", got, want)
	}
	if err := c.Apply(Fault{JumpMonoMs: -1}); err == nil {
		t.Fatal("a backward monotonic jump was accepted")
	}
	for _, bad := range []Fault{{Rate: -1}, {Rate: MaxRate + 1}, {PauseMonoMs: -5}} {
		if err := c.Apply(bad); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

// A pause holds the reading still, then leaps to where the clock would be
// had it run throughout: over any interval the clock never measures more
// than really passed (times its rate).
func TestPauseStandsStillThenLeaps(t *testing.T) {
	c, r := newFake()
	r.d = 10 * time.Second
	c.Apply(Fault{PauseMonoMs: 2000})
	r.d += 1500 * time.Millisecond
	if got, want := time.Duration(c.Now()), 10*time.Second; got != want {
		t.Fatalf("during the pause: %v, want %v", got, want)
	}
	if s := c.State(); s.PausedMs != 500 {
		t.Fatalf("state says %d ms of pause left, want 500", s.PausedMs)
	}
	r.d += 500 * time.Millisecond
	if got, want := time.Duration(c.Now()), 12*time.Second; got != want {
		t.Fatalf("at the pause's end: %v, want %v", got, want)
	}
	// A jump during a pause shows at once; a second pause extends the first.
	c.Apply(Fault{PauseMonoMs: 1000})
	r.d += 100 * time.Millisecond
	c.Apply(Fault{JumpMonoMs: 50, PauseMonoMs: 2000})
	if got, want := time.Duration(c.Now()), 12*time.Second+50*time.Millisecond; got != want {
		t.Fatalf("jump during a pause: %v, want %v", got, want)
	}
	r.d += 2100 * time.Millisecond // past both pauses
	if got, want := time.Duration(c.Now()), 14*time.Second+250*time.Millisecond; got != want {
		t.Fatalf("after both pauses: %v, want %v", got, want)
	}
}

func TestWallJumpsBothWaysMonotonicUnmoved(t *testing.T) {
	c, r := newFake()
	r.d = time.Minute
	before := c.Now()
	c.Apply(Fault{JumpWallMs: -3_600_000})
	if got, want := c.Wall(), time.Date(2029, 12, 31, 23, 1, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("wall after -1h: %v, want %v", got, want)
	}
	c.Apply(Fault{JumpWallMs: 7_200_000})
	if got, want := c.Wall(), time.Date(2030, 1, 1, 1, 1, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("wall after +2h: %v, want %v", got, want)
	}
	if c.Now() != before {
		t.Fatal("a wall jump moved the monotonic clock")
	}
}

// Whatever sequence of faults, readings never decrease.
func TestNeverDecreases(t *testing.T) {
	c, r := newFake()
	last := int64(0)
	faults := []Fault{{Rate: 5}, {PauseMonoMs: 300}, {Rate: 0.01}, {JumpWallMs: -1e9}, {JumpMonoMs: 7}, {Rate: 1}, {PauseMonoMs: 10}}
	for i := 0; i < 2000; i++ {
		if i%97 == 0 {
			if err := c.Apply(faults[(i/97)%len(faults)]); err != nil {
				t.Fatal(err)
			}
		}
		r.d += time.Duration(i%13) * time.Millisecond
		now := c.Now()
		if now < last {
			t.Fatalf("step %d: %d after %d", i, now, last)
		}
		last = now
	}
}

func TestHandler(t *testing.T) {
	c, r := newFake()
	h := Handler(c, hclog.NewNullLogger())
	post := func(body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body)))
		return w
	}
	if w := post(`{"rate":1.01,"jump_mono_ms":1000,"jump_wall_ms":-3600000}`); w.Code != http.StatusOK {
		t.Fatalf("POST: %d %s", w.Code, w.Body)
	} else if !strings.Contains(w.Body.String(), `"rate":1.01`) || !strings.Contains(w.Body.String(), `"wall_offset_ms":-3600000`) {
		t.Fatalf("POST answer: %s", w.Body)
	}
	r.d = 100 * time.Second
	if got, want := time.Duration(c.Now()), 102*time.Second; got != want {
		t.Fatalf("after the POSTed fault: %v, want %v", got, want)
	}
	for _, bad := range []string{`{"rate":-2}`, `{"jump_mono_ms":-1}`, `{"typo":1}`, `not json`} {
		if w := post(bad); w.Code != http.StatusBadRequest {
			t.Fatalf("POST %s: %d, want 400", bad, w.Code)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, Path, nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", w.Code)
	}
}
