"""Sending one logical API call: endpoints, leader hints, retries.

A call is sent until it gets a definite answer or its deadline passes. It
moves to another node on connection errors, 503 and 429 (honouring
Retry-After) with jittered exponential backoff, and goes to the leader
directly once a node's X-Raftlock-Leader header names it. A 503 or 429
promises that nothing was applied, so any request is resent after one. A 504
``unknown_outcome``, a 500, or a connection that fails after the request
went out does not: the write may have been applied. Only requests that are
safe to repeat (every write of this client carries its lease or session id,
so a resent one is the same write) are resent then, and the call remembers
that its outcome became ambiguous and when the earliest such attempt was
sent: a lease's deadline counts from there.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from .clock import Clock
from .errors import (
    APIError,
    NotSupportedYetError,
    RaftlockError,
    UnavailableError,
    UnknownOutcomeError,
    error_from_answer,
)

log = logging.getLogger("raftlock")

HEADER_NODE = "X-Raftlock-Node"
HEADER_LEADER = "X-Raftlock-Leader"
MAX_RESPONSE_BODY = 4 << 20

# How long a call resends a request the cluster does not support yet: long
# enough for a new leader's first survey of its members, not for an old node.
NOT_SUPPORTED_PATIENCE = 5.0


@dataclass
class Request:
    """One logical API call; a call may send it several times."""

    method: str
    path: str  # escaped
    body: dict[str, Any] | None = None
    query: dict[str, str] = field(default_factory=dict)
    leader: bool = True
    """Send to the leader when known (writes, linearizable reads)."""
    idempotent: bool = True
    """Safe to resend after a failure that leaves its outcome unknown."""
    server_wait: float = 0.0
    """How long the server may hold the request (wait_ms), in seconds."""
    name: str = ""
    """The lock or semaphore, for HeldError and FullError."""


@dataclass
class Outcome:
    """What the attempts of a call may have done."""

    sent: float | None = None
    """Send time of the earliest attempt that may have taken effect."""
    ambiguous: bool = False
    """Some attempt failed without telling whether it took effect."""

    def may_have_applied(self, sent: float) -> None:
        if self.sent is None:
            self.sent = sent
        self.ambiguous = True


class Cancel:
    """Cancels a call from another thread: no further attempt, no further
    backoff, and the attempt in flight has its socket shut down."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def cancel(self) -> None:
        with self._lock:
            self.event.set()
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def is_set(self) -> bool:
        return self.event.is_set()

    def _attach(self, sock: socket.socket | None) -> bool:
        with self._lock:
            if self.event.is_set():
                return False
            self._sock = sock
            return True


class Cancelled(RaftlockError):
    """The call was cancelled (internal: a stopped watchdog's renewal)."""


class _NotSent(Exception):
    """The request never reached a server (connection refused, DNS)."""


def normalize_endpoint(ep: str, scheme: str) -> str:
    ep = ep.strip()
    if "://" not in ep:
        ep = scheme + "://" + ep
    u = urllib.parse.urlsplit(ep)
    if u.scheme not in ("http", "https") or not u.netloc or u.path not in ("", "/") or u.query:
        raise ValueError(f"raftlock: bad endpoint {ep!r}: want http(s)://host:port")
    return f"{u.scheme}://{u.netloc}"


def retry_after(value: str | None) -> float:
    """Parses a Retry-After header (seconds or an HTTP date) into seconds."""
    if not value:
        return 0.0
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        t = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return 0.0
    return max(t - time.time(), 0.0)


