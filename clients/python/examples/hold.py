"""Holds a lock for a while, renewing it, and says so every second.

    python3 examples/hold.py [seconds]     # against scripts/cluster.sh up

Kill the leader while it runs (scripts/cluster.sh status shows it; kill -9 its
pid): the watchdog renews through the new leader and the lease is kept.
"""

import sys
import time

import raftlock

client = raftlock.Client(["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"])
seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0

with client.lock("orders/89041", ttl=5.0, wait=10.0, owner="worker-a") as lease:
    print(f"holding orders/89041 with fencing token {lease.fencing_token}")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lease.check()  # raises LeaseLostError once the lease cannot be trusted
        left = lease.deadline - time.monotonic()
        print(f"  held; trusted for {left:.1f}s more; leader {client.leader or '?'}", flush=True)
        time.sleep(1)
print("released")
