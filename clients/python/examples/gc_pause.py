"""The failure fencing tokens exist for, with a real raftlock cluster and SQLite.

Worker A takes lock tickets/402, checks its lease, and is frozen (SIGSTOP: a
stand-in for a long GC pause, which stops every thread, its lease watchdog
included) just before it writes. Its lease expires; worker B takes the lock
with a higher fencing token and reserves ticket 402. A wakes up and sends
its write with its old token: the fenced UPDATE refuses it, and B's
reservation stands.

    python3 examples/gc_pause.py --endpoints 127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003

(`scripts/cluster.sh up` starts such a cluster.) Exit status 0 when A's late
write was refused, 1 when it was not.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

import raftlock
from raftlock.fence import StaleTokenError, fenced_update

LOCK = "tickets/402"
TTL = 2.0
T0 = time.monotonic()


def say(who: str, text: str) -> None:
    print(f"[{time.monotonic() - T0:5.2f}s] {who:8s} {text}", flush=True)


def reserve(db: str, holder: str, token: int) -> None:
    """The fenced write: reserve ticket 402 for holder, unless a later
    holder of the lock (a higher token) has written it already."""
    conn = sqlite3.connect(db)
    try:
        fenced_update(conn, "tickets", 402, token, "holder = ?", (holder,))
        conn.commit()
    finally:
        conn.close()


def worker_a(endpoints: str, db: str) -> None:
    client = raftlock.Client(endpoints)
    lease = client.lock(LOCK, ttl=TTL, wait=10, owner="worker-a")
    try:
        lease.check()  # the lease is good: go ahead and write...
        print(f"token {lease.fencing_token}", flush=True)
        print("ready", flush=True)  # ...here the pause strikes
        sys.stdin.readline()
        try:
            reserve(db, "worker-a", lease.fencing_token)
            print("written", flush=True)
        except StaleTokenError as e:
            print(f"refused {e}", flush=True)
    finally:
        try:
            lease.release()
        except raftlock.LeaseLostError as e:
            print(f"lost {e}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoints", default=os.environ.get("RAFTLOCK_ENDPOINTS", "127.0.0.1:8001,127.0.0.1:8002,127.0.0.1:8003"))
    p.add_argument("--db", help="SQLite file (default: a temporary one)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "a":
        worker_a(args.endpoints, args.db)
        return 0

    tmp = tempfile.TemporaryDirectory()
    db = args.db or os.path.join(tmp.name, "tickets.db")
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE IF NOT EXISTS tickets (id integer PRIMARY KEY, holder text, "
                 "last_fencing_token integer NOT NULL DEFAULT 0)")
    conn.execute("INSERT OR REPLACE INTO tickets (id, holder, last_fencing_token) VALUES (402, NULL, 0)")
    conn.commit()

    a = subprocess.Popen([sys.executable, __file__, "--worker", "a", "--endpoints", args.endpoints, "--db", db],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert a.stdout is not None and a.stdin is not None
        token_a = int(a.stdout.readline().split()[1])
        say("worker-a", f"holds {LOCK} with fencing token {token_a}, lease checked, about to write")
        a.stdout.readline()  # "ready"
        os.kill(a.pid, signal.SIGSTOP)
        say("worker-a", "paused (SIGSTOP, as a long GC pause): its watchdog cannot renew")

        client = raftlock.Client(args.endpoints)
        say("worker-b", f"waits for {LOCK}")
        with client.lock(LOCK, ttl=10, wait=30, owner="worker-b") as lease:
            say("worker-b", f"got it when A's lease expired: fencing token {lease.fencing_token}")
            reserve(db, "worker-b", lease.fencing_token)
            say("worker-b", "reserved ticket 402")

        os.kill(a.pid, signal.SIGCONT)
        say("worker-a", "resumes and writes with its old token")
        a.stdin.write("go\n")
        a.stdin.flush()
        refused = False
        for line in a.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "refused":
                refused = True
                say("storage", f"refused worker-a's write: {rest}")
            elif kind == "written":
                say("storage", "ACCEPTED worker-a's stale write")
            elif kind == "lost":
                say("worker-a", f"its lease was lost meanwhile: {rest}")
        a.wait(30)
        holder, token = conn.execute("SELECT holder, last_fencing_token FROM tickets WHERE id = 402").fetchone()
        say("result", f"ticket 402 is held by {holder} (written with token {token})")
        ok = refused and holder == "worker-b"
        print("the paused worker's stale write was refused" if ok else "FENCING FAILED", flush=True)
        return 0 if ok else 1
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()
        conn.close()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
