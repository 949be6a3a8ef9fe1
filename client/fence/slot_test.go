package fence

import (
	"context"
	"errors"
	"testing"
)

type permit struct {
	name  string
	slot  int
	token uint64
}

func (p permit) Name() string  { return p.name }
func (p permit) Slot() int     { return p.slot }
func (p permit) Token() uint64 { return p.token }

func TestAdvancePermitFencesPerSlot(t *testing.T) {
	ctx := context.Background()
	g := NewMemory()
	// Three permits held at once: their tokens are in no order by slot.
	for _, p := range []permit{{"pool", 0, 30}, {"pool", 1, 31}, {"pool", 2, 29}} {
		if err := AdvancePermit(ctx, g, p); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	}
	// Slot 1's next holder writes; its paused predecessor is refused.
	if err := AdvancePermit(ctx, g, permit{"pool", 1, 40}); err != nil {
		t.Fatal(err)
	}
	err := AdvancePermit(ctx, g, permit{"pool", 1, 31})
	var serr *StaleTokenError
	if !errors.As(err, &serr) || serr.Resource != SlotResource("pool", 1) || serr.Current != 40 {
		t.Fatalf("paused holder of slot 1: %v", err)
	}
	// Slot 2's holder, with the lowest token, still writes.
	if err := AdvancePermit(ctx, g, permit{"pool", 2, 29 + 1}); err != nil {
		t.Fatalf("slot 2: %v", err)
	}
	if err := AdvancePermit(ctx, g, permit{"other", 1, 5}); err != nil {
		t.Fatalf("another semaphore's slot 1: %v", err)
	}
}

func TestSlotResourceIsDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"a", "a#1", "a#", "b/c", "semaphore:a"} {
		for slot := range 12 {
			r := SlotResource(name, slot)
			if seen[r] {
				t.Fatalf("%q slot %d names %q twice", name, slot, r)
			}
			seen[r] = true
		}
	}
}
