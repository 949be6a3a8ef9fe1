"""The raftlock client: locks, sessions, semaphores, election and watches."""

from __future__ import annotations

import base64
import logging
import os
import re
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

from ._transport import Cancel, Outcome, Request, Transport
from .clock import Clock, MonotonicClock
from .errors import (
    BadRequestError,
    ForbiddenError,
    FullError,
    HeldError,
    LeaseLostError,
    NoLeaderElectedError,
    NoSessionError,
    NotFoundError,
    NotHolderError,
    RaftlockError,
    UnauthorizedError,
)
from .lease import Lease, Permit, Session
from .types import ClusterStatus, LockInfo, LockList, SemaphoreInfo, SessionInfo, SessionLease

log = logging.getLogger("raftlock")

DEFAULT_TTL = 10.0
DEFAULT_WAIT = 60.0
MAX_WAIT_ROUND = 300.0
DEFAULT_DRIFT = 0.01
DEFAULT_TIMEOUT = 15.0
DEFAULT_REQUEST_TIMEOUT = 10.0
_LEASE_ID = re.compile(r"^[A-Za-z0-9_-]{16,128}$")


def new_lease_id() -> str:
    """A random lease id: 128 bits, 22 characters of [A-Za-z0-9_-]."""
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Client:
    """A client of a raftlock cluster. Thread-safe: make one per process.

    endpoints are any nodes of the cluster, as base URLs
    (``http://10.0.0.1:8001``) or host:port; the client learns the leader and
    the other nodes from the answers. token is sent as a bearer token; tls
    (an ``ssl.SSLContext`` trusting the cluster's CA) makes host:port mean
    https.

    timeout bounds each call's retries (on top of the time an acquire is
    asked to wait for a lock); request_timeout bounds one attempt. drift is
    the clock rate error a lease's deadline allows for: a lease is trusted
    until send time + TTL x (1 - drift). clock replaces the monotonic clock
    in tests.
    """

    def __init__(
        self,
        endpoints: list[str] | str,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        drift: float = DEFAULT_DRIFT,
        backoff: tuple[float, float] = (0.05, 2.0),
        clock: Clock | None = None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        if not 0 <= drift < 0.5:
            raise ValueError(f"raftlock: drift {drift} out of range [0, 0.5)")
        if timeout <= 0:
            raise ValueError("raftlock: timeout must be positive")
        self._clock: Clock = clock or MonotonicClock()
        self._drift = drift
        self._timeout = timeout
        self._transport = Transport(
            list(endpoints),
            clock=self._clock,
            tls=tls,
            token=token,
            request_timeout=request_timeout,
            backoff_base=backoff[0],
            backoff_max=backoff[1],
        )

    @property
    def leader(self) -> str:
        """The leader's node id as last reported by the cluster ("" if unknown)."""
        return self._transport.leader

    @property
    def endpoints(self) -> list[str]:
        """The base URLs the client knows: the given ones, then learned ones."""
        return self._transport.endpoints

    def _valid_for(self, ttl: float) -> float:
        return ttl * (1 - self._drift)

    def _deadline(self, timeout: float | None, extra: float = 0.0) -> float:
        return self._clock.now() + (self._timeout if timeout is None else timeout) + extra

    def _do(self, r: Request, timeout: float | None = None, tried: Outcome | None = None) -> dict[str, Any]:
        return self._transport.do(r, self._deadline(timeout, r.server_wait), tried)

    # --- locks -------------------------------------------------------------

    def lock(
        self,
        name: str,
        ttl: float = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
        *,
        owner: str = "",
        lease_id: str | None = None,
        lock_delay: float = 0.0,
        value: str = "",
        shared: bool = False,
        timeout: float | None = None,
    ) -> Lease:
        """Takes lock name, waiting up to wait seconds while another lease
        holds it (HeldError after that), and returns the Lease, which renews
        itself from a background thread until released. Use it in a with
        block, which releases it on exit::

            with client.lock("orders/89041", ttl=10.0, wait=5.0) as lease:
                write(..., fencing_token=lease.fencing_token)

        lease_id (16 to 128 of [A-Za-z0-9_-]) is chosen at random unless
        given; transport failures are resent with it until timeout, so an
        acquire whose answer was lost gets its own lease back, never a second
        one. lock_delay: if the lease later expires, nobody may take the lock
        for that long after. value is published with the lock. shared takes
        a shared (read) hold.
        """
        return self._acquire(name, ttl=ttl, wait=wait, owner=owner, lease_id=lease_id, lock_delay=lock_delay,
                             value=value, shared=shared, timeout=timeout)

    def acquire(self, name: str, ttl: float = DEFAULT_TTL, wait: float = DEFAULT_WAIT, **kw: Any) -> Lease:
        """The same as lock()."""
        return self._acquire(name, ttl=ttl, wait=wait, **kw)

    def try_acquire(self, name: str, ttl: float = DEFAULT_TTL, **kw: Any) -> Lease:
        """Takes lock name if it is free; HeldError at once otherwise.
        Transport failures are still retried until timeout."""
        return self._acquire(name, ttl=ttl, wait=0.0, **kw)

    def _check_name(self, name: str) -> None:
        if not name:
            raise ValueError("raftlock: empty lock name")

    def _lease_id(self, lease_id: str | None) -> str:
        if lease_id is None:
            return new_lease_id()
        if not _LEASE_ID.match(lease_id):
            raise ValueError("raftlock: lease id must be 16 to 128 characters of [A-Za-z0-9_-]")
        return lease_id

    def _wait_round(self, wait_deadline: float) -> float:
        w = min(wait_deadline - self._clock.now(), MAX_WAIT_ROUND)
        return int(w * 1000) / 1000.0 if w >= 0.001 else 0.0

    def _acquire(
        self,
        name: str,
        *,
        ttl: float = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
        owner: str = "",
        lease_id: str | None = None,
        lock_delay: float = 0.0,
        value: str = "",
        shared: bool = False,
        timeout: float | None = None,
        session: Session | None = None,
    ) -> Lease:
        self._check_name(name)
        lid = self._lease_id(lease_id)
        if shared and lock_delay > 0:
            raise ValueError("raftlock: a shared lock takes no lock delay")
        if shared and value:
            raise ValueError("raftlock: a shared hold publishes no value")
        if ttl <= 0 or lock_delay < 0 or wait < 0:
            raise ValueError("raftlock: ttl must be positive, lock_delay and wait not negative")
        if session is not None:
            session._usable()
            owner = owner or session.owner
        wait_deadline = self._clock.now() + wait
        deadline = wait_deadline + (self._timeout if timeout is None else timeout)
        rounds = 0
        while True:
            w = self._wait_round(wait_deadline) if wait > 0 else 0.0
            start = self._clock.now()
            body: dict[str, Any] = {"name": name, "lease_id": lid}
            if owner:
                body["owner"] = owner
            if session is not None:
                body["session_id"] = session.session_id
            else:
                body["ttl_ms"] = _ms(ttl)
            if shared:
                body["mode"] = "shared"
            if w > 0:
                body["wait_ms"] = _ms(w)
            if lock_delay > 0:
                body["lock_delay_ms"] = _ms(lock_delay)
            if value:
                body["value"] = value
            tried = Outcome()
            r = Request("POST", "/v1/locks/acquire", body, server_wait=w, name=name)
            try:
                resp = self._transport.do(r, deadline + w, tried)
            except HeldError:
                if self._clock.now() < wait_deadline - 0.02:
                    self._pause_if_quick(start, w, rounds)
                    rounds += 1
                    continue
                raise
            except RaftlockError:
                if tried.ambiguous:
                    self._abandon(name, lid)
                raise
            if resp.get("lease_id", lid) != lid:
                raise RaftlockError("raftlock: acquire answered another lease id")
            if shared and resp.get("mode") != "shared":
                self._abandon(name, lid)
                raise RaftlockError(f"raftlock: asked for {name!r} shared, granted exclusive")
            token = int(resp["fencing_token"])
            if session is not None:
                lease = Lease(self, name, owner, lid, token, session.ttl, self._releaser(name, lid),
                              shared=shared, value=value)
                try:
                    session._bind(lease)
                except RaftlockError:
                    self._abandon(name, lid)
                    raise
                return lease
            granted = resp.get("ttl_ms", 0) / 1000.0
            if 0 < granted < ttl:
                ttl = granted  # trust the lease only as long as the server grants it
            assert tried.sent is not None
            sent = tried.sent
            # A grant that came long after its send (a server-side wait,
            # retries) would start a short or past deadline: a renew now gives
            # a fresh lower bound on the lease's life.
            if self._clock.now() - sent > ttl / 3:
                try:
                    info, sent = self._renew(name, lid, None, deadline, None)
                except NotHolderError:
                    if wait > 0 and self._clock.now() < wait_deadline:
                        continue
                    raise
                except RaftlockError:
                    self._abandon(name, lid)
                    raise
                if info.fencing_token != token:
                    self._abandon(name, lid)
                    raise RaftlockError(f"raftlock: renew after acquire answered token {info.fencing_token}, acquire {token}")
            lease = Lease(self, name, owner, lid, token, ttl, self._releaser(name, lid), shared=shared, value=value)
            lease._keep_alive(sent, self._lease_renewer(name, lid, token))
            return lease

    def _pause_if_quick(self, start: float, w: float, rounds: int) -> None:
        # A held answer long before the wait was over (a lock-delay, or no
        # wait at all) must not make the acquire spin.
        if self._clock.now() - start < w / 2 or w == 0:
            self._transport.sleep(self._transport.backoff(min(rounds, 10)), None)

    def _releaser(self, name: str, lid: str) -> Any:
        return lambda timeout: self.release(name, lid, timeout=timeout)

    def _lease_renewer(self, name: str, lid: str, token: int) -> Any:
        def renew(deadline: float, cancel: Cancel) -> float:
            try:
                info, sent = self._renew(name, lid, None, deadline, cancel)
            except NotHolderError as e:
                raise LeaseLostError(f"raftlock: lock {name!r}: {e}") from e
            if info.fencing_token != token:
                raise LeaseLostError(f"raftlock: lock {name!r}: renew answered token {info.fencing_token}, lease has {token}")
            return sent

        return renew

    def _abandon(self, name: str, lid: str) -> bool:
        """Releases, best effort and briefly, a lease an acquire may have
        created although the caller will never see it, so that it does not
        keep the lock from everyone until its TTL runs out."""
        try:
            self.release(name, lid, timeout=1.0)
        except NotHolderError:
            return True
        except RaftlockError as e:
            log.debug("release of abandoned acquire failed: lock=%r error=%s", name, e)
            return False
        return True

    def _renew(
        self, name: str, lid: str, ttl: float | None, deadline: float, cancel: Cancel | None
    ) -> tuple[LockInfo, float]:
        body: dict[str, Any] = {"name": name, "lease_id": lid}
        if ttl:
            body["ttl_ms"] = _ms(ttl)
        tried = Outcome()
        resp = self._transport.do(Request("POST", "/v1/locks/renew", body, name=name), deadline, tried, cancel)
        assert tried.sent is not None
        return LockInfo.from_json({**resp, "held": True}), tried.sent

    def renew(self, name: str, lease_id: str, ttl: float | None = None, *, timeout: float | None = None) -> LockInfo:
        """Renews lease lease_id on lock name by hand (a Lease renews itself);
        ttl None keeps its TTL. NotHolderError if it does not hold the lock."""
        info, _ = self._renew(name, lease_id, ttl, self._deadline(timeout), None)
        return info

    def release(self, name: str, lease_id: str, *, timeout: float | None = None) -> None:
        """Releases lock name held by lease lease_id, by hand (see
        Lease.release). NotHolderError if that lease does not hold it; it
        never frees another lease's lock."""
        tried = Outcome()
        try:
            self._do(Request("POST", "/v1/locks/release", {"name": name, "lease_id": lease_id}, name=name), timeout, tried)
        except NotHolderError:
            if tried.ambiguous:
                return  # an earlier attempt released it and its answer was lost
            raise

    def force_release(self, name: str, *, timeout: float | None = None) -> LockInfo | None:
        """Ends whatever lease holds lock name, as its expiry would (admin).
        Returns the lease it ended (owner and token), or None if none held it."""
        out = self._do(Request("POST", "/v1/locks/release", {"name": name, "force": True}, name=name), timeout)
        h = out.get("holder")
        if not out.get("released") or not h:
            return None
        return LockInfo(name=name, held=False, owner=h.get("owner", ""), fencing_token=int(h.get("fencing_token", 0)))

    def _update(self, name: str, lid: str, value: str, timeout: float | None) -> None:
        self._do(Request("POST", "/v1/locks/update", {"name": name, "lease_id": lid, "value": value}, name=name), timeout)

    def get(self, name: str, *, stale: bool = False, timeout: float | None = None) -> LockInfo:
        """The state of lock name: linearizable (from the leader) unless stale."""
        r = Request("GET", "/v1/locks/" + urllib.parse.quote(name, safe=""), leader=not stale)
        if stale:
            r.query["stale"] = "true"
        return LockInfo.from_json(self._do(r, timeout))

    def list(
        self, prefix: str = "", *, limit: int | None = None, stale: bool = False, timeout: float | None = None
    ) -> LockList:
        """The held locks whose names start with prefix, sorted by name."""
        r = Request("GET", "/v1/locks", leader=not stale)
        if prefix:
            r.query["prefix"] = prefix
        if limit is not None:
            r.query["limit"] = str(limit)
        if stale:
            r.query["stale"] = "true"
        j = self._do(r, timeout)
        return LockList(
            locks=[LockInfo.from_json(x) for x in j.get("locks") or []],
            truncated=bool(j.get("truncated")),
            index=int(j.get("index", 0)),
        )

    def watch(
        self, name: str, *, stale: bool = False, wait: float = 60.0, stop: threading.Event | None = None
    ) -> Iterator[LockInfo]:
        """Yields the state of lock name now, then after each change, over
        blocking reads (``?index=N&wait_ms=M``). A change may be reported
        more than once but is never missed between two yields. Read failures
        are retried with backoff; bad requests and auth errors end it with
        the error. It ends when stop is set (checked between reads) or the
        caller stops iterating."""
        path = "/v1/locks/" + urllib.parse.quote(name, safe="")
        yield from self._watch(path, stale, wait, stop, LockInfo.from_json)

    def watch_prefix(
        self, prefix: str = "", *, stale: bool = False, wait: float = 60.0, stop: threading.Event | None = None
    ) -> Iterator[LockList]:
        """As watch(), for every lock under prefix."""

        def conv(j: dict[str, Any]) -> LockList:
            return LockList([LockInfo.from_json(x) for x in j.get("locks") or []], bool(j.get("truncated")),
                            int(j.get("index", 0)))

        q = {"prefix": prefix} if prefix else {}
        yield from self._watch("/v1/locks", stale, wait, stop, conv, q)

    def _watch(self, path: str, stale: bool, wait: float, stop: threading.Event | None, conv: Any,
               base_query: dict[str, str] | None = None) -> Iterator[Any]:
        wait = min(max(wait, 0.001), MAX_WAIT_ROUND)
        last: int | None = None
        fails = quick = 0
        while stop is None or not stop.is_set():
            r = Request("GET", path, query=dict(base_query or {}), leader=not stale)
            if stale:
                r.query["stale"] = "true"
            if last is not None:
                r.query["index"] = str(last)
                r.query["wait_ms"] = str(_ms(wait))
                r.server_wait = wait
            start = self._clock.now()
            try:
                j = self._do(r)
            except (BadRequestError, UnauthorizedError, ForbiddenError, NotFoundError):
                raise
            except RaftlockError as e:
                log.debug("watch read failed: path=%s error=%s", path, e)
                self._transport.sleep(self._transport.backoff(min(fails, 10)), None)
                fails += 1
                continue
            fails = 0
            state = conv(j)
            if last is not None and state.index <= last:
                if self._clock.now() - start < wait / 2:
                    quick += 1
                    self._transport.sleep(self._transport.backoff(min(quick, 10)), None)
                continue
            quick = 0
            last = state.index
            yield state

    # --- sessions ----------------------------------------------------------

    def session(
        self,
        ttl: float = DEFAULT_TTL,
        *,
        owner: str = "",
        lock_delay: float = 0.0,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> Session:
        """Creates a session and starts its watchdog. Use it as a context
        manager (closing it on exit releases every lease it holds)::

            with client.session(ttl=10) as s, s.lock("a") as a, s.lock("b") as b:
                ...

        The create is resent with the same session id until timeout; if the
        outcome stays unknown the session is closed, best effort, and the
        UnknownOutcomeError raised."""
        sid = self._lease_id(session_id)
        if ttl <= 0 or lock_delay < 0:
            raise ValueError("raftlock: session ttl must be positive, lock_delay not negative")
        body = {"session_id": sid, "ttl_ms": _ms(ttl), "lock_delay_ms": _ms(lock_delay)}
        if owner:
            body["owner"] = owner
        tried = Outcome()
        deadline = self._deadline(timeout)
        try:
            resp = self._transport.do(Request("POST", "/v1/sessions", body), deadline, tried)
        except RaftlockError:
            if tried.ambiguous:
                self._abandon_session(sid)
            raise
        if resp.get("session_id") != sid:
            raise RaftlockError("raftlock: create session answered another session id")
        granted = resp.get("ttl_ms", 0) / 1000.0
        if 0 < granted < ttl:
            ttl = granted
        assert tried.sent is not None
        sent = tried.sent
        if self._clock.now() - sent > ttl / 3:
            try:
                sent = self._renew_session(sid, deadline, None)
            except RaftlockError:
                self._abandon_session(sid)
                raise
        s = Session(self, sid, owner, ttl, resp.get("lock_delay_ms", 0) / 1000.0)
        s._start(sent)
        return s

    def _renew_session(self, sid: str, deadline: float, cancel: Cancel | None) -> float:
        tried = Outcome()
        resp = self._transport.do(Request("POST", "/v1/sessions/renew", {"session_id": sid}), deadline, tried, cancel)
        if resp.get("session_id") != sid:
            raise RaftlockError("raftlock: session renew answered another session id")
        assert tried.sent is not None
        return tried.sent

    def _abandon_session(self, sid: str) -> None:
        try:
            self.close_session(sid, timeout=1.0)
        except NoSessionError:
            pass
        except RaftlockError as e:
            log.debug("close of abandoned session failed: session=%s... error=%s", sid[:6], e)

    def close_session(self, session_id: str, *, timeout: float | None = None) -> int:
        """Closes a session by hand (see Session.close) and returns how many
        leases it released. NoSessionError if no such session lives, unless
        an earlier attempt of this call may have closed it."""
        tried = Outcome()
        try:
            out = self._do(Request("POST", "/v1/sessions/close", {"session_id": session_id}), timeout, tried)
        except NoSessionError:
            if tried.ambiguous:
                return 0
            raise
        return int(out.get("released", 0))

    def session_info(self, session_id: str, *, stale: bool = False, timeout: float | None = None) -> SessionInfo:
        """The state of a session (NoSessionError when it has ended)."""
        r = Request("GET", "/v1/sessions/" + urllib.parse.quote(session_id, safe=""), leader=not stale)
        if stale:
            r.query["stale"] = "true"
        j = self._do(r, timeout)
        return SessionInfo(
            session_id=session_id,
            owner=j.get("owner", ""),
            ttl=j.get("ttl_ms", 0) / 1000.0,
            lock_delay=j.get("lock_delay_ms", 0) / 1000.0,
            remaining=None if j.get("remaining_ms") is None else j["remaining_ms"] / 1000.0,
            index=int(j.get("index", 0)),
            leases=[
                SessionLease(kind=x.get("kind", ""), name=x.get("name", ""), fencing_token=int(x.get("fencing_token", 0)),
                             shared=x.get("mode") == "shared", slot=int(x.get("slot", 0)))
                for x in j.get("leases") or []
            ],
        )

    # --- semaphores --------------------------------------------------------

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: float = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
        *,
        owner: str = "",
        lease_id: str | None = None,
        timeout: float | None = None,
    ) -> Permit:
        """Takes a permit of semaphore name (at most limit held at once),
        waiting up to wait seconds while all are held (FullError after that).
        The Permit renews itself until released; use it in a with block.
        Fence its writes per (name, slot): raftlock.fence.slot_resource."""
        return self._acquire_semaphore(name, limit, ttl=ttl, wait=wait, owner=owner, lease_id=lease_id, timeout=timeout)

    def try_semaphore(self, name: str, limit: int, ttl: float = DEFAULT_TTL, **kw: Any) -> Permit:
        """semaphore() without waiting: FullError at once when every permit is held."""
        return self._acquire_semaphore(name, limit, ttl=ttl, wait=0.0, **kw)

    def _acquire_semaphore(
        self,
        name: str,
        limit: int,
        *,
        ttl: float = DEFAULT_TTL,
        wait: float = DEFAULT_WAIT,
        owner: str = "",
        lease_id: str | None = None,
        timeout: float | None = None,
        session: Session | None = None,
    ) -> Permit:
        self._check_name(name)
        lid = self._lease_id(lease_id)
        if not 1 <= limit <= 1024:
            raise ValueError(f"raftlock: semaphore limit {limit} out of range 1..1024")
        if ttl <= 0 or wait < 0:
            raise ValueError("raftlock: ttl must be positive, wait not negative")
        if session is not None:
            session._usable()
            owner = owner or session.owner
        wait_deadline = self._clock.now() + wait
        deadline = wait_deadline + (self._timeout if timeout is None else timeout)
        rounds = 0
        while True:
            w = self._wait_round(wait_deadline) if wait > 0 else 0.0
            start = self._clock.now()
            body: dict[str, Any] = {"name": name, "limit": limit, "lease_id": lid}
            if owner:
                body["owner"] = owner
            if session is not None:
                body["session_id"] = session.session_id
            else:
                body["ttl_ms"] = _ms(ttl)
            if w > 0:
                body["wait_ms"] = _ms(w)
            tried = Outcome()
            try:
                resp = self._transport.do(
                    Request("POST", "/v1/semaphores/acquire", body, server_wait=w, name=name), deadline + w, tried
                )
            except FullError:
                if self._clock.now() < wait_deadline - 0.02:
                    self._pause_if_quick(start, w, rounds)
                    rounds += 1
                    continue
                raise
            except RaftlockError:
                if tried.ambiguous:
                    self._abandon_permit(name, lid)
                raise
            if resp.get("lease_id", lid) != lid:
                raise RaftlockError("raftlock: semaphore acquire answered another lease id")
            token, slot, lim = int(resp["fencing_token"]), int(resp.get("slot", 0)), int(resp.get("limit", limit))
            releaser = lambda timeout: self.release_semaphore(name, lid, timeout=timeout)  # noqa: E731
            if session is not None:
                p = Permit(self, name, owner, lid, token, session.ttl, releaser, slot=slot, limit=lim)
                try:
                    session._bind(p)
                except RaftlockError:
                    self._abandon_permit(name, lid)
                    raise
                return p
            granted = resp.get("ttl_ms", 0) / 1000.0
            if 0 < granted < ttl:
                ttl = granted
            assert tried.sent is not None
            sent = tried.sent
            if self._clock.now() - sent > ttl / 3:
                try:
                    again, sent = self._renew_semaphore(name, lid, deadline, None)
                except NotHolderError:
                    if wait > 0 and self._clock.now() < wait_deadline:
                        continue
                    raise
                except RaftlockError:
                    self._abandon_permit(name, lid)
                    raise
                if int(again.get("fencing_token", 0)) != token:
                    self._abandon_permit(name, lid)
                    raise RaftlockError("raftlock: renew after semaphore acquire answered another token")
            p = Permit(self, name, owner, lid, token, ttl, releaser, slot=slot, limit=lim)

            def renew(deadline: float, cancel: Cancel) -> float:
                try:
                    info, sent = self._renew_semaphore(name, lid, deadline, cancel)
                except NotHolderError as e:
                    raise LeaseLostError(f"raftlock: semaphore {name!r}: {e}") from e
                if int(info.get("fencing_token", 0)) != token:
                    raise LeaseLostError(f"raftlock: semaphore {name!r}: renew answered another token")
                return sent

            p._keep_alive(sent, renew)
            return p

    def _renew_semaphore(self, name: str, lid: str, deadline: float, cancel: Cancel | None) -> tuple[dict[str, Any], float]:
        tried = Outcome()
        resp = self._transport.do(
            Request("POST", "/v1/semaphores/renew", {"name": name, "lease_id": lid}, name=name), deadline, tried, cancel
        )
        assert tried.sent is not None
        return resp, tried.sent

    def _abandon_permit(self, name: str, lid: str) -> None:
        try:
            self.release_semaphore(name, lid, timeout=1.0)
        except NotHolderError:
            pass
        except RaftlockError as e:
            log.debug("release of abandoned permit failed: semaphore=%r error=%s", name, e)

    def release_semaphore(self, name: str, lease_id: str, *, timeout: float | None = None) -> None:
        """Releases the permit of lease lease_id by hand (see Permit.release)."""
        tried = Outcome()
        try:
            self._do(Request("POST", "/v1/semaphores/release", {"name": name, "lease_id": lease_id}, name=name),
                     timeout, tried)
        except NotHolderError:
            if tried.ambiguous:
                return
            raise

    def semaphore_info(self, name: str, *, stale: bool = False, timeout: float | None = None) -> SemaphoreInfo:
        """The state of semaphore name: its limit and holders by slot."""
        r = Request("GET", "/v1/semaphores/" + urllib.parse.quote(name, safe=""), leader=not stale)
        if stale:
            r.query["stale"] = "true"
        j = self._do(r, timeout)
        from .errors import _holders

        return SemaphoreInfo(name=j.get("name", name), limit=int(j.get("limit", 0)), holders=_holders(j.get("holders")),
                             index=int(j.get("index", 0)), waiters=int(j.get("waiters", 0)))

    # --- election and cluster ----------------------------------------------

    def election(self, name: str, ttl: float = DEFAULT_TTL, *, owner: str = "", lock_delay: float = 0.0,
                 stale: bool = False) -> Election:
        """A leader election on lock name: the leader holds the lock and
        publishes its value (an address, say) with it."""
        return Election(self, name, ttl=ttl, owner=owner, lock_delay=lock_delay, stale=stale)

    def cluster(self, *, timeout: float | None = None) -> ClusterStatus:
        """One node's view of the cluster (never forwarded)."""
        j = self._do(Request("GET", "/v1/cluster", leader=False), timeout)
        self._transport.learn_cluster(j)
        return ClusterStatus(id=j.get("id", ""), leader=j.get("leader", ""), term=int(j.get("term", 0)),
                             commit_index=int(j.get("commit_index", 0)), applied_index=int(j.get("applied_index", 0)),
                             nodes=list(j.get("nodes") or []))


class Election:
    """A leader election over one lock, as etcd's and kazoo's: campaign()
    takes the lock with a value and returns the Lease (keep it alive, watch
    lease.lost); leader() says who leads; observe() follows leaders."""

    def __init__(self, client: Client, name: str, *, ttl: float, owner: str, lock_delay: float, stale: bool) -> None:
        self._c = client
        self.name = name
        self._ttl, self._owner, self._lock_delay, self._stale = ttl, owner, lock_delay, stale
        self._mu = threading.Lock()
        self._lease: Lease | None = None

    @property
    def lease(self) -> Lease | None:
        """The lease while this Election leads (until resign())."""
        with self._mu:
            return self._lease

    def campaign(self, value: str, wait: float = DEFAULT_WAIT, *, timeout: float | None = None) -> Lease:
        """Waits up to wait seconds to lead, then leads with value published.
        Campaigning again while leading just publishes the new value."""
        cur = self.lease
        if cur is not None and not cur.ended.is_set():
            cur.set_value(value, timeout)
            return cur
        lease = self._c.lock(self.name, self._ttl, wait, owner=self._owner, lock_delay=self._lock_delay, value=value,
                             timeout=timeout)
        with self._mu:
            self._lease = lease
        return lease

    def proclaim(self, value: str, *, timeout: float | None = None) -> None:
        """Publishes a new value while leading."""
        cur = self.lease
        if cur is None:
            raise RaftlockError("raftlock: this election does not lead")
        cur.set_value(value, timeout)

    def resign(self, *, timeout: float | None = None) -> None:
        """Stops leading (releases the lock)."""
        with self._mu:
            cur, self._lease = self._lease, None
        if cur is not None:
            cur.release(timeout)

    def leader(self, *, timeout: float | None = None) -> LockInfo:
        """The current leader's lock state (owner, value, fencing token);
        NoLeaderElectedError when nobody leads."""
        st = self._c.get(self.name, stale=self._stale, timeout=timeout)
        if not st.held:
            raise NoLeaderElectedError(f"raftlock: nobody leads {self.name!r}")
        return st

    def observe(self, *, stop: threading.Event | None = None) -> Iterator[LockInfo]:
        """Yields the lock's state now and after each change (a new leader, a
        new value, nobody leading), over blocking reads."""
        return self._c.watch(self.name, stale=self._stale, stop=stop)