class Transport:
    """The endpoints a client knows, who leads, and how to send a call."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        clock: Clock,
        tls: ssl.SSLContext | None,
        token: str | None,
        request_timeout: float,
        backoff_base: float,
        backoff_max: float,
    ) -> None:
        if not endpoints:
            raise ValueError("raftlock: no endpoints given")
        if request_timeout <= 0:
            raise ValueError("raftlock: request timeout must be positive")
        if backoff_base <= 0 or backoff_max < backoff_base:
            raise ValueError("raftlock: backoff needs 0 < base <= max")
        self.clock = clock
        self.tls = tls
        self.token = token
        self.request_timeout = request_timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._mu = threading.Lock()
        self._endpoints: list[str] = []  # base URLs, seeds first, then learned ones
        self._current = 0
        self._not_before: dict[str, float] = {}  # endpoint -> do not send before
        self._leader = ""  # the leader's node id, "" when unknown
        self._addrs: dict[str, str] = {}  # node id -> base URL
        self._looked_up: set[str] = set()  # leader ids whose address was looked up
        default_scheme = "https" if tls is not None else "http"
        for ep in endpoints:
            u = normalize_endpoint(ep, default_scheme)
            if u not in self._endpoints:
                self._endpoints.append(u)
        self._scheme = self._endpoints[0].split("://", 1)[0]

    @property
    def leader(self) -> str:
        with self._mu:
            return self._leader

    @property
    def endpoints(self) -> list[str]:
        with self._mu:
            return list(self._endpoints)

    # --- routing -----------------------------------------------------------

    def route(self, prefer_leader: bool) -> tuple[str, float]:
        """The endpoint for the next attempt, and how long to wait before it:
        the leader when preferred and usable, else the first usable endpoint
        of the rotation, else the one usable soonest."""
        with self._mu:
            now = self.clock.now()
            if prefer_leader and self._leader:
                a = self._addrs.get(self._leader, "")
                if a and now >= self._not_before.get(a, 0.0):
                    return a, 0.0
            n = len(self._endpoints)
            best = ""
            for i in range(n):
                j = (self._current + i) % n
                u = self._endpoints[j]
                nb = self._not_before.get(u, float("-inf"))
                if now >= nb:
                    self._current = j
                    return u, 0.0
                if not best or nb < self._not_before[best]:
                    best = u
            return best, self._not_before[best] - now

    def penalize(self, u: str, d: float, forget_leader: bool) -> None:
        """Keeps u out of the rotation for d seconds and moves on; a failure
        to reach the leader also forgets who leads, so that the next answer
        from another node says who leads now."""
        with self._mu:
            self._not_before[u] = self.clock.now() + d
            if forget_leader and self._leader and self._addrs.get(self._leader) == u:
                self._leader = ""
            if self._endpoints[self._current] == u:
                self._current = (self._current + 1) % len(self._endpoints)

    def observe(self, u: str, headers: http.client.HTTPMessage, status: int) -> None:
        """Learns from the headers of an answer from u."""
        with self._mu:
            node = headers.get(HEADER_NODE, "")
            if node:
                self._addrs[node] = u
            leader = headers.get(HEADER_LEADER, "")
            if leader:
                self._leader = leader
            elif status == 503:
                self._leader = ""

    def learn_cluster(self, cs: dict[str, Any]) -> None:
        """Records the nodes' HTTP addresses from a /v1/cluster answer; an
        address seen answering wins over an advertised one."""
        with self._mu:
            for n in cs.get("nodes") or []:
                nid, addr = n.get("id", ""), n.get("http_addr", "")
                if not nid or not addr:
                    continue
                try:
                    u = normalize_endpoint(addr, self._scheme)
                except ValueError:
                    continue
                self._addrs.setdefault(nid, u)
                if u not in self._endpoints:
                    self._endpoints.append(u)
            if cs.get("leader"):
                self._leader = cs["leader"]

    def _need_leader_lookup(self) -> bool:
        with self._mu:
            if not self._leader or self._addrs.get(self._leader) or self._leader in self._looked_up:
                return False
            self._looked_up.add(self._leader)
            return True

    def _lookup_leader(self) -> None:
        """Asks a node for the cluster's addresses, once per unknown leader;
        failures are ignored, since followers forward writes anyway."""
        u, _ = self.route(False)
        try:
            status, headers, data = self.send(u, Request("GET", "/v1/cluster"), None, self.request_timeout, None)
        except (OSError, _NotSent, http.client.HTTPException) as e:
            log.debug("leader lookup failed: endpoint=%s error=%s", u, e)
            return
        self.observe(u, headers, status)
        if status == 200:
            try:
                self.learn_cluster(json.loads(data))
            except ValueError:
                pass

    # --- sending -----------------------------------------------------------

    def backoff(self, attempt: int) -> float:
        """The jittered wait before retry number attempt (from 0): between
        half and all of min(base * 2**attempt, max)."""
        d = self.backoff_max if attempt >= 30 else min(self.backoff_base * (2**attempt), self.backoff_max)
        return float(d / 2 + random.uniform(0, d / 2))

    def sleep(self, d: float, cancel: Cancel | None) -> None:
        """Waits d seconds on the client's clock; raises Cancelled if cancelled."""
        ev = cancel.event if cancel is not None else threading.Event()
        if self.clock.wait(ev, d):
            raise Cancelled("raftlock: call cancelled")

    def do(
        self,
        r: Request,
        deadline: float,
        tried: Outcome | None = None,
        cancel: Cancel | None = None,
    ) -> dict[str, Any]:
        """Sends r until it gets a definite answer or the deadline (on the
        client's clock) passes, and returns the decoded 200 answer. tried, if
        given, records what the attempts may have done, whatever the result."""
        tried = tried if tried is not None else Outcome()
        body = json.dumps(r.body, separators=(",", ":")).encode() if r.body is not None else None
        last: BaseException | None = None
        not_supported_since: float | None = None
        attempt = 0
        while True:
            if cancel is not None and cancel.is_set():
                raise Cancelled("raftlock: call cancelled")
            now = self.clock.now()
            if now >= deadline:
                raise self._give_up(r, tried, last)
            if r.leader and self._need_leader_lookup():
                self._lookup_leader()
            u, wait = self.route(r.leader)
            if wait > 0:
                # No point sleeping into the deadline: give up now, with the reason.
                if last is not None and deadline - now < wait:
                    raise self._give_up(r, tried, last)
                self.sleep(min(wait, deadline - now), cancel)
                continue
            sent = self.clock.now()
            timeout = max(min(self.request_timeout + r.server_wait, deadline - sent), 0.001)
            try:
                status, headers, data = self.send(u, r, body, timeout, cancel)
            except ssl.SSLCertVerificationError as e:
                raise RaftlockError(f"raftlock: {r.method} {u}{r.path}: {e}") from e
            except (_NotSent, OSError, http.client.HTTPException) as e:
                definite = isinstance(e, _NotSent)
                if not definite and r.method != "GET":  # a read applies nothing
                    tried.may_have_applied(sent)
                if cancel is not None and cancel.is_set():
                    raise Cancelled("raftlock: call cancelled") from e
                err = e.__cause__ if definite and e.__cause__ is not None else e
                last = UnavailableError(f"raftlock: {r.method} {u}{r.path}: {err!r}")
                log.debug("request failed: endpoint=%s path=%s attempt=%d error=%r", u, r.path, attempt, err)
                self.penalize(u, self.backoff(attempt), True)
                if not definite and not r.idempotent:
                    raise UnknownOutcomeError(str(last), last) from e
                attempt += 1
                continue
            self.observe(u, headers, status)
            if status == 200:
                if tried.sent is None:
                    tried.sent = sent
                try:
                    out = json.loads(data) if data else {}
                except ValueError as e:
                    raise RaftlockError(f"raftlock: decode answer of {r.method} {u}{r.path}: {e}") from e
                return out if isinstance(out, dict) else {"value": out}
            api_err = self._parse_error(status, headers, data, r.name)
            last = api_err
            if status in (503, 429):
                # Neither leaves a half-applied change: safe to resend anything.
                if isinstance(api_err, NotSupportedYetError):
                    if not_supported_since is None:
                        not_supported_since = self.clock.now()
                    elif self.clock.now() - not_supported_since > NOT_SUPPORTED_PATIENCE:
                        raise api_err
                d = max(self.backoff(attempt), api_err.retry_after)
                log.debug("retrying: endpoint=%s path=%s status=%d wait=%.3f", u, r.path, status, d)
                self.penalize(u, d, status == 503)
                attempt += 1
                continue
            if status in (500, 502, 504):
                # May have been applied: resent (same body, so same lease id)
                # only when that is safe.
                if r.method != "GET":
                    tried.may_have_applied(sent)
                if not r.idempotent:
                    raise UnknownOutcomeError(str(api_err), api_err, status=status)
                d = max(self.backoff(attempt), api_err.retry_after)
                log.debug("outcome unknown, retrying: endpoint=%s path=%s status=%d wait=%.3f", u, r.path, status, d)
                self.penalize(u, d, True)
                attempt += 1
                continue
            raise api_err

    def _give_up(self, r: Request, tried: Outcome, last: BaseException | None) -> RaftlockError:
        if tried.ambiguous:
            return UnknownOutcomeError(
                f"raftlock: {r.method} {r.path}: timed out with the outcome unknown (last error: {last})", last
            )
        if isinstance(last, RaftlockError) and not isinstance(last, UnknownOutcomeError):
            return last
        return UnavailableError(f"raftlock: {r.method} {r.path}: no answer in time (last error: {last})")

    def _parse_error(self, status: int, headers: http.client.HTTPMessage, data: bytes, name: str) -> APIError:
        try:
            body = json.loads(data)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not body.get("error"):
            msg = data.decode("utf-8", "replace").strip()
            body = {"message": msg[:200]}
        return error_from_answer(
            status,
            body,
            retry_after=retry_after(headers.get("Retry-After")),
            node=headers.get(HEADER_NODE, ""),
            name=name,
        )

    def send(
        self, base: str, r: Request, body: bytes | None, timeout: float, cancel: Cancel | None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Makes one attempt at base. A failure to connect raises _NotSent."""
        u = urllib.parse.urlsplit(base)
        conn: http.client.HTTPConnection
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.netloc, timeout=timeout, context=self.tls)
        else:
            conn = http.client.HTTPConnection(u.netloc, timeout=timeout)
        target = r.path
        if r.query:
            target += "?" + urllib.parse.urlencode(r.query)
        hdrs = {"Accept": "application/json"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        if self.token:
            hdrs["Authorization"] = "Bearer " + self.token
        try:
            try:
                conn.connect()
            except ssl.SSLCertVerificationError:
                raise
            except OSError as e:
                raise _NotSent(str(e)) from e
            if cancel is not None and not cancel._attach(conn.sock):
                raise _NotSent("cancelled")
            conn.request(r.method, target, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read(MAX_RESPONSE_BODY)
            return resp.status, resp.headers, data
        finally:
            if cancel is not None:
                cancel._attach(None)
            conn.close()
