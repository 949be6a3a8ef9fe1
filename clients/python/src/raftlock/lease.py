"""Leases, permits and sessions, and the watchdog that keeps them alive.

A lease is trusted only until its deadline on the client's own monotonic
clock: the send time of the acquire or renew that last succeeded, plus
TTL x (1 - drift). The API promises that the lease stays held at least that
long (docs/API.md, "Time and fencing guarantees"), so the client never
believes it holds a lock that someone else holds, whatever the server's
answers arrive late or not at all. The watchdog renews about every TTL/3;
when a renewal is refused, or none succeeds before the deadline, the lease is
lost at once: ``lost`` is set and ``check()`` raises, even while a renewal is
still in flight.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._transport import Cancel, Cancelled
from .errors import (
    LeaseLostError,
    LeaseReleasedError,
    NoSessionError,
    NotHolderError,
    RaftlockError,
    SessionLostError,
)

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("raftlock")


class _Keepalive:
    """The watchdog of a lease, a permit or a session: renews about every
    TTL/3 in a daemon thread and, when a renewal is refused or none succeeds
    before the deadline, calls lose once and ends.

    renew(deadline, cancel) sends one logical renewal (retried across nodes
    until deadline) and returns the send time the new deadline counts from;
    it raises LeaseLostError when the server refused (the keepalive ends), any
    other RaftlockError to be retried with backoff.
    """

    def __init__(
        self,
        client: Client,
        ttl: float,
        sent: float,
        renew: Callable[[float, Cancel], float],
        lose: Callable[[LeaseLostError], None],
        expired: type[LeaseLostError],
        what: str,
    ) -> None:
        self._c = client
        self._ttl = ttl
        self._renew = renew
        self._lose = lose
        self._expired = expired
        self._what = what
        self._mu = threading.Lock()
        self._sent = sent
        self._deadline = sent + client._valid_for(ttl)
        self._stopped = False
        self._wake = threading.Event()  # set on stop and when a renewal ends
        self._cancel: Cancel | None = None
        self._thread = threading.Thread(target=self._run, name=f"raftlock-keepalive {what}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def deadline(self) -> float:
        with self._mu:
            return self._deadline

    def stop(self) -> None:
        """Stops the watchdog and waits for it to end."""
        with self._mu:
            self._stopped = True
            cancel = self._cancel
        self._wake.set()
        if cancel is not None:
            cancel.cancel()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _extend(self, sent: float) -> None:
        with self._mu:
            d = sent + self._c._valid_for(self._ttl)
            if d > self._deadline:
                self._deadline, self._sent = d, sent

    def _interval(self) -> float:
        # TTL/3 with +-10% jitter, so that many leases taken at once do not
        # renew in lockstep.
        d = self._ttl / 3
        return d * 0.9 + random.uniform(0, d * 0.2)

    def _deadline_passed(self) -> LeaseLostError:
        return self._expired(f"raftlock: {self._what}: deadline passed before a renewal succeeded")

    def _sleep_until_woken(self, timeout: float) -> bool:
        """Waits timeout on the client's clock or until woken; True when stopped."""
        with self._mu:
            if self._stopped:
                return True
            self._wake.clear()
        self._c._clock.wait(self._wake, timeout)
        with self._mu:
            return self._stopped

    def _run(self) -> None:
        clock = self._c._clock
        while True:
            with self._mu:
                deadline, sent, stopped = self._deadline, self._sent, self._stopped
            if stopped:
                return
            now = clock.now()
            if now >= deadline:
                self._lose(self._deadline_passed())
                return
            wait = sent + self._interval() - now
            if wait > 0 and self._sleep_until_woken(wait):
                return
            if not self._renew_before_deadline():
                return

    def _renew_before_deadline(self) -> bool:
        """Renews, retrying, until a renewal succeeds (True) or the lease is
        lost or the watchdog stopped (False). The renewal runs in a thread of
        its own so that the lease is lost at its deadline, not when a
        renewal in flight gives up."""
        clock = self._c._clock
        cancel = Cancel()
        with self._mu:
            if self._stopped:
                return False
            self._cancel = cancel
            self._wake.clear()
        result: list[BaseException | None] = []

        def loop() -> None:
            try:
                result.append(self._renew_loop(cancel))
            finally:
                self._wake.set()

        t = threading.Thread(target=loop, name=f"raftlock-renew {self._what}", daemon=True)
        t.start()
        try:
            while True:
                with self._mu:
                    stopped = self._stopped
                if result:
                    err = result[0]
                    if err is not None:
                        self._lose(err)  # type: ignore[arg-type]
                        return False
                    return not stopped
                if stopped:
                    return False
                remaining = self.deadline - clock.now()
                if remaining <= 0:
                    # Lost at once: the work under the lock must stop now.
                    self._lose(self._deadline_passed())
                    return False
                clock.wait(self._wake, remaining)
                with self._mu:
                    if not result and not self._stopped:
                        self._wake.clear()
        finally:
            cancel.cancel()
            with self._mu:
                self._cancel = None

    def _renew_loop(self, cancel: Cancel) -> LeaseLostError | None:
        """Renews until success (None), a refusal (its error), or cancel."""
        clock = self._c._clock
        attempt = 0
        while not cancel.is_set():
            deadline = self.deadline
            if clock.now() >= deadline:
                return None  # the watchdog declares the loss
            try:
                sent = self._renew(deadline, cancel)
            except LeaseLostError as e:
                return e
            except Cancelled:
                return None
            except RaftlockError as e:
                log.debug("renew failed: %s error=%s", self._what, e)
                if clock.wait(cancel.event, self._c._transport.backoff(attempt)):
                    return None
                attempt += 1
                continue
            self._extend(sent)
            return None
        return None


