"""Exceptions of the raftlock client, named after the HTTP API's error codes.

Every exception raised by the client is a :class:`RaftlockError`. An error
answer of the API is an :class:`APIError` whose class follows its ``error``
code (``held`` is :class:`HeldError`, ``not_holder`` is
:class:`NotHolderError`, ...), so callers catch what they can handle:

- "nothing was applied" answers (503 ``no_leader``, 429 ``overloaded``, ...)
  are retried by the client until the call's timeout, then raised as
  :class:`UnavailableError` subclasses;
- a write that may or may not have been applied (504 ``unknown_outcome``, a
  timeout or a connection cut after the request went out) is resent with the
  same lease id, and raised as :class:`UnknownOutcomeError` only when the
  call's timeout ends first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class RaftlockError(Exception):
    """Base class of every error the client raises."""


@dataclass(frozen=True)
class Holder:
    """A holder of a lock (shared holds) or of a semaphore permit."""

    owner: str
    fencing_token: int
    slot: int = 0
    """A permit's slot; 0 for a lock."""
    ttl: float = 0.0
    """The lease's TTL in seconds, in reads; 0 in error answers."""
    remaining: float | None = None
    """Time left on the leader's clock in seconds, when the leader answered."""


class APIError(RaftlockError):
    """An error answer of the API: ``{"error": code, "message": message}``."""

    code = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retry_after: float = 0.0,
        node: str = "",
        body: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """The answer's Retry-After, in seconds (0 when absent)."""
        self.node = node
        """The id of the node that answered (X-Raftlock-Node), if known."""
        self.body = body or {}
        super().__init__(self._text())

    def _text(self) -> str:
        code = self.code or "http_error"
        if not self.message:
            return f"raftlock: {code} (HTTP {self.status})"
        return f"raftlock: {code} (HTTP {self.status}): {self.message}"


class UnavailableError(RaftlockError):
    """No node could apply the request before the call's timeout, and
    nothing was applied: no leader, overloaded, not supported yet, or no node
    answered at all. Safe to try again later."""


class NoLeaderError(APIError, UnavailableError):
    """503 ``no_leader``: the cluster has no leader (election, lost quorum)."""


class OverloadedError(APIError, UnavailableError):
    """429 or 503 ``overloaded``: shed by the leader's admission control."""


class NotSupportedYetError(APIError, UnavailableError):
    """503 ``not_supported_yet``: not every node reads the command format the
    request needs (an older build is still running). Nothing applied."""


class StateDivergedError(APIError, UnavailableError):
    """503 ``state_diverged``: the answering node's state is not to be trusted."""


class UnknownOutcomeError(APIError):
    """The write may or may not have been applied, and may still be.

    Raised when the call's timeout ended while an attempt's outcome was
    unknown (the server answered 504 ``unknown_outcome``, or a connection
    failed after the request went out). The client resends acquire, renew,
    release and the session and semaphore writes with the same ids until
    then; to find out, resend with the same ``lease_id`` (``status`` is 0
    when the client, not a server, decided the outcome is unknown).
    ``last`` is the last failure seen.
    """

    def __init__(
        self,
        message: str,
        last: BaseException | None = None,
        status: int = 0,
        *,
        retry_after: float = 0.0,
        node: str = "",
    ) -> None:
        super().__init__(status, "unknown_outcome", message, retry_after=retry_after, node=node)
        self.last = last


class BadRequestError(APIError):
    """400 (and 405, 408) ``bad_request``: the request is malformed."""


class UnauthorizedError(APIError):
    """401 ``unauthorized``: no token, or one the cluster does not know."""


class ForbiddenError(APIError):
    """403 ``forbidden``: the token's role does not allow the request."""


class NotFoundError(APIError):
    """404 ``not_found``: no such endpoint or member."""


