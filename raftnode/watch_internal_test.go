package raftnode

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWatchHubWakesNamesAndPrefixes(t *testing.T) {
	h := newWatchHub()
	a, _ := h.add("jobs/a", false)
	b, _ := h.add("jobs/b", false)
	p, _ := h.add("jobs/", true)
	q, _ := h.add("other/", true)
	c, cancel := h.add("jobs/a", false)
	cancel()
	cancel() // twice is harmless
	if h.count.Load() != 4 {
		t.Fatalf("count %d, want 4", h.count.Load())
	}
	h.wake([]string{"unrelated"})
	if closed(a) || closed(b) || closed(p) || closed(q) {
		t.Fatal("a change elsewhere woke a watcher")
	}
	h.wake([]string{"jobs/a"})
	if !closed(a) || !closed(p) || closed(b) || closed(q) || closed(c) {
		t.Fatalf("after jobs/a: a %v p %v b %v q %v cancelled %v", closed(a), closed(p), closed(b), closed(q), closed(c))
	}
	if h.count.Load() != 2 {
		t.Fatalf("count %d, want 2 (b, q)", h.count.Load())
	}
	h.wakeAll()
	if !closed(b) || !closed(q) || h.count.Load() != 0 || len(h.names) != 0 || len(h.prefixes) != 0 {
		t.Fatalf("wakeAll left %d watchers", h.count.Load())
	}
}
