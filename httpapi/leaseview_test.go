package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testenv"
)

// Reads the leader answers show a held lock's time left and its parked
// acquires; a follower's stale read shows neither.
func TestReadsShowRemainingAndWaiters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := testenv.Start(t, 3)
	leader, follower := cl.Leader(), cl.Followers()[0]
	hc := cl.HTTPClient()
	post := func(url, body string) (int, []byte) {
		t.Helper()
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	getLock := func(url string) api.Lock {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l api.Lock
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	st, b := post(follower.URL()+"/v1/locks/acquire", `{"name":"jobs/1","owner":"a","ttl_ms":600000}`)
	if st != http.StatusOK {
		t.Fatalf("acquire: %d %s", st, b)
	}
	var lease api.Lease
	if err := json.Unmarshal(b, &lease); err != nil {
		t.Fatal(err)
	}
	cl.WaitApplied(lease.FencingToken)

	// Linearizable, through a follower: forwarded, answered by the leader.
	l := getLock(follower.URL() + "/v1/locks/jobs/1")
	if l.RemainingMs == nil || *l.RemainingMs <= 0 || *l.RemainingMs > 600000 {
		t.Errorf("linearizable read: remaining_ms %v, want in (0, 600000]", l.RemainingMs)
	}
	if l := getLock(follower.URL() + "/v1/locks/jobs/1?stale=true"); l.RemainingMs != nil || l.Waiters != 0 {
		t.Errorf("follower's stale read shows remaining_ms %v, waiters %d: it cannot know them", l.RemainingMs, l.Waiters)
	}

	// A parked acquire shows as a waiter until the holder releases.
	parked := make(chan int, 1)
	go func() {
		st, _ := post(leader.URL()+"/v1/locks/acquire", `{"name":"jobs/1","owner":"b","ttl_ms":10000,"wait_ms":60000}`)
		parked <- st
	}()
	testenv.WaitFor(t, 10*time.Second, "one waiter shown", func() bool {
		return getLock(leader.URL()+"/v1/locks/jobs/1").Waiters == 1
	})
	var list api.LockList
	resp, err := hc.Get(follower.URL() + "/v1/locks?prefix=jobs/")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Locks) != 1 || list.Locks[0].Waiters != 1 || list.Locks[0].RemainingMs == nil {
		t.Errorf("list through a follower: %+v (%v), want jobs/1 with 1 waiter and remaining_ms", list, err)
	}
	if st, b := post(leader.URL()+"/v1/locks/release", `{"name":"jobs/1","lease_id":"`+lease.LeaseID+`"}`); st != http.StatusOK {
		t.Fatalf("release: %d %s", st, b)
	}
	if st := <-parked; st != http.StatusOK {
		t.Fatalf("parked acquire: %d, want it granted", st)
	}
	if l := getLock(leader.URL() + "/v1/locks/jobs/1"); l.Owner != "b" || l.Waiters != 0 {
		t.Errorf("after the grant: owner %q, waiters %d", l.Owner, l.Waiters)
	}
}