class HeldError(APIError):
    """409 ``held``: another lease holds the lock.

    ``owner`` and ``fencing_token`` are the holder's (of a lock held shared,
    the lowest-token holder); ``holders`` lists every shared holder;
    ``retry_after_ms`` is set during a lock-delay.
    """

    def __init__(self, *args, name: str = "", **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        h = self.body.get("holder") or {}
        self.name = name
        self.owner: str = h.get("owner", "")
        self.fencing_token: int = int(h.get("fencing_token", 0))
        self.holders: list[Holder] = _holders(self.body.get("holders"))
        self.retry_after_ms: int = int(self.body.get("retry_after_ms", 0))
        self.args = (f"raftlock: lock {name!r} is held by {self.owner!r} (fencing token {self.fencing_token})",)

    def __str__(self) -> str:
        return str(self.args[0])


class NotHolderError(APIError):
    """409 ``not_holder``: that lease does not hold the lock (expired, released,
    or never did)."""


class NoSessionError(APIError):
    """404 ``no_session``: the session is unknown or has ended; so have its leases."""


class SessionFullError(APIError):
    """409 ``session_full``: the session holds as many leases as it may."""


class FullError(APIError):
    """409 ``full``: every permit of the semaphore is held; ``holders`` lists them."""

    def __init__(self, *args, name: str = "", **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.name = name
        self.holders: list[Holder] = _holders(self.body.get("holders"))


class LimitMismatchError(APIError):
    """409 ``limit_mismatch``: the semaphore is held with another limit, ``limit``."""

    def __init__(self, *args, name: str = "", **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.name = name
        self.limit: int = int(self.body.get("limit", 0))


class UnsafeChangeError(APIError):
    """409 ``unsafe_change``: a membership change that would cost the quorum."""


class TooLargeError(APIError):
    """413 ``too_large``: the body is over the limit."""


class StorageError(APIError):
    """500 ``storage_error``: the leader's disk refused the entry; unknown outcome."""


class InternalError(APIError):
    """500 ``internal`` or any other unexpected answer."""


class LeaseLostError(RaftlockError):
    """The lease can no longer be trusted: the server answered ``not_holder``
    (or ``no_session`` for its session), or its deadline on the client's own
    clock passed before a renewal succeeded. Work under the lock must stop;
    storage fenced with the lease's token refuses its late writes anyway."""


class SessionLostError(LeaseLostError):
    """The session can no longer be trusted, and so neither can its leases."""


class LeaseReleasedError(RaftlockError):
    """The lease was released (or detached, or its session closed) by this
    process; it holds nothing any more."""


class NoLeaderElectedError(RaftlockError):
    """Nobody leads the election."""


_CLASSES: dict[str, type[APIError]] = {
    "no_leader": NoLeaderError,
    "overloaded": OverloadedError,
    "not_supported_yet": NotSupportedYetError,
    "state_diverged": StateDivergedError,
    "bad_request": BadRequestError,
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "held": HeldError,
    "not_holder": NotHolderError,
    "no_session": NoSessionError,
    "session_full": SessionFullError,
    "full": FullError,
    "limit_mismatch": LimitMismatchError,
    "unsafe_change": UnsafeChangeError,
    "too_large": TooLargeError,
    "storage_error": StorageError,
    "internal": InternalError,
}

_NAMED = (HeldError, FullError, LimitMismatchError)


def error_from_answer(
    status: int, body: dict[str, Any], *, retry_after: float = 0.0, node: str = "", name: str = ""
) -> APIError:
    """Builds the exception for an error answer of the API."""
    code = str(body.get("error", "")) if isinstance(body, dict) else ""
    message = str(body.get("message", "")) if isinstance(body, dict) else ""
    if code == "unknown_outcome":
        return UnknownOutcomeError(message or "outcome unknown", status=status, retry_after=retry_after, node=node)
    cls = _CLASSES.get(code)
    if cls is None:
        cls = OverloadedError if status == 429 else InternalError
    kw: dict[str, Any] = {"retry_after": retry_after, "node": node, "body": body if isinstance(body, dict) else {}}
    if cls in _NAMED:
        kw["name"] = name
    return cls(status, code, message, **kw)


def _holders(raw: object) -> list[Holder]:
    if not isinstance(raw, list):
        return []
    return [
        Holder(
            owner=h.get("owner", ""),
            fencing_token=int(h.get("fencing_token", 0)),
            slot=int(h.get("slot", 0)),
            ttl=h.get("ttl_ms", 0) / 1000.0,
            remaining=h["remaining_ms"] / 1000.0 if "remaining_ms" in h else None,
        )
        for h in raw
        if isinstance(h, dict)
    ]

