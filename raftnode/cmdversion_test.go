package raftnode_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testenv"
	"github.com/raftlock/raftlock/raftnode"
)

// entryAt decodes the command at index in n's log.
func entryAt(t *testing.T, n *testenv.Node, index uint64) (fsm.Command, uint64) {
	t.Helper()
	l, err := raftnode.LogEntry(n.Node, index)
	if err != nil {
		t.Fatalf("%s: log entry %d: %v", n.ID, index, err)
	}
	c, err := fsm.DecodeCommand(l.Data)
	if err != nil {
		t.Fatalf("%s: entry %d: %v", n.ID, index, err)
	}
	return c, l.Term
}

// A leader whose members all report reading the newest format (3) writes it, with
// the term it stamped in; a single node has no one to ask.
func TestLeaderWritesFormat2AfterSurvey(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := testenv.Start(t, size)
			leader := c.Leader()
			testenv.WaitFor(t, 15*time.Second, "the leader to write format 2", func() bool {
				return leader.CommandVersion() == fsm.MaxCommandVersion
			})
			code, body := acquire(t, leader, "format/a", "o", "lease-format-aaaaaaa", 10_000)
			if code != http.StatusOK {
				t.Fatalf("acquire: %d %v", code, body)
			}
			index := token(t, body)
			c.WaitApplied(index)
			for _, n := range c.Nodes {
				cmd, term := entryAt(t, n, index)
				if cmd.Version != fsm.MaxCommandVersion || cmd.StampTerm != term || cmd.Op != fsm.OpAcquire {
					t.Errorf("%s: entry %d is %v version %d stamped in term %d, logged in %d; want an acquire, version %d, same term",
						n.ID, index, cmd.Op, cmd.Version, cmd.StampTerm, term, fsm.MaxCommandVersion)
				}
			}
			c.EnsureSame(t)
		})
	}
}

// One member that reports reading only format 1 (an older build), or that
// does not answer, keeps the leader on format 1, though its survey ran.
func TestMemberOnFormat1HoldsLeaderOnFormat1(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fetch func(raftnode.Progress, error) (raftnode.Progress, error)
	}{
		{"reports 1", func(p raftnode.Progress, err error) (raftnode.Progress, error) {
			p.CommandVersion = 1
			return p, err
		}},
		{"fetch fails", func(raftnode.Progress, error) (raftnode.Progress, error) {
			return raftnode.Progress{}, errors.New("injected: connection refused")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every node's fetcher alters n3's answer and counts the
			// answers it gave, per asking node.
			var asked [4]atomic.Int32
			c := testenv.Start(t, 3, testenv.Options{Configure: func(cfg *raftnode.Config) {
				inner, self := cfg.FetchProgress, cfg.ID
				cfg.FetchProgress = func(ctx context.Context, id, addr string) (raftnode.Progress, error) {
					p, err := inner(ctx, id, addr)
					if id != "n3" {
						return p, err
					}
					defer asked[self[1]-'0'].Add(1)
					return tc.fetch(p, err)
				}
			}})
			leader := c.Leader()
			if leader.ID == "n3" {
				// n3 leading asks only n1 and n2, who read format 2;
				// hand leadership to another node.
				if err := leader.TransferLeadership(testenv.Context(t, 10*time.Second), ""); err != nil {
					t.Fatalf("transfer: %v", err)
				}
				leader = c.WaitForNewLeader(leader)
			}
			term := leader.Raft().CurrentTerm()
			// Two answers about n3 to the leader: the first survey has
			// been recorded before the second began. (Or the leader
			// switched, which the check below reports.)
			n := &asked[leader.ID[1]-'0']
			start := n.Load()
			testenv.WaitFor(t, 15*time.Second, "two surveys by the leader", func() bool {
				return n.Load() >= start+2 || leader.CommandVersion() != 1
			})
			if leader.Raft().CurrentTerm() != term || !leader.IsLeader() {
				t.Skip("leadership changed during the test; nothing to conclude")
			}
			if v := leader.CommandVersion(); v != 1 {
				t.Fatalf("leader writes format %d with n3 %s, want 1", v, tc.name)
			}
			code, body := acquire(t, leader, "format/b", "o", "lease-format-bbbbbbb", 10_000)
			if code != http.StatusOK {
				t.Fatalf("acquire: %d %v", code, body)
			}
			index := token(t, body)
			if cmd, _ := entryAt(t, leader, index); cmd.Version != 1 {
				t.Errorf("entry %d written in format %d, want 1", index, cmd.Version)
			}
		})
	}
}
