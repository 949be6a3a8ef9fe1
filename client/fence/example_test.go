package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftlock/raftlock/client/fence"
)

// A worker paused past its lease comes back with an old token: the guard refuses it.
func Example() {
	ctx := context.Background()
	g := fence.NewMemory()

	fmt.Println(g.Advance(ctx, "tickets/402", 10481)) // worker A, before its pause
	fmt.Println(g.Advance(ctx, "tickets/402", 10482)) // worker B, after A's lease expired
	err := g.Advance(ctx, "tickets/402", 10481)       // worker A resumes
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	fmt.Println(err)
	// Output:
	// <nil>
	// <nil>
	// true
	// fence: stale fencing token 10481 for "tickets/402": token 10482 was already accepted
}
