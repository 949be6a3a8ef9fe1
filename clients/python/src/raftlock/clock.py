"""The clock the client measures lease time and backoff on.

Lease deadlines are counted on a monotonic clock (``time.monotonic``), never
on wall time, so that a clock jump cannot make a lease look longer. Tests
inject a clock of their own to drive lease time without sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in seconds, and waiting on it."""

    def now(self) -> float:
        """Returns the current time in seconds (any origin)."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Waits until event is set or timeout seconds of this clock have
        passed; returns whether the event is set."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if timeout <= 0:
            return event.is_set()
        return event.wait(timeout)
