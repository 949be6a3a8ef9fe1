package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestMemoryAdvance(t *testing.T) {
	type step struct {
		resource string
		token    uint64
		current  uint64 // 0: accepted; else the Current of the expected *StaleTokenError
		invalid  bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first token of a resource is accepted", []step{{"a", 1, 0, false}}},
		{"increasing tokens are accepted", []step{{"a", 3, 0, false}, {"a", 4, 0, false}, {"a", 100, 0, false}}},
		{"lower token is stale", []step{{"a", 10, 0, false}, {"a", 9, 10, false}}},
		{"equal token is stale", []step{{"a", 10, 0, false}, {"a", 10, 10, false}}},
		{"stale token records nothing", []step{{"a", 10, 0, false}, {"a", 5, 10, false}, {"a", 11, 0, false}, {"a", 10, 11, false}}},
		{"resources are independent", []step{{"a", 10, 0, false}, {"b", 5, 0, false}, {"a", 6, 10, false}, {"b", 6, 0, false}}},
		{"token 0 is invalid", []step{{"a", 0, 0, true}}},
		{"token above MaxToken is invalid", []step{{"a", MaxToken + 1, 0, true}, {"a", MaxToken, 0, false}}},
		{"empty resource name is a resource", []step{{"", 2, 0, false}, {"", 1, 2, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g Memory // the zero value works
			for i, s := range tt.steps {
				err := g.Advance(context.Background(), s.resource, s.token)
				switch {
				case s.invalid:
					if !errors.Is(err, ErrInvalidToken) || errors.Is(err, ErrStaleToken) {
						t.Fatalf("step %d: Advance(%q, %d) = %v, want ErrInvalidToken", i, s.resource, s.token, err)
					}
				case s.current == 0:
					if err != nil {
						t.Fatalf("step %d: Advance(%q, %d) = %v, want nil", i, s.resource, s.token, err)
					}
					if got := g.Current(s.resource); got != s.token {
						t.Fatalf("step %d: Current(%q) = %d, want %d", i, s.resource, got, s.token)
					}
				default:
					checkStale(t, err, s.resource, s.token, s.current)
				}
			}
		})
	}
}

// checkStale fails t unless err is a *StaleTokenError with these fields.
func checkStale(t *testing.T, err error, resource string, token, current uint64) {
	t.Helper()
	var serr *StaleTokenError
	if !errors.As(err, &serr) || !errors.Is(err, ErrStaleToken) {
		t.Fatalf("Advance(%q, %d) = %v, want a *StaleTokenError", resource, token, err)
	}
	want := StaleTokenError{Resource: resource, Token: token, Current: current}
	if *serr != want {
		t.Fatalf("got %+v, want %+v", *serr, want)
	}
}

func TestStaleTokenErrorMessage(t *testing.T) {
	err := fmt.Errorf("reserve: %w", &StaleTokenError{Resource: "tickets/402", Token: 33, Current: 34})
	msg := err.Error()
	for _, want := range []string{"33", "34", "tickets/402"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %s", msg, want)
		}
	}
	if !errors.Is(err, ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false", err)
	}
	if errors.Is(err, ErrInvalidToken) {
		t.Errorf("errors.Is(%v, ErrInvalidToken) = true", err)
	}
}

// TestMemoryConcurrent runs writers with interleaved tokens on one resource: every
// refusal names a current token at least as high, and the highest token wins.
func TestMemoryConcurrent(t *testing.T) {
	const writers, perWriter = 8, 500
	g := NewMemory()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted = map[uint64]bool{}
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				token := uint64(i*writers + w + 1) // writer w has tokens w+1, w+1+writers, …
				err := g.Advance(context.Background(), "r", token)
				var serr *StaleTokenError
				switch {
				case err == nil:
					mu.Lock()
					accepted[token] = true
					mu.Unlock()
				case errors.As(err, &serr):
					if serr.Current < token {
						t.Errorf("token %d refused with lower current %d", token, serr.Current)
					}
				default:
					t.Errorf("Advance: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	const highest = writers * perWriter
	if got := g.Current("r"); got != highest {
		t.Fatalf("Current = %d, want the highest token %d", got, highest)
	}
	if !accepted[highest] {
		t.Fatalf("the highest token %d was not accepted", highest)
	}
	t.Logf("%d of %d writes accepted", len(accepted), highest)
}
