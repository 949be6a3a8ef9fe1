package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValidLeaseID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{strings.Repeat("a", MinLeaseID), true},
		{strings.Repeat("Z", MaxLeaseID), true},
		{"abcdefghijklmnop_-09AZ", true},
		{"", false},
		{strings.Repeat("a", MinLeaseID-1), false},
		{strings.Repeat("a", MaxLeaseID+1), false},
		{"abcdefghijklmnop=", false}, // padded base64
		{"abcdefghijklmnop+", false}, // standard base64
		{"abcdefghijklmnopé", false},
		{"abcdefgh ijklmnop", false},
	} {
		if got := ValidLeaseID(tc.id); got != tc.want {
			t.Errorf("ValidLeaseID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestNewLeaseID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewLeaseID()
		if !ValidLeaseID(id) || len(id) != 22 {
			t.Fatalf("NewLeaseID() = %q: not 22 characters of a valid lease id", id)
		}
		if seen[id] {
			t.Fatalf("NewLeaseID() repeated %q", id)
		}
		seen[id] = true
	}
}

// TestWireShapes pins the bodies to docs/API.md: names, order and what is
// left out. A change here breaks clients.
func TestWireShapes(t *testing.T) {
	ttl, zero := int64(10000), int64(0)
	for _, tc := range []struct {
		body any
		want string
	}{
		{AcquireRequest{Name: "a", TTLMs: &ttl, LeaseID: "l"}, `{"name":"a","ttl_ms":10000,"lease_id":"l"}`},
		{AcquireRequest{Name: "a", Owner: "o", TTLMs: &ttl, LeaseID: "l", WaitMs: 5, LockDelayMs: 6},
			`{"name":"a","owner":"o","ttl_ms":10000,"lease_id":"l","wait_ms":5,"lock_delay_ms":6}`},
		{RenewRequest{Name: "a", LeaseID: "l"}, `{"name":"a","lease_id":"l"}`},
		{RenewRequest{Name: "a", LeaseID: "l", TTLMs: &ttl}, `{"name":"a","lease_id":"l","ttl_ms":10000}`},
		{ReleaseRequest{Name: "a", LeaseID: "l"}, `{"name":"a","lease_id":"l"}`},
		{ReleaseRequest{Name: "a", Force: true}, `{"name":"a","force":true}`},
		{JoinRequest{ID: "n4", RaftAddr: "h:1"}, `{"id":"n4","raft_addr":"h:1","http_addr":""}`},
		{LeaveRequest{ID: "n4"}, `{"id":"n4"}`},
		{TransferRequest{}, `{}`},
		{Lease{Name: "a", Owner: "o", LeaseID: "l", FencingToken: 7, TTLMs: 1000}, `{"name":"a","owner":"o","lease_id":"l","fencing_token":7,"ttl_ms":1000}`},
		{Error{Error: CodeNoLeader, Message: "m"}, `{"error":"no_leader","message":"m"}`},
		{Error{Error: CodeOverloaded, Message: "m", RetryAfterMs: 1000}, `{"error":"overloaded","message":"m","retry_after_ms":1000}`},
		{HeldError{Error: CodeHeld, Message: "m", Holder: Holder{"o", 7}}, `{"error":"held","message":"m","holder":{"owner":"o","fencing_token":7}}`},
		{HeldError{Error: CodeHeld, Message: "m", Holder: Holder{"o", 7}, RetryAfterMs: 9}, `{"error":"held","message":"m","holder":{"owner":"o","fencing_token":7},"retry_after_ms":9}`},
		{Released{Released: true}, `{"released":true}`},
		{Released{Released: true, Holder: &Holder{"o", 7}}, `{"released":true,"holder":{"owner":"o","fencing_token":7}}`},
		{Released{}, `{"released":false}`},
		{Lock{Name: "a", Held: true, Owner: "o", FencingToken: 7, TTLMs: 1000, Index: 9}, `{"name":"a","held":true,"owner":"o","fencing_token":7,"ttl_ms":1000,"index":9}`},
		{Lock{Name: "a", Held: true, Owner: "o", FencingToken: 7, TTLMs: 1000, Value: "v", Index: 9}, `{"name":"a","held":true,"owner":"o","fencing_token":7,"ttl_ms":1000,"value":"v","index":9}`},
		{Lock{Name: "a", Held: true, Owner: "o", FencingToken: 7, TTLMs: 1000, RemainingMs: &zero, Waiters: 2, Index: 9}, `{"name":"a","held":true,"owner":"o","fencing_token":7,"ttl_ms":1000,"remaining_ms":0,"waiters":2,"index":9}`},
		{FreeLock{Name: "a"}, `{"name":"a","held":false,"index":0}`},
		{FreeLock{Name: "a", Index: 12}, `{"name":"a","held":false,"index":12}`},
		{LockList{Locks: []Lock{}}, `{"locks":[],"truncated":false,"index":0}`},
		{AcquireRequest{Name: "a", TTLMs: &ttl, LeaseID: "l", Value: "v"}, `{"name":"a","ttl_ms":10000,"lease_id":"l","value":"v"}`},
		{UpdateRequest{Name: "a", LeaseID: "l", Value: ""}, `{"name":"a","lease_id":"l","value":""}`},
		{Cluster{ID: "n1", Leader: "n1", Term: 2, LastIndex: 5, CommitIndex: 3, AppliedIndex: 4, Nodes: []Node{{"n1", "r", "h", true, true}}},
			`{"id":"n1","leader":"n1","term":2,"last_index":5,"commit_index":3,"applied_index":4,"nodes":[{"id":"n1","raft_addr":"r","http_addr":"h","voter":true,"leader":true}]}`},
		{Joined{"n4"}, `{"joined":"n4"}`},
		{Left{"n4"}, `{"left":"n4"}`},
		{Transferred{Leader: "n2"}, `{"leader":"n2"}`},
		{Transferred{Leader: "n1", Message: "m"}, `{"leader":"n1","message":"m"}`},
		{Health{"ok"}, `{"status":"ok"}`},
		// Sessions, shared locks, semaphores (docs/API.md).
		{AcquireRequest{Name: "a", Owner: "o", LeaseID: "l", Mode: ModeShared, SessionID: "s"},
			`{"name":"a","owner":"o","lease_id":"l","mode":"shared","session_id":"s"}`},
		{Lease{Name: "a", Owner: "o", LeaseID: "l", FencingToken: 7, TTLMs: 1000, SessionID: "s", Mode: ModeShared},
			`{"name":"a","owner":"o","lease_id":"l","fencing_token":7,"ttl_ms":1000,"session_id":"s","mode":"shared"}`},
		{HeldError{Error: CodeHeld, Message: "m", Holder: Holder{"o", 7}, Holders: []Holder{{"o", 7}, {"p", 8}}, HoldersTotal: 2},
			`{"error":"held","message":"m","holder":{"owner":"o","fencing_token":7},"holders":[{"owner":"o","fencing_token":7},{"owner":"p","fencing_token":8}],"holders_total":2}`},
		{Lock{Name: "a", Held: true, Owner: "o", FencingToken: 7, TTLMs: 1000, Index: 9, Mode: ModeShared,
			Holders: []LockHolder{{Owner: "o", FencingToken: 7, TTLMs: 1000, RemainingMs: &zero}, {Owner: "p", FencingToken: 8, TTLMs: 2000}}},
			`{"name":"a","held":true,"owner":"o","fencing_token":7,"ttl_ms":1000,"index":9,"mode":"shared","holders":[{"owner":"o","fencing_token":7,"ttl_ms":1000,"remaining_ms":0},{"owner":"p","fencing_token":8,"ttl_ms":2000}]}`},
		{SessionCreateRequest{Owner: "o", TTLMs: 10000}, `{"owner":"o","ttl_ms":10000}`},
		{SessionCreateRequest{Owner: "o", TTLMs: 10000, LockDelayMs: 5, SessionID: "s"}, `{"owner":"o","ttl_ms":10000,"lock_delay_ms":5,"session_id":"s"}`},
		{SessionRenewRequest{SessionID: "s"}, `{"session_id":"s"}`},
		{SessionRenewRequest{SessionID: "s", TTLMs: &ttl}, `{"session_id":"s","ttl_ms":10000}`},
		{SessionCloseRequest{SessionID: "s"}, `{"session_id":"s"}`},
		{Session{SessionID: "s", Owner: "o", TTLMs: 10000}, `{"session_id":"s","owner":"o","ttl_ms":10000,"lock_delay_ms":0}`},
		{SessionClosed{Closed: true, Released: 3}, `{"closed":true,"released":3}`},
		{SessionInfo{SessionID: "s", Owner: "o", TTLMs: 10000, LockDelayMs: 5, Index: 9, Leases: []SessionLease{}},
			`{"session_id":"s","owner":"o","ttl_ms":10000,"lock_delay_ms":5,"index":9,"leases":[]}`},
		{SessionInfo{SessionID: "s", Owner: "o", TTLMs: 10000, RemainingMs: &zero, Index: 9, Leases: []SessionLease{
			{Kind: LeaseKindLock, Name: "a", FencingToken: 7, Mode: ModeShared}, {Kind: LeaseKindSemaphore, Name: "b", FencingToken: 8, Slot: new(int)}}},
			`{"session_id":"s","owner":"o","ttl_ms":10000,"lock_delay_ms":0,"remaining_ms":0,"index":9,"leases":[{"kind":"lock","name":"a","fencing_token":7,"mode":"shared"},{"kind":"semaphore","name":"b","fencing_token":8,"slot":0}]}`},
		{SemaphoreAcquireRequest{Name: "a", Limit: 3, TTLMs: &ttl}, `{"name":"a","limit":3,"ttl_ms":10000}`},
		{SemaphoreAcquireRequest{Name: "a", Limit: 3, Owner: "o", SessionID: "s", LeaseID: "l", WaitMs: 5},
			`{"name":"a","limit":3,"owner":"o","session_id":"s","lease_id":"l","wait_ms":5}`},
		{SemaphoreRenewRequest{Name: "a", LeaseID: "l"}, `{"name":"a","lease_id":"l"}`},
		{SemaphoreRenewRequest{Name: "a", LeaseID: "l", TTLMs: &ttl}, `{"name":"a","lease_id":"l","ttl_ms":10000}`},
		{SemaphoreReleaseRequest{Name: "a", LeaseID: "l"}, `{"name":"a","lease_id":"l"}`},
		{Permit{Name: "a", Owner: "o", LeaseID: "l", Slot: 0, FencingToken: 7, Limit: 3, TTLMs: 1000},
			`{"name":"a","owner":"o","lease_id":"l","slot":0,"fencing_token":7,"limit":3,"ttl_ms":1000}`},
		{Permit{Name: "a", Owner: "o", LeaseID: "l", Slot: 2, FencingToken: 7, Limit: 3, TTLMs: 1000, SessionID: "s"},
			`{"name":"a","owner":"o","lease_id":"l","slot":2,"fencing_token":7,"limit":3,"ttl_ms":1000,"session_id":"s"}`},
		{FullError{Error: CodeFull, Message: "m", Holders: []PermitHolder{{Owner: "o", Slot: 0, FencingToken: 7}}, HoldersTotal: 40},
			`{"error":"full","message":"m","holders":[{"owner":"o","slot":0,"fencing_token":7}],"holders_total":40}`},
		{LimitMismatchError{Error: CodeLimitMismatch, Message: "m", Limit: 3}, `{"error":"limit_mismatch","message":"m","limit":3}`},
		{Semaphore{Name: "a", Holders: []SemaphoreHolder{}}, `{"name":"a","limit":0,"holders":[],"index":0}`},
		{Semaphore{Name: "a", Limit: 3, Index: 9, Waiters: 2, Holders: []SemaphoreHolder{{Owner: "o", Slot: 1, FencingToken: 7, TTLMs: 1000, RemainingMs: &zero}}},
			`{"name":"a","limit":3,"holders":[{"owner":"o","slot":1,"fencing_token":7,"ttl_ms":1000,"remaining_ms":0}],"index":9,"waiters":2}`},
		{Ready{true}, `{"ready":true}`},
	} {
		b, err := json.Marshal(tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%T:\n got %s\nwant %s", tc.body, b, tc.want)
		}
	}
}
