"""Unit tests of the retry logic against fake nodes (no cluster)."""

from __future__ import annotations

import threading
import unittest

import raftlock
from fakes import Answer, FakeClock, FakeNode, error


class Base(unittest.TestCase):
    def node(self, node_id: str = "n1", leader: str = "") -> FakeNode:
        n = FakeNode(node_id, leader)
        self.addCleanup(n.close)
        return n

    def client(self, nodes: list[FakeNode] | list[str], **kw: object) -> raftlock.Client:
        kw.setdefault("backoff", (0.001, 0.005))
        eps = [n if isinstance(n, str) else n.endpoint for n in nodes]
        return raftlock.Client(eps, **kw)  # type: ignore[arg-type]

    def run_in_thread(self, fn):  # type: ignore[no-untyped-def]
        box: dict[str, object] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=target, daemon=True)
        t.start()
        return t, box


class RetryTest(Base):
    def test_503_moves_to_another_node(self) -> None:
        a, b = self.node("n1", leader="-"), self.node("n2")
        a.leader = ""
        a.script("/v1/locks/acquire", error(503, "no_leader", "1"))
        c = self.client([a, b])
        lease = c.try_acquire("x", ttl=10)
        self.addCleanup(lease.detach)
        self.assertEqual(len(a.requests("/v1/locks/acquire")), 1)
        self.assertEqual(len(b.requests("/v1/locks/acquire")), 1)
        self.assertEqual(lease.fencing_token, 1)

    def test_429_waits_retry_after(self) -> None:
        clk = FakeClock()
        n = self.node()
        n.script("/v1/locks/acquire", error(429, "overloaded", "2"))
        c = self.client([n], clock=clk)
        t, box = self.run_in_thread(lambda: c.try_acquire("x", ttl=10))
        n.next("/v1/locks/acquire")
        # The client waits out Retry-After (2 s) on its clock, not the backoff.
        pending = clk.wait_for(lambda p: len(p) == 1)
        self.assertAlmostEqual(pending[0], 2.0, places=6)
        clk.advance(1.9)
        self.assertEqual(len(n.requests("/v1/locks/acquire")), 1)
        clk.advance(0.1)
        n.next("/v1/locks/acquire")
        t.join(10)
        self.assertIn("value", box, box.get("error"))
        box["value"].detach()  # type: ignore[union-attr]

    def test_504_resent_with_the_same_lease_id(self) -> None:
        clk = FakeClock()
        n = self.node()
        t0 = clk.now()
        # The first attempt's answer is lost (504) after 1 s; the lease may
        # have started then, so its deadline counts from that first send.
        n.script("/v1/locks/acquire",
                 Answer(504, {"error": "unknown_outcome", "message": "leadership lost"}, {"Retry-After": "1"},
                        before=lambda: clk.advance(1.0)))
        c = self.client([n], clock=clk)
        t, box = self.run_in_thread(lambda: c.try_acquire("x", ttl=9))
        first = n.next("/v1/locks/acquire")
        clk.wait_for(lambda p: len(p) == 1)
        clk.advance(1.0)
        second = n.next("/v1/locks/acquire")
        t.join(10)
        self.assertIn("value", box, box.get("error"))
        lease = box["value"]
        self.addCleanup(lease.detach)  # type: ignore[union-attr]
        self.assertEqual(first.body["lease_id"], second.body["lease_id"])
        self.assertAlmostEqual(lease.deadline, t0 + 9 * 0.99)  # type: ignore[union-attr]

    def test_timeout_resent_with_the_same_lease_id(self) -> None:
        n = self.node()
        unblock = threading.Event()
        self.addCleanup(unblock.set)
        n.script("/v1/locks/acquire", Answer(200, {}, before=lambda: unblock.wait(30)))
        c = self.client([n], request_timeout=0.3)
        lease = c.try_acquire("x", ttl=10)
        self.addCleanup(lease.detach)
        ids = [s.body["lease_id"] for s in n.requests("/v1/locks/acquire")]
        self.assertEqual(len(ids), 2)
        self.assertEqual(ids[0], ids[1])

    def test_unknown_outcome_when_time_runs_out(self) -> None:
        n = self.node()
        n.default = lambda s: (error(504, "unknown_outcome", "0") if s.path == "/v1/locks/acquire"
                               else Answer(200, {"released": True}))
        c = self.client([n], timeout=0.3)
        with self.assertRaises(raftlock.UnknownOutcomeError) as cm:
            c.try_acquire("x", ttl=10)
        self.assertIsNotNone(cm.exception.last)  # a 504, or the last attempt cut off by the deadline
        ids = {s.body["lease_id"] for s in n.requests("/v1/locks/acquire")}
        self.assertEqual(len(ids), 1, "every attempt must carry the same lease id")
        # The lease the caller will never see is released, by the same id.
        rel = n.requests("/v1/locks/release")
        self.assertEqual([s.body["lease_id"] for s in rel], list(ids))

    def test_no_leader_until_time_runs_out_is_not_unknown(self) -> None:
        n = self.node()
        n.leader = ""
        clk = FakeClock()
        # Each answer takes 10 s of the fake clock: the deadline passes after
        # three, and no attempt is cut off by it (which would be ambiguous).
        a = error(503, "no_leader", "0")
        a.before = lambda: clk.advance(10)
        n.default = lambda s: a
        c = self.client([n], timeout=25, clock=clk)
        t, box = self.run_in_thread(lambda: c.try_acquire("x", ttl=10))
        clk.drive(t)
        self.assertIsInstance(box.get("error"), raftlock.NoLeaderError)
        self.assertEqual(len(n.requests("/v1/locks/acquire")), 3)
        self.assertEqual(n.requests("/v1/locks/release"), [], "nothing was applied: nothing to release")

    def test_refused_connections_are_not_ambiguous(self) -> None:
        from cluster import free_ports

        dead = f"127.0.0.1:{free_ports(1)[0]}"
        c = self.client([dead], timeout=0.3)
        with self.assertRaises(raftlock.UnavailableError) as cm:
            c.try_acquire("x", ttl=10)
        self.assertNotIsInstance(cm.exception, raftlock.UnknownOutcomeError)
        n = self.node()
        c = self.client([dead, n.endpoint])
        c.try_acquire("x", ttl=10).detach()

    def test_leader_hint_sends_writes_to_the_leader(self) -> None:
        leader = self.node("n2")
        follower = self.node("n1", leader="n2")
        follower.script("/v1/cluster", Answer(200, {"id": "n1", "leader": "n2", "nodes": [
            {"id": "n1", "http_addr": follower.endpoint}, {"id": "n2", "http_addr": leader.endpoint}]}))
        c = self.client([follower])
        c.try_acquire("a", ttl=10).detach()  # answered by the follower, which names n2
        self.assertEqual(c.leader, "n2")
        c.try_acquire("b", ttl=10).detach()
        self.assertEqual([s.body["name"] for s in leader.requests("/v1/locks/acquire")], ["b"])
        self.assertIn("http://" + leader.endpoint, c.endpoints)

    def test_held_error_names_the_holder(self) -> None:
        n = self.node()
        n.script("/v1/locks/acquire", error(409, "held", holder={"owner": "worker-b", "fencing_token": 41}))
        c = self.client([n])
        with self.assertRaises(raftlock.HeldError) as cm:
            c.try_acquire("orders/1", ttl=10, owner="worker-a")
        self.assertEqual((cm.exception.owner, cm.exception.fencing_token, cm.exception.name),
                         ("worker-b", 41, "orders/1"))

    def test_release_not_holder_after_unknown_outcome_is_done(self) -> None:
        n = self.node()
        n.script("/v1/locks/release", error(504, "unknown_outcome", "0"), error(409, "not_holder"))
        c = self.client([n])
        c.release("x", "a" * 22)  # the first attempt released it
        n.script("/v1/locks/release", error(409, "not_holder"))
        with self.assertRaises(raftlock.NotHolderError):
            c.release("x", "a" * 22)

    def test_token_and_content_type_are_sent(self) -> None:
        n = self.node()
        c = self.client([n], token="s3cret")
        c.try_acquire("x", ttl=10).detach()
        h = n.requests("/v1/locks/acquire")[0].headers
        self.assertEqual(h.get("Authorization"), "Bearer s3cret")
        self.assertEqual(h.get("Content-Type"), "application/json")

    def test_bad_request_is_not_retried(self) -> None:
        n = self.node()
        n.script("/v1/locks/acquire", error(400, "bad_request"))
        c = self.client([n])
        with self.assertRaises(raftlock.BadRequestError):
            c.try_acquire("x", ttl=10)
        self.assertEqual(len(n.requests("/v1/locks/acquire")), 1)

    def test_waiting_acquire_sends_wait_ms_and_rounds_again(self) -> None:
        n = self.node()
        n.script("/v1/locks/acquire", error(409, "held", holder={"owner": "b", "fencing_token": 3}))
        c = self.client([n])
        lease = c.acquire("x", ttl=10, wait=5)
        self.addCleanup(lease.detach)
        reqs = n.requests("/v1/locks/acquire")
        self.assertEqual(len(reqs), 2)
        self.assertTrue(0 < reqs[0].body["wait_ms"] <= 5000)
        self.assertEqual(reqs[0].body["lease_id"], reqs[1].body["lease_id"])


if __name__ == "__main__":
    unittest.main()
