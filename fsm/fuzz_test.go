package fsm

import (
	"errors"
	"testing"
)

// FuzzApply feeds arbitrary bytes to decoding and Apply: nothing may panic,
// undecodable bytes are an error, and a decoded command re-encodes to itself.
func FuzzApply(f *testing.F) {
	for _, c := range []Command{
		acquire("orders/1", "lease-aaaaaaaaaaaaaaaa", 1000),
		renew("orders/1", "lease-aaaaaaaaaaaaaaaa", 0),
		release("orders/1", "lease-aaaaaaaaaaaaaaaa"),
		{Op: OpTick, Stamp: 1 << 40},
		{Op: OpSetNode, NodeID: "n1", NodeAddr: "127.0.0.1:8001"},
	} {
		f.Add(c.Encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{commandVersion, byte(OpAcquire), 0xff, 0xff})
	m := New()
	var index uint64
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("decode error %v is not ErrBadCommand", err)
			}
			return
		}
		if got := c.Encode(nil); string(got) != string(data) {
			// Varints have one canonical form; anything else is rejected
			// only if it fails to round trip through decode again.
			if c2, err := DecodeCommand(got); err != nil || c2 != c {
				t.Fatalf("re-encoded command differs: %+v vs %+v", c2, c)
			}
		}
		index++
		m.ApplyCommand(index, 1+index/16, c)
	})
}