class _Grant:
    """What a Lease and a Permit share: a lease on the cluster, kept alive by
    its own watchdog or by a Session, and the ways it ends."""

    _kind = "lease"

    def __init__(
        self,
        client: Client,
        name: str,
        owner: str,
        lease_id: str,
        fencing_token: int,
        ttl: float,
        release: Callable[[float | None], None],
    ) -> None:
        self._c = client
        self.name = name
        """The lock's (or semaphore's) name."""
        self.owner = owner
        self.lease_id = lease_id
        """The lease's secret id, which renews and releases it. Do not log it."""
        self.fencing_token = fencing_token
        """The same for the whole lease, and larger than the token of every
        earlier holder of the lock (of a permit: of every earlier holder of
        its slot). Pass it to the storage the lock protects."""
        self.ttl = ttl
        """Time to live in seconds (its session's, for a lease of a session)."""
        self.session: Session | None = None
        """The session that keeps it alive, or None if it renews itself."""
        self.lost = threading.Event()
        """Set when the lease is lost; not by release(), detach() or a session close."""
        self.ended = threading.Event()
        """Set when the lease ends for any reason: lost, released, detached."""
        self._release_fn = release
        self._ka: _Keepalive | None = None
        self._mu = threading.Lock()
        self._error: LeaseLostError | None = None
        self._done = False  # release or detach ran, or its session was closed
        self._release_mu = threading.Lock()
        self._release_err: BaseException | None = None

    def _keep_alive(self, sent: float, renew: Callable[[float, Cancel], float]) -> None:
        self._ka = _Keepalive(self._c, self.ttl, sent, renew, self._lose, LeaseLostError, f"{self._kind} {self.name!r}")
        self._ka.start()

    @property
    def deadline(self) -> float:
        """The time, on the client's clock, until which the lease is known to
        be held: the send time of the last successful acquire or renew (of
        the session, for a lease of one) plus TTL x (1 - drift)."""
        if self.session is not None:
            return self.session.deadline
        assert self._ka is not None
        return self._ka.deadline

    @property
    def error(self) -> LeaseLostError | None:
        """Why the lease was lost, or None."""
        with self._mu:
            return self._error

    def check(self) -> None:
        """Raises unless the lease can still be trusted: LeaseLostError once it
        is lost or its deadline has passed (by the client's own clock, even
        if the watchdog has not noticed yet), LeaseReleasedError after
        release() or detach(). Call it before each step of work under the
        lock, and fence the writes with fencing_token all the same: a pause
        between check() and the write is what fencing is for."""
        with self._mu:
            if self._error is not None:
                raise self._error
            if self._done:
                raise LeaseReleasedError(f"raftlock: {self._kind} {self.name!r} was released")
        if self._c._clock.now() >= self.deadline:
            raise LeaseLostError(f"raftlock: {self._kind} {self.name!r}: deadline passed before a renewal succeeded")

    def release(self, timeout: float | None = None) -> None:
        """Stops the watchdog and releases the lease. If it was lost before,
        raises the error that lost it, after still releasing it when the
        server may hold it. Calling it again repeats the result. Releasing a
        lease of a session leaves the session and its other leases alone."""
        with self._release_mu:
            if self._ka is not None:
                self._ka.stop()
            with self._mu:
                if self._done:
                    if self._release_err is not None:
                        raise self._release_err
                    return
                self._done = True
                lost = self._error
            if self.session is not None:
                self.session._unbind(self)
            err: BaseException | None = None
            # not_holder and no_session both say the server holds nothing for it.
            if lost is None or not isinstance(lost.__cause__, (NotHolderError, NoSessionError)):
                try:
                    self._release_fn(timeout)
                except (NotHolderError, NoSessionError) as e:
                    # It expired before the release: the work under it may
                    # not have been protected, which is what the caller must hear.
                    err = LeaseLostError(f"raftlock: {self._kind} {self.name!r} was lost before its release: {e}")
                    err.__cause__ = e
                except RaftlockError as e:
                    err = e
            self.ended.set()
            if lost is not None:
                self._release_err = lost
            elif err is not None:
                self._release_err = err
            if self._release_err is not None:
                raise self._release_err

    def detach(self) -> None:
        """Stops the watchdog without releasing: the lease stays held until its
        TTL runs out (or its session ends), or someone renews or releases it
        by lease_id."""
        with self._release_mu:
            if self._ka is not None:
                self._ka.stop()
            with self._mu:
                self._done = True
            if self.session is not None:
                self.session._unbind(self)
            self.ended.set()

    def _lose(self, cause: LeaseLostError) -> None:
        with self._mu:
            if self._error is not None or self._done:
                return
            self._error = cause
        self.lost.set()
        self.ended.set()
        log.warning("lease lost: %s=%r token=%d error=%s", self._kind, self.name, self.fencing_token, cause)

    def _closed_with_session(self) -> None:
        with self._mu:
            if self._error is not None or self._done:
                return
            self._done = True
        self.ended.set()

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            # The work succeeded, but if the lease was lost meanwhile it may not
            # have been protected: say so.
            self.release()
            return
        try:
            self.release()
        except RaftlockError as e:
            log.warning("release after an exception failed: %s=%r error=%s", self._kind, self.name, e)


