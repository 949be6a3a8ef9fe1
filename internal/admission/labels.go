package admission

import (
	"slices"
	"sync"
	"time"
)

// OtherLabel is the metric label of every tenant not among the top ones.
const OtherLabel = "other"

// Labeler names tenants for metrics with bounded cardinality: the N tenants
// with the most calls in the previous period keep their own label, every
// other one is OtherLabel. Counting is bounded too, with the Space-Saving
// algorithm: at most 8N tenants are counted in a period, and a newcomer
// takes the place of the least counted one, inheriting its count (so a
// heavy newcomer still ranks, and a light one soon gives its place up).
// The first period, before any ranking, labels the first N tenants seen.
type Labeler struct {
	n      int
	period time.Duration
	now    func() time.Time

	mu     sync.Mutex
	start  time.Time
	counts map[string]int64
	top    map[string]bool
}

// NewLabeler keeps n labels, re-ranked every period (0: 1 minute); now is
// its clock (nil: time.Now).
func NewLabeler(n int, period time.Duration, now func() time.Time) *Labeler {
	if period <= 0 {
		period = time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &Labeler{n: max(n, 0), period: period, now: now, start: now(), counts: map[string]int64{}, top: map[string]bool{}}
}

// Label counts one call of tenant and returns its label.
func (l *Labeler) Label(tenant string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); now.Sub(l.start) >= l.period {
		l.rank()
		l.start = now
	}
	l.count(tenant)
	if !l.top[tenant] && len(l.top) < l.n {
		l.top[tenant] = true // a free label: only before the first ranking, or fewer tenants than labels
	}
	if l.top[tenant] {
		return tenant
	}
	return OtherLabel
}

func (l *Labeler) count(tenant string) {
	if _, ok := l.counts[tenant]; ok || len(l.counts) < 8*max(l.n, 1) {
		l.counts[tenant]++
		return
	}
	var least string
	low := int64(-1)
	for name, c := range l.counts {
		if low < 0 || c < low || c == low && name < least {
			least, low = name, c
		}
	}
	delete(l.counts, least)
	l.counts[tenant] = low + 1
}

// rank makes the period's busiest tenants the labelled ones and starts a
// new count.
func (l *Labeler) rank() {
	names := make([]string, 0, len(l.counts))
	for name := range l.counts {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := l.counts[b] - l.counts[a]; c != 0 {
			if c > 0 {
				return 1
			}
			return -1
		}
		if a < b {
			return -1
		}
		return 1
	})
	clear(l.top)
	for _, name := range names[:min(l.n, len(names))] {
		l.top[name] = true
	}
	clear(l.counts)
}
