package client

import (
	"context"
	"testing"
	"time"
)

// The last round of a bounded Acquire leaves enough margin for the server's
// "held" answer to arrive before the caller's deadline.
func TestWaitRoundLeavesMargin(t *testing.T) {
	cases := []struct {
		left, round time.Duration
		min, max    time.Duration // bounds on the wait asked of the server
	}{
		{left: 0, round: 30 * time.Second, min: 0, max: 0},
		{left: 300 * time.Millisecond, round: 30 * time.Second, min: 150 * time.Millisecond, max: 200 * time.Millisecond},
		{left: 5 * time.Second, round: 30 * time.Second, min: 4400 * time.Millisecond, max: 4500 * time.Millisecond},
		{left: time.Minute, round: 30 * time.Second, min: 30 * time.Second, max: 30 * time.Second},
		{left: 20 * time.Second, round: 30 * time.Second, min: 18900 * time.Millisecond, max: 19 * time.Second},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), tc.left)
		w := waitRound(ctx, tc.round)
		cancel()
		if w < tc.min || w > tc.max {
			t.Errorf("%v left, round %v: wait %v, want %v..%v", tc.left, tc.round, w, tc.min, tc.max)
		}
	}
	if w := waitRound(context.Background(), 7*time.Second); w != 7*time.Second {
		t.Errorf("no deadline: wait %v, want the whole round", w)
	}
}
