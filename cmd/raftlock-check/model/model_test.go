package model

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/raftlock/raftlock/cmd/raftlock-check/history"
)

const ms = int64(time.Millisecond)

// op builds a hand-made operation; times are in milliseconds.
func op(id string, client int, kind, lease string, ttl int64, call, ret int64, out string, tok uint64) history.Op {
	o := history.Op{ID: id, Client: client, Kind: kind, Name: "L", Lease: lease, TTLMs: ttl, Call: call * ms, Return: ret * ms, Outcome: out, Token: tok}
	if out == history.Held {
		o.Token, o.Holder = 0, tok
	}
	if out == history.Unknown {
		o.Return = math.MaxInt64
	}
	return o
}

// val sets an op's value: sent by an acquire or update, answered to a read.
func val(o history.Op, v string) history.Op {
	o.Value = v
	return o
}

func lin(t *testing.T, ops []history.Op) porcupine.CheckResult {
	t.Helper()
	res := Linearizable(ops, 10*time.Second)
	if len(res) != 1 {
		t.Fatalf("partitions: %d", len(res))
	}
	return res[0].Result
}

func TestModel(t *testing.T) {
	cases := []struct {
		name string
		want porcupine.CheckResult
		ops  []history.Op
	}{
		{"acquire, held, release, acquire", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 2, history.Acquire, "B", 1000, 20, 30, history.Held, 5),
			op("3", 1, history.Release, "A", 0, 40, 50, history.OK, 0),
			op("4", 2, history.Acquire, "B", 1000, 60, 70, history.OK, 9),
		}},
		{"held with no holder named: the lock is promised to a waiter", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			op("3", 2, history.Acquire, "B", 1000, 40, 50, history.Held, 0),
		}},
		{"held naming a holder that released", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			op("3", 2, history.Acquire, "B", 1000, 40, 50, history.Held, 5),
		}},
		{"grant to another while the lease must still hold", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 2, history.Acquire, "B", 1000, 500, 510, history.OK, 9),
		}},
		{"grant to another once the lease may be gone", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 2, history.Acquire, "B", 1000, 900, 1001, history.OK, 9),
		}},
		{"a lease may outlive its ttl (one-sided expiry)", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 2, history.Acquire, "B", 1000, 5000, 5010, history.Held, 5),
			op("3", 1, history.Renew, "A", 1000, 6000, 6010, history.OK, 5),
		}},
		{"renew restarts the ttl from its send", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Renew, "A", 1000, 800, 810, history.OK, 5),
			op("3", 2, history.Acquire, "B", 1000, 1200, 1210, history.OK, 9),
		}},
		{"token must grow", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			op("3", 2, history.Acquire, "B", 1000, 40, 50, history.OK, 4),
		}},
		{"release acknowledged but lock still held", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			op("3", 2, history.Acquire, "B", 1000, 40, 50, history.Held, 5),
		}},
		{"unknown acquire takes effect later", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 0, history.Unknown, 0),
			op("2", 2, history.Read, "", 0, 100, 110, history.Free, 0),
			op("3", 2, history.Acquire, "B", 1000, 200, 210, history.Held, 7),
			op("4", 2, history.Read, "", 0, 300, 310, history.OK, 7),
		}},
		{"unknown grant's token must still grow", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			op("3", 2, history.Acquire, "B", 1000, 40, 0, history.Unknown, 0),
			op("4", 3, history.Read, "", 0, 100, 110, history.OK, 3),
		}},
		{"expiry observed inside a long call pushes what follows it late too", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			// B's grant needs A gone: its point is in [1000, 2000].
			op("2", 2, history.Acquire, "B", 1000, 100, 2000, history.OK, 9),
			// This read overlaps B's acquire but returned at 600: it cannot
			// come after a point at or after 1000, yet it sees B's token.
			op("3", 3, history.Read, "", 0, 300, 600, history.OK, 9),
		}},
		{"idempotent retry keeps the token", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 0, history.Unknown, 0),
			op("2", 1, history.Acquire, "A", 1000, 100, 110, history.OK, 5),
			op("3", 1, history.Acquire, "A", 1000, 120, 130, history.OK, 5),
		}},
		{"retry of a holding lease with a new token", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Acquire, "A", 1000, 100, 110, history.OK, 6),
		}},
		{"renew of an expired lease is refused", porcupine.Ok, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Renew, "A", 1000, 1500, 1510, history.NotHolder, 0),
			op("3", 2, history.Read, "", 0, 1600, 1610, history.Free, 0),
		}},
		{"renew refused before the ttl ran out", porcupine.Illegal, []history.Op{
			op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5),
			op("2", 1, history.Renew, "A", 1000, 500, 510, history.NotHolder, 0),
		}},
		{"update by the holder sets the value; reads show it", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Read, "", 0, 20, 30, history.OK, 5), "a1"),
			val(op("3", 1, history.Update, "A", 0, 40, 50, history.OK, 5), "a2"),
			val(op("4", 2, history.Read, "", 0, 60, 70, history.OK, 5), "a2"),
		}},
		{"read shows the value from before an acknowledged update", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 40, 50, history.OK, 5), "a2"),
			val(op("3", 2, history.Read, "", 0, 60, 70, history.OK, 5), "a1"),
		}},
		{"read overlapping an update may show either value", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 40, 80, history.OK, 5), "a2"),
			val(op("3", 2, history.Read, "", 0, 50, 60, history.OK, 5), "a1"),
			val(op("4", 3, history.Read, "", 0, 55, 70, history.OK, 5), "a2"),
		}},
		{"read shows a value never sent", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Read, "", 0, 20, 30, history.OK, 5), "b1"),
		}},
		{"update keeps the token", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 40, 50, history.OK, 6), "a2"),
		}},
		{"update does not extend the lease", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 800, 810, history.OK, 5), "a2"),
			val(op("3", 2, history.Acquire, "B", 1000, 1200, 1210, history.OK, 9), "b1"),
			val(op("4", 3, history.Read, "", 0, 1300, 1310, history.OK, 9), "b1"),
		}},
		{"update by a non-holder is not_holder", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Update, "B", 0, 20, 30, history.NotHolder, 0), "b1"),
			val(op("3", 3, history.Read, "", 0, 40, 50, history.OK, 5), "a1"),
		}},
		{"update by a non-holder acknowledged", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Update, "B", 0, 20, 30, history.OK, 5), "b1"),
		}},
		{"holder's update refused while its lease must hold", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 500, 510, history.NotHolder, 0), "a2"),
		}},
		{"unknown update may apply later", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 20, 0, history.Unknown, 0), "a2"),
			val(op("3", 2, history.Read, "", 0, 100, 110, history.OK, 5), "a1"),
			val(op("4", 2, history.Read, "", 0, 200, 210, history.OK, 5), "a2"),
		}},
		{"unknown update cannot be undone", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 20, 0, history.Unknown, 0), "a2"),
			val(op("3", 2, history.Read, "", 0, 100, 110, history.OK, 5), "a2"),
			val(op("4", 2, history.Read, "", 0, 200, 210, history.OK, 5), "a1"),
		}},
		{"a blocking read is performed when it returns: it shows a change made while it waited", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Read, "", 0, 20, 620, history.OK, 5), "a2"), // ?index=…&wait_ms=600
			val(op("3", 1, history.Update, "A", 0, 300, 310, history.OK, 5), "a2"),
		}},
		{"a blocking read cannot show a change made after it returned", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 2, history.Read, "", 0, 20, 620, history.OK, 5), "a2"),
			val(op("3", 1, history.Update, "A", 0, 700, 710, history.OK, 5), "a2"),
		}},
		{"a retried acquire by the holder sets its value again", porcupine.Ok, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			val(op("2", 1, history.Update, "A", 0, 20, 30, history.OK, 5), "a2"),
			val(op("3", 1, history.Acquire, "A", 1000, 40, 50, history.OK, 5), "a1"),
			val(op("4", 2, history.Read, "", 0, 60, 70, history.OK, 5), "a1"),
		}},
		{"a new holder's read never shows the old holder's value", porcupine.Illegal, []history.Op{
			val(op("1", 1, history.Acquire, "A", 1000, 0, 10, history.OK, 5), "a1"),
			op("2", 1, history.Release, "A", 0, 20, 30, history.OK, 0),
			val(op("3", 2, history.Acquire, "B", 1000, 40, 50, history.OK, 9), "b1"),
			val(op("4", 3, history.Read, "", 0, 60, 70, history.OK, 9), "a1"),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := lin(t, c.ops); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}
