package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/client/fence"
)

// A session keeps many locks with one keepalive: its watchdog renews the
// session alone, and every lock taken through it ends with it.
func ExampleNewSession() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.NewSession(ctx, c, client.SessionOptions{Owner: "ingest-7", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close(ctx) // releases every lock of the session at once

	for _, shard := range []string{"shards/1", "shards/2", "shards/3"} {
		lease, err := sess.TryAcquire(ctx, shard, client.AcquireOptions{})
		if err != nil {
			log.Fatal(err)
		}
		// lease.Done() closes when the session is lost or closed.
		fmt.Println(lease.Name(), "token", lease.Token())
	}
	// Output:
	// shards/1 token 10482
	// shards/2 token 10483
	// shards/3 token 10484
}

// A semaphore's permit is fenced per slot: the storage refuses a holder
// paused past its permit once the slot's next holder has written.
func ExampleClient_TrySemaphore() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	guard := fence.NewMemory() // a fence.SQL or fence.Pgx guard in production
	permit, err := c.TrySemaphore(ctx, "exporters", 3, client.SemaphoreOptions{TTL: 10 * time.Second, Owner: "exporter-a"})
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrFull): all 3 permits are held
	}
	defer permit.Release(ctx)
	if err := fence.AdvancePermit(ctx, guard, permit); err != nil {
		log.Fatal(err) // a stale permit: stop writing
	}
	fmt.Println("slot", permit.Slot(), "token", permit.Token(), "fenced as", fence.SlotResource(permit.Name(), permit.Slot()))
	// Output: slot 0 token 10481 fenced as semaphore:exporters#0
}
