"""Unit tests of the lease watchdog on a fake clock against fake nodes."""

from __future__ import annotations

import threading
import time
import unittest

import raftlock
from fakes import Answer, FakeClock, error
from test_retry import Base

TTL = 9.0
VALID = TTL * 0.99  # the default drift is 1%


def eventually(pred, timeout: float = 10.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Polls pred (real time, bounded): for effects of the watchdog thread."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.002)


class WatchdogTest(Base):
    def setUp(self) -> None:
        self.clk = FakeClock()
        self.n = self.node()
        self.c = self.client([self.n], clock=self.clk)

    def acquire(self) -> raftlock.Lease:
        lease = self.c.try_acquire("orders/1", ttl=TTL)
        self.addCleanup(lease.detach)
        return lease

    def renewal_timer(self) -> float:
        """Waits for the watchdog to sleep until its renewal, returns how long."""
        p = self.clk.wait_for(lambda p: any(x <= TTL / 3 * 1.1 + 1e-9 for x in p))
        return min(p)

    def test_renews_about_every_third_of_the_ttl(self) -> None:
        t0 = self.clk.now()
        lease = self.acquire()
        self.assertAlmostEqual(lease.deadline, t0 + VALID)
        for _ in range(3):
            wait = self.renewal_timer()
            self.assertTrue(TTL / 3 * 0.9 <= wait <= TTL / 3 * 1.1, wait)
            self.clk.advance(wait)
            sent = self.clk.now()
            self.n.next("/v1/locks/renew")
            eventually(lambda: lease.deadline == sent + VALID, what="deadline moved to renew send time + TTL")
        lease.check()
        self.assertFalse(lease.lost.is_set())

    def test_deadline_counts_from_the_acquire_send_time(self) -> None:
        t0 = self.clk.now()
        # The answer takes 2 s (under a third of the TTL): the lease is
        # trusted from when the acquire was sent, not answered.
        self.n.script("/v1/locks/acquire", Answer(200, {"name": "orders/1", "fencing_token": 7, "ttl_ms": 9000},
                                                  before=lambda: self.clk.advance(2.0)))
        lease = self.acquire()
        self.assertEqual(lease.fencing_token, 7)
        self.assertAlmostEqual(lease.deadline, t0 + VALID)
        self.assertEqual(self.n.requests("/v1/locks/renew"), [])

    def test_a_late_grant_is_renewed_at_once(self) -> None:
        # The answer takes 4 s, over a third of the TTL: the client renews
        # before trusting the lease, and counts from that renew.
        self.n.script("/v1/locks/acquire", Answer(200, {"name": "orders/1", "fencing_token": 1, "ttl_ms": 9000},
                                                  before=lambda: self.clk.advance(4.0)))
        t0 = self.clk.now()
        lease = self.acquire()
        self.assertEqual(len(self.n.requests("/v1/locks/renew")), 1)
        self.assertAlmostEqual(lease.deadline, t0 + 4.0 + VALID)

    def test_lost_at_the_deadline_while_renewals_fail(self) -> None:
        t0 = self.clk.now()
        lease = self.acquire()
        self.n.leader = ""
        self.n.default = lambda s: error(503, "no_leader", "1")
        self.clk.advance(self.renewal_timer())
        self.n.next("/v1/locks/renew")
        self.clk.advance(t0 + VALID - self.clk.now() - 0.001)
        lease.check()
        self.assertFalse(lease.lost.is_set())
        self.clk.advance(0.001)
        eventually(lease.lost.is_set, what="lost at its deadline")
        with self.assertRaises(raftlock.LeaseLostError):
            lease.check()
        self.assertIn("deadline", str(lease.error))

    def test_lost_at_the_deadline_with_a_renewal_in_flight(self) -> None:
        t0 = self.clk.now()
        lease = self.acquire()
        unblock = threading.Event()
        self.addCleanup(unblock.set)
        self.n.script("/v1/locks/renew", Answer(200, {}, before=lambda: unblock.wait(30)))
        self.clk.advance(self.renewal_timer())
        self.n.next("/v1/locks/renew")
        # The renewal hangs; the lease is trusted until its deadline and not a moment longer.
        self.clk.advance(t0 + VALID - self.clk.now() - 0.001)
        lease.check()
        self.assertFalse(lease.lost.is_set())
        self.clk.advance(0.001)
        with self.assertRaises(raftlock.LeaseLostError):
            lease.check()  # by its own clock, before any answer
        eventually(lease.lost.is_set, what="lost set by the watchdog at its deadline")

    def test_not_holder_loses_at_once(self) -> None:
        lease = self.acquire()
        self.n.script("/v1/locks/renew", error(409, "not_holder"))
        self.clk.advance(self.renewal_timer())
        eventually(lease.lost.is_set, what="lost")
        self.assertIsInstance(lease.error.__cause__, raftlock.NotHolderError)
        with self.assertRaises(raftlock.LeaseLostError):
            lease.check()
        with self.assertRaises(raftlock.LeaseLostError):
            lease.release()
        self.assertEqual(self.n.requests("/v1/locks/release"), [], "a lease the server says is gone is not released")

    def test_renew_failures_before_the_deadline_are_retried(self) -> None:
        lease = self.acquire()
        self.n.script("/v1/locks/renew", error(503, "no_leader", "1"), error(504, "unknown_outcome", "1"))
        self.clk.advance(self.renewal_timer())
        sends = []
        for _ in range(2):
            self.n.next("/v1/locks/renew")
            sends.append(self.clk.now())
            # The retry waits out Retry-After (1 s) on the clock.
            self.clk.wait_for(lambda p: any(abs(x - 1.0) < 1e-9 for x in p))
            self.clk.advance(1.0)
        self.n.next("/v1/locks/renew")
        # The 503 applied nothing, but the 504 may have renewed the lease
        # then: the deadline counts from the 504's send, not the answered one.
        eventually(lambda: lease.deadline == sends[1] + VALID, what="deadline moved to the 504's send + TTL")
        self.assertFalse(lease.lost.is_set())
        ids = {s.body["lease_id"] for s in self.n.requests("/v1/locks/renew")}
        self.assertEqual(ids, {lease.lease_id})

    def test_with_block_releases_after_an_exception(self) -> None:
        with self.assertRaises(ValueError):
            with self.c.lock("orders/1", ttl=TTL, wait=0) as lease:
                raise ValueError("work failed")
        self.assertEqual([s.body["lease_id"] for s in self.n.requests("/v1/locks/release")], [lease.lease_id])
        with self.assertRaises(raftlock.LeaseReleasedError):
            lease.check()

    def test_with_block_reports_a_loss(self) -> None:
        self.n.script("/v1/locks/renew", error(409, "not_holder"))
        with self.assertRaises(raftlock.LeaseLostError):
            with self.c.lock("orders/1", ttl=TTL, wait=0) as lease:
                self.clk.advance(self.renewal_timer())
                eventually(lease.lost.is_set, what="lost")

    def test_session_lost_loses_its_leases(self) -> None:
        s = self.c.session(ttl=TTL)
        self.addCleanup(lambda: s.close() if not s.lost.is_set() else None)
        a, b = s.lock("a", wait=0), s.lock("b", wait=0)
        acquires = self.n.requests("/v1/locks/acquire")
        self.assertEqual({x.body["session_id"] for x in acquires}, {s.session_id})
        self.assertTrue(all("ttl_ms" not in x.body for x in acquires))
        self.n.script("/v1/sessions/renew", error(404, "no_session"))
        self.clk.advance(self.renewal_timer())
        eventually(lambda: a.lost.is_set() and b.lost.is_set(), what="both leases lost")
        self.assertTrue(s.lost.is_set())
        for x in (a, b):
            with self.assertRaises(raftlock.SessionLostError):
                x.check()
        self.assertEqual(self.n.requests("/v1/locks/renew"), [], "leases of a session are renewed by the session")


if __name__ == "__main__":
    unittest.main()
