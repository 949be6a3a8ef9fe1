package admission

import (
	"testing"
	"time"
)

// A tenant at its cap is refused, another is not, and a released place
// can be taken again.
func TestCapPerTenant(t *testing.T) {
	c := NewCap("things", 2, nil)
	a1, _ := c.Take("a")
	if _, shed := c.Take("a"); shed != nil {
		t.Fatalf("second place refused: %v", shed)
	}
	if _, shed := c.Take("a"); shed == nil || shed.Held != 2 || shed.Max != 2 {
		t.Fatalf("third place: %+v, want a refusal at 2 of 2", shed)
	}
	if _, shed := c.Take("b"); shed != nil {
		t.Fatalf("another tenant refused: %v", shed)
	}
	a1.Release()
	a1.Release() // a second release gives nothing back twice
	if n := c.Of("a"); n != 1 {
		t.Fatalf("a holds %d, want 1", n)
	}
	if _, shed := c.Take("a"); shed != nil {
		t.Fatalf("a released place refused: %v", shed)
	}
}

// The retry time a refusal gives grows with the tenant's refusals a second
// (pushback), within MinRetry and MaxRetry, and falls back once they stop.
func TestCapPushback(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCap("things", 1, func() time.Time { return now })
	c.Take("a")
	refuse := func(n int) time.Duration {
		var shed *CapShed
		for range n {
			shed = c.Check("a")
		}
		return shed.RetryAfter
	}
	if got := refuse(PushbackRate); got != MinRetry {
		t.Fatalf("at the pushback rate: retry %v, want %v", got, MinRetry)
	}
	if got := refuse(9 * PushbackRate); got != 10*time.Second {
		t.Fatalf("at ten times the rate: retry %v, want 10s", got)
	}
	if got := refuse(100 * PushbackRate); got != MaxRetry {
		t.Fatalf("far over: retry %v, want %v", got, MaxRetry)
	}
	now = now.Add(time.Second) // the last window still counts
	if got := refuse(1); got != MaxRetry {
		t.Fatalf("one window on: retry %v, want %v", got, MaxRetry)
	}
	now = now.Add(2 * time.Second)
	if got := refuse(1); got != MinRetry {
		t.Fatalf("after a quiet window: retry %v, want %v", got, MinRetry)
	}
	if shed := c.Check("b"); shed != nil {
		t.Fatalf("another tenant: %v", shed)
	}
}
