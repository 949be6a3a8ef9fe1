package fence

import (
	"context"
	"strconv"
)

// SlotResource is the resource under which writes made with a semaphore
// permit are fenced: "semaphore:" + the semaphore's name + "#" + the slot.
//
// A permit's token is larger than every earlier token of its slot, not of
// the semaphore: permits held at the same time have tokens in no useful
// order, so one resource for the whole semaphore would refuse a valid
// permit whose token happens to be lower than another holder's. Fenced per
// slot, a holder paused past its permit is refused once its slot's next
// holder has written. The name is distinct for every (semaphore, slot), and
// from every lock name that does not itself start with "semaphore:".
func SlotResource(semaphore string, slot int) string {
	return "semaphore:" + semaphore + "#" + strconv.Itoa(slot)
}

// Permit is what AdvancePermit needs of a semaphore permit; a
// *client.Permit has it.
type Permit interface {
	Name() string
	Slot() int
	Token() uint64
}

// AdvancePermit fences a write made with permit p: it advances g for p's
// (semaphore, slot) to p's token (see SlotResource).
func AdvancePermit(ctx context.Context, g Guard, p Permit) error {
	return g.Advance(ctx, SlotResource(p.Name(), p.Slot()), p.Token())
}