class Lease(_Grant):
    """A held lock. Use it as a context manager (``with client.lock(...) as
    lease:``), which releases it on exit, even after an exception; leaving
    the block normally raises LeaseLostError if the lease was lost meanwhile.
    """

    _kind = "lock"

    def __init__(self, *args: Any, shared: bool = False, value: str = "", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.shared = shared
        """Held in shared mode."""
        self.value = value
        """The value this lease last published with the lock."""

    def __enter__(self) -> Lease:
        return self

    def set_value(self, value: str, timeout: float | None = None) -> None:
        """Replaces the value published with the lock; the token stays.
        Raises NotHolderError if this lease no longer holds the lock."""
        if self.shared:
            raise RaftlockError(f"raftlock: update value of {self.name!r}: a shared hold publishes no value")
        self._c._update(self.name, self.lease_id, value, timeout)
        self.value = value


class Permit(_Grant):
    """A held permit of a semaphore: one of its ``limit`` slots. Its fencing
    token is larger than every earlier token of its slot, so fence writes per
    (semaphore, slot): see raftlock.fence.slot_resource."""

    _kind = "semaphore"

    def __init__(self, *args: Any, slot: int = 0, limit: int = 0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.slot = slot
        self.limit = limit

    def __enter__(self) -> Permit:
        return self


class Session:
    """Many leases tied to one keepalive: the session's watchdog renews the
    session alone, about every TTL/3, and its leases have no deadline or
    watchdog of their own. When the session expires the cluster ends all of
    its leases at one index; close() releases them all at once. If a renewal
    is refused (no_session) or none succeeds before the deadline, the session
    is lost and every lease of it with it.

    Use it as a context manager: ``with client.session(ttl=10) as s:``.
    """

    def __init__(self, client: Client, session_id: str, owner: str, ttl: float, lock_delay: float) -> None:
        self._c = client
        self.session_id = session_id
        """The session's secret id. Do not log it."""
        self.owner = owner
        self.ttl = ttl
        self.lock_delay = lock_delay
        self.lost = threading.Event()
        """Set when the session is lost (not by close())."""
        self.ended = threading.Event()
        self._mu = threading.Lock()
        self._error: SessionLostError | None = None
        self._closed = False
        self._grants: set[_Grant] = set()
        self._ka: _Keepalive | None = None
        self._close_mu = threading.Lock()
        self._close_err: BaseException | None = None

    def _start(self, sent: float) -> None:
        sid = self.session_id

        def renew(deadline: float, cancel: Cancel) -> float:
            try:
                return self._c._renew_session(sid, deadline, cancel)
            except NoSessionError as e:
                raise SessionLostError(f"raftlock: session {sid[:6]}...: {e}") from e

        self._ka = _Keepalive(self._c, self.ttl, sent, renew, self._lose, SessionLostError, f"session {sid[:6]}...")
        self._ka.start()

    @property
    def deadline(self) -> float:
        """Until when (client clock) the session, and so each of its leases, is known to live."""
        assert self._ka is not None
        return self._ka.deadline

    @property
    def error(self) -> SessionLostError | None:
        with self._mu:
            return self._error

    def check(self) -> None:
        """Raises SessionLostError unless the session can still be trusted."""
        with self._mu:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise LeaseReleasedError("raftlock: session was closed")
        if self._c._clock.now() >= self.deadline:
            raise SessionLostError("raftlock: session: deadline passed before a renewal succeeded")

    def lock(self, name: str, *, wait: float = 60.0, owner: str = "", shared: bool = False, value: str = "",
             lease_id: str | None = None, timeout: float | None = None) -> Lease:
        """Takes lock name for the session, waiting up to wait seconds. The
        lease lives as long as the session; release it alone with
        release(), or all at once with close()."""
        return self._c._acquire(name, wait=wait, owner=owner, shared=shared, value=value, lease_id=lease_id,
                                timeout=timeout, session=self)

    def acquire(self, name: str, **kw: Any) -> Lease:
        """The same as lock()."""
        return self.lock(name, **kw)

    def try_acquire(self, name: str, **kw: Any) -> Lease:
        """lock() without waiting: HeldError at once when the lock is held."""
        return self.lock(name, wait=0, **kw)

    def semaphore(self, name: str, limit: int, *, wait: float = 60.0, owner: str = "",
                  lease_id: str | None = None, timeout: float | None = None) -> Permit:
        """Takes a permit of semaphore name for the session."""
        return self._c._acquire_semaphore(name, limit, wait=wait, owner=owner, lease_id=lease_id,
                                          timeout=timeout, session=self)

    def _usable(self) -> None:
        with self._mu:
            if self._error is not None:
                raise LeaseLostError(f"raftlock: {self._error}") from self._error
            if self._closed:
                raise LeaseReleasedError("raftlock: session was closed")

    def _bind(self, g: _Grant) -> None:
        with self._mu:
            if self._error is not None:
                raise LeaseLostError(f"raftlock: {self._error}") from self._error
            if self._closed:
                raise LeaseReleasedError("raftlock: session was closed")
            g.session = self
            self._grants.add(g)

    def _unbind(self, g: _Grant) -> None:
        with self._mu:
            self._grants.discard(g)

    def _lose(self, cause: LeaseLostError) -> None:
        with self._mu:
            if self._error is not None or self._closed:
                return
            self._error = cause  # type: ignore[assignment]
            grants = list(self._grants)
            self._grants.clear()
        self.lost.set()
        self.ended.set()
        log.warning("session lost: session=%s... leases=%d error=%s", self.session_id[:6], len(grants), cause)
        for g in grants:
            lost = SessionLostError(f"raftlock: lost with its session: {cause}")
            lost.__cause__ = cause.__cause__
            g._lose(lost)

    def close(self, timeout: float | None = None) -> None:
        """Stops the watchdog and closes the session, which releases all of
        its leases at once (no lock-delay). If the session was lost before,
        raises the error that lost it. Calling it again repeats the result."""
        with self._close_mu:
            if self._ka is not None:
                self._ka.stop()
            with self._mu:
                if self._closed:
                    if self._close_err is not None:
                        raise self._close_err
                    return
                self._closed = True
                lost = self._error
                grants = list(self._grants)
                self._grants.clear()
            err: BaseException | None = None
            if lost is None or not isinstance(lost.__cause__, NoSessionError):
                try:
                    self._c.close_session(self.session_id, timeout=timeout)
                except RaftlockError as e:
                    err = e
            for g in grants:
                if err is not None:
                    # Not renewed any more, and maybe not released: not to be trusted.
                    g._lose(LeaseLostError(f"raftlock: session close failed: {err}"))
                else:
                    g._closed_with_session()
            self.ended.set()
            self._close_err = lost if lost is not None else err
            if self._close_err is not None:
                raise self._close_err

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except RaftlockError as e:
            log.warning("session close after an exception failed: %s", e)
