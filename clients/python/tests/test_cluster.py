"""Integration tests against real three-node clusters of the built binary."""

from __future__ import annotations

import http.client
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import raftlock
from cluster import Cluster
from fakes import _QuietServer
from raftlock.fence import MemoryGuard, SQLGuard, StaleTokenError, advance_permit

HERE = Path(__file__).resolve().parent


def eventually(pred, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.02)


class LogRecords(logging.Handler):
    """Collects the client's log records, to wait for what it did."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def has(self, text: str) -> bool:
        return any(text in r.getMessage() for r in list(self.records))


class SharedCluster(unittest.TestCase):
    """Tests that leave the cluster as they found it share one."""

    cluster: Cluster

    @classmethod
    def setUpClass(cls) -> None:
        cls.cluster = Cluster()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.close()

    def setUp(self) -> None:
        self.c = raftlock.Client(self.cluster.endpoints)

    def test_acquire_renew_release(self) -> None:
        lease = self.c.try_acquire("orders/1", ttl=5, owner="worker-a")
        info = self.c.get("orders/1")
        self.assertEqual((info.held, info.owner, info.fencing_token), (True, "worker-a", lease.fencing_token))
        renewed = self.c.renew("orders/1", lease.lease_id)
        self.assertEqual(renewed.fencing_token, lease.fencing_token)
        self.assertIn("orders/1", [x.name for x in self.c.list("orders/").locks])
        lease.release()
        self.assertFalse(self.c.get("orders/1").held)
        with self.assertRaises(raftlock.NotHolderError):
            self.c.renew("orders/1", lease.lease_id)
        again = self.c.try_acquire("orders/1", ttl=5)
        self.assertGreater(again.fencing_token, lease.fencing_token)
        again.release()

    def test_watchdog_keeps_a_short_lease(self) -> None:
        with self.c.lock("orders/2", ttl=2.0, wait=0) as lease:
            first = lease.deadline
            # Renewed past a whole TTL after the grant's deadline: kept by renewals alone.
            eventually(lambda: lease.deadline > first + 2.0 or lease.lost.is_set(), what="renewals past a TTL")
            self.assertFalse(lease.lost.is_set(), lease.error)
            lease.check()
            self.assertEqual(self.c.get("orders/2").fencing_token, lease.fencing_token)
        self.assertFalse(self.c.get("orders/2").held)

    def test_held_lock_answers_its_holder(self) -> None:
        with self.c.lock("orders/3", ttl=5, wait=0, owner="worker-a") as lease:
            with self.assertRaises(raftlock.HeldError) as cm:
                self.c.try_acquire("orders/3", ttl=5, owner="worker-b")
            self.assertEqual((cm.exception.owner, cm.exception.fencing_token), ("worker-a", lease.fencing_token))
            t0 = time.monotonic()
            with self.assertRaises(raftlock.HeldError):
                self.c.acquire("orders/3", ttl=5, wait=0.5)
            self.assertGreaterEqual(time.monotonic() - t0, 0.4, "a waiting acquire waits")

    def test_waiting_acquire_gets_the_lock_when_released(self) -> None:
        lease = self.c.try_acquire("orders/4", ttl=5)
        box: dict[str, Any] = {}
        t = threading.Thread(target=lambda: box.update(l=self.c.acquire("orders/4", ttl=5, wait=20)))
        t.start()
        eventually(lambda: self.c.get("orders/4").waiters == 1, what="a waiter parked")
        lease.release()
        t.join(20)
        self.assertGreater(box["l"].fencing_token, lease.fencing_token)
        box["l"].release()

    def test_session_frees_its_locks_together(self) -> None:
        with self.c.session(ttl=5, owner="svc") as s:
            a, b = s.lock("sess/a", wait=0), s.lock("sess/b", wait=0)
            self.assertEqual({x.name for x in self.c.session_info(s.session_id).leases}, {"sess/a", "sess/b"})
            self.assertEqual(self.c.get("sess/a").owner, "svc")
        self.assertFalse(self.c.get("sess/a").held or self.c.get("sess/b").held)
        self.assertTrue(a.ended.is_set() and b.ended.is_set())
        with self.assertRaises(raftlock.NoSessionError):
            self.c.session_info(s.session_id)

    def test_session_expiry_frees_its_locks_at_one_index(self) -> None:
        s = self.c.session(ttl=1.0)
        s.lock("sess/c", wait=0)
        s.lock("sess/d", wait=0)
        assert s._ka is not None
        s._ka.stop()  # the process dies: nobody renews the session any more
        eventually(lambda: not self.c.get("sess/c").held, what="session expired")
        c, d = self.c.get("sess/c"), self.c.get("sess/d")
        self.assertFalse(d.held)
        self.assertEqual(c.index, d.index, "both freed by one entry")

    def test_shared_locks(self) -> None:
        r1 = self.c.try_acquire("cfg", ttl=5, shared=True, owner="r1")
        r2 = self.c.try_acquire("cfg", ttl=5, shared=True, owner="r2")
        info = self.c.get("cfg")
        self.assertTrue(info.shared)
        self.assertEqual([h.fencing_token for h in info.holders], [r1.fencing_token, r2.fencing_token])
        with self.assertRaises(raftlock.HeldError):
            self.c.try_acquire("cfg", ttl=5)
        r1.release()
        r2.release()
        w = self.c.try_acquire("cfg", ttl=5)
        self.assertGreater(w.fencing_token, r2.fencing_token)
        w.release()

    def test_permit_slot_fencing(self) -> None:
        guard = MemoryGuard()
        a = self.c.semaphore("printers", 2, ttl=1.0, wait=0, owner="a")
        b = self.c.semaphore("printers", 2, ttl=5, wait=0, owner="b")
        self.assertEqual((a.slot, b.slot), (0, 1))
        with self.assertRaises(raftlock.FullError) as cm:
            self.c.try_semaphore("printers", 2, ttl=5)
        self.assertEqual([h.slot for h in cm.exception.holders], [0, 1])
        advance_permit(guard, a)
        a.detach()  # a pauses: no more renewals, its permit expires
        late = self.c.semaphore("printers", 2, ttl=5, wait=20, owner="c")
        self.assertEqual(late.slot, 0)
        self.assertGreater(late.fencing_token, a.fencing_token)
        advance_permit(guard, late)
        with self.assertRaises(StaleTokenError):
            advance_permit(guard, a)  # the paused holder's late write
        advance_permit(guard, b)  # slot 1 is fenced on its own: b's token is lower than late's, and valid
        self.assertEqual(self.c.semaphore_info("printers").limit, 2)
        late.release()
        b.release()
        self.assertEqual(self.c.semaphore_info("printers").holders, [])

    def test_election(self) -> None:
        e1 = self.c.election("leader/app", ttl=5, owner="one")
        e2 = self.c.election("leader/app", ttl=5, owner="two")
        stop = threading.Event()
        seen: list[raftlock.LockInfo] = []
        lease = e1.campaign("10.0.0.1:80", wait=0)
        watcher = threading.Thread(target=lambda: [seen.append(x) for x in e2.observe(stop=stop)], daemon=True)
        watcher.start()
        eventually(lambda: seen and seen[-1].value == "10.0.0.1:80", what="observer sees the leader")
        self.assertEqual(e2.leader().owner, "one")
        with self.assertRaises(raftlock.HeldError):
            e2.campaign("10.0.0.2:80", wait=0)
        e1.proclaim("10.0.0.1:81")
        eventually(lambda: seen[-1].value == "10.0.0.1:81", what="observer sees the new value")
        e1.resign()
        eventually(lambda: not seen[-1].held, what="observer sees nobody leading")
        with self.assertRaises(raftlock.NoLeaderElectedError):
            e2.leader()
        lease2 = e2.campaign("10.0.0.2:80", wait=5)
        self.assertGreater(lease2.fencing_token, lease.fencing_token)
        eventually(lambda: seen[-1].owner == "two", what="observer sees the second leader")
        stop.set()
        e2.resign()

    def test_watch_yields_changes(self) -> None:
        it = self.c.watch("watched", wait=5)
        first = next(it)
        self.assertFalse(first.held)
        lease = self.c.try_acquire("watched", ttl=5)
        self.assertEqual(next(it).fencing_token, lease.fencing_token)
        lease.release()
        self.assertFalse(next(it).held)
        it.close()

    def test_watch_prefix_yields_changes_under_it(self) -> None:
        it = self.c.watch_prefix("jobs/", wait=5)
        self.assertEqual(next(it).locks, [])
        lease = self.c.try_acquire("jobs/1", ttl=5)
        self.assertEqual([x.name for x in next(it).locks], ["jobs/1"])
        lease.release()
        self.assertEqual(next(it).locks, [])
        it.close()

    def test_lost_answer_retried_with_the_same_lease_id(self) -> None:
        # A proxy drops the first answer after the leader granted the lock,
        # answering 504 as a gateway would; the resent acquire (same lease id)
        # answers the same grant, where a new lease id would have met "held".
        leader = self.cluster.leader()
        proxy = DroppingProxy(leader.http_port)
        self.addCleanup(proxy.close)
        c = raftlock.Client([proxy.endpoint], backoff=(0.01, 0.05))
        lease = c.try_acquire("orders/504", ttl=5)
        self.addCleanup(lease.release)
        self.assertEqual(len(proxy.acquires), 2)
        (b1, first), (b2, second) = proxy.acquires
        self.assertEqual(b1["lease_id"], b2["lease_id"])
        self.assertEqual((first["fencing_token"], second["fencing_token"], lease.fencing_token),
                         (first["fencing_token"],) * 3)
        self.assertEqual(self.c.get("orders/504").fencing_token, lease.fencing_token)

    def test_fenced_sqlite_write_refused_after_a_pause(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
        r = subprocess.run([sys.executable, str(HERE.parent / "examples" / "gc_pause.py"),
                            "--endpoints", ",".join(self.cluster.endpoints)],
                           env=env, capture_output=True, text=True, timeout=90)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("refused worker-a's write: fence: stale fencing token", r.stdout)
        self.assertIn("ticket 402 is held by worker-b", r.stdout)

    def test_sqlite_guard_in_the_writing_transaction(self) -> None:
        conn = sqlite3.connect(":memory:")
        guard = SQLGuard(conn)
        guard.create_table()
        with self.c.lock("sql/1", ttl=5, wait=0) as old:
            pass
        with self.c.lock("sql/1", ttl=5, wait=0) as new:
            guard.advance("sql/1", new.fencing_token)
            conn.commit()
        with self.assertRaises(StaleTokenError) as cm:
            guard.advance("sql/1", old.fencing_token)
        conn.rollback()
        self.assertEqual(cm.exception.current, new.fencing_token)


class Failover(unittest.TestCase):
    """Tests that kill or pause nodes get a cluster each."""

    def setUp(self) -> None:
        self.cluster = Cluster()
        self.addCleanup(self.cluster.close)
        self.logs = LogRecords()
        logger = logging.getLogger("raftlock")
        logger.addHandler(self.logs)
        logger.setLevel(logging.DEBUG)
        self.addCleanup(logger.removeHandler, self.logs)

    def test_watchdog_renews_through_a_leader_kill(self) -> None:
        c = raftlock.Client(self.cluster.endpoints)
        old = self.cluster.leader()
        lease = c.try_acquire("orders/failover", ttl=6, owner="worker-a")
        self.cluster.kill(old)
        killed_at = time.monotonic()
        new = self.cluster.wait_leader(exclude={old.id})
        self.assertNotEqual(new.id, old.id)
        # A renewal sent after the kill succeeded: the lease lived through it.
        eventually(lambda: lease.deadline > killed_at + 6 * 0.99 or lease.lost.is_set(), timeout=30,
                   what="a renewal through the new leader")
        self.assertFalse(lease.lost.is_set(), lease.error)
        lease.check()
        info = c.get("orders/failover")
        self.assertEqual((info.held, info.fencing_token), (True, lease.fencing_token))
        lease.release()

    def test_lost_and_check_raises_when_quorum_is_lost(self) -> None:
        c = raftlock.Client(self.cluster.endpoints, request_timeout=1.0)
        leader = self.cluster.leader()
        lease = c.try_acquire("orders/quorum", ttl=2, owner="worker-a")
        for x in self.cluster.nodes:
            if x is not leader:
                self.cluster.kill(x)
        self.assertTrue(lease.lost.wait(30), "the lease is lost once nobody can renew it")
        self.assertGreaterEqual(time.monotonic(), lease.deadline, "not before its deadline")
        with self.assertRaises(raftlock.LeaseLostError):
            lease.check()
        self.assertIn("deadline", str(lease.error))
        with self.assertRaises(raftlock.LeaseLostError):
            lease.release(timeout=1.0)

    def test_timeout_on_a_stalled_quorum_retried_with_the_same_lease_id(self) -> None:
        # Both followers stopped: the leader cannot commit, so the acquire
        # times out with its outcome unknown; once they resume, the acquire
        # resent with the same lease id gets the lock rather than "held" by
        # its own first attempt.
        leader = self.cluster.leader()
        followers = [x for x in self.cluster.nodes if x is not leader]
        c = raftlock.Client([leader.endpoint], request_timeout=0.5, timeout=60, backoff=(0.05, 0.2))
        for x in followers:
            self.cluster.pause(x)
        box: dict[str, Any] = {}

        def acquire() -> None:
            try:
                box["lease"] = c.try_acquire("orders/stalled", ttl=5)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=acquire, daemon=True)
        t.start()
        eventually(lambda: self.logs.has("request failed") or self.logs.has("outcome unknown"), timeout=20,
                   what="an attempt whose outcome is unknown")
        for x in followers:
            self.cluster.resume(x)
        t.join(60)
        self.assertIn("lease", box, box.get("error"))
        lease = box["lease"]
        info = raftlock.Client(self.cluster.endpoints).get("orders/stalled")
        self.assertEqual((info.held, info.fencing_token), (True, lease.fencing_token))
        lease.release()


class DroppingProxy:
    """An HTTP proxy to one node that forwards every request, but answers the
    first acquire 504 unknown_outcome after the node answered it, as a
    gateway whose upstream read timed out would. It keeps the node's
    X-Raftlock-* headers away from the client, which so stays on the proxy."""

    def __init__(self, port: int) -> None:
        self.acquires: list[tuple[dict[str, Any], dict[str, Any]]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                up = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                hdrs = {"Content-Type": "application/json"} if body is not None else {}
                up.request(self.command, self.path, body=body, headers=hdrs)
                resp = up.getresponse()
                data = resp.read()
                up.close()
                status = resp.status
                if self.path == "/v1/locks/acquire" and status == 200:
                    proxy.acquires.append((json.loads(body or b"{}"), json.loads(data)))
                    if len(proxy.acquires) == 1:
                        status = 504
                        data = json.dumps({"error": "unknown_outcome", "message": "upstream timed out"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 504:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    unittest.main()
