package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/raftlock/raftlock/client"
)

// startFakeRaftlock stands in for a real cluster in these examples: it
// starts an in-process fake of three nodes and returns their URLs.
func startFakeRaftlock() (endpoints []string, stop func()) {
	return client.StartFakeCluster(3)
}

// The common case: hold a lock while doing some work, and pass the fencing
// token to the storage the work writes, so that it can refuse a writer that
// lost the lock.
func ExampleWithLock() {
	endpoints, stop := startFakeRaftlock()
	defer stop()

	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := client.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-a"}
	err = client.WithLock(ctx, c, "orders/89041", opts, func(ctx context.Context, token uint64) error {
		// ctx is cancelled if the lease is lost: stop working then.
		fmt.Println("charging order 89041 with fencing token", token)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: charging order 89041 with fencing token 10481
}

// Acquire waits for the lock; the lease renews itself until Release.
func ExampleClient_Acquire() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Acquire(ctx, "reports/daily", client.AcquireOptions{TTL: 15 * time.Second, Owner: "cron-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Name(), "token", lease.Token())
	fmt.Println("trusted for at most the TTL:", time.Until(lease.Deadline()) <= 15*time.Second)

	select {
	case <-lease.Lost():
		fmt.Println("lost:", lease.Err())
	default:
		// ... work under lease.Context() ...
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", context.Cause(lease.Context()))
	// Output:
	// holding reports/daily token 10481
	// trusted for at most the TTL: true
	// released: raftlock: lease released
}

// TryAcquire answers at once; a held lock is a *HeldError naming the holder.
func ExampleClient_TryAcquire() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	first, err := c.TryAcquire(ctx, "orders/89041", client.AcquireOptions{Owner: "worker-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	_, err = c.TryAcquire(ctx, "orders/89041", client.AcquireOptions{Owner: "worker-b"})
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Printf("held by %s with token %d\n", held.Owner, held.Token)
	}
	fmt.Println(errors.Is(err, client.ErrHeld))
	// Output:
	// held by worker-a with token 10481
	// true
}

// Get shows who holds a lock, never the lease id.
func ExampleClient_Get() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	lease, err := c.TryAcquire(ctx, "orders/89041", client.AcquireOptions{Owner: "worker-a", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	info, err := c.Get(ctx, "orders/89041", false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Name, info.Held, info.Owner, info.Token, info.TTL)
	// Output: orders/89041 true worker-a 10481 10s
}

// Cluster shows the nodes and who leads.
func ExampleClient_Cluster() {
	endpoints, stop := startFakeRaftlock()
	defer stop()
	c, err := client.New(endpoints[2:]) // any node will do
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	cs, err := c.Cluster(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range cs.Nodes {
		fmt.Println(n.ID, "leader:", n.Leader)
	}
	// Output:
	// n1 leader: true
	// n2 leader: false
	// n3 leader: false
}
