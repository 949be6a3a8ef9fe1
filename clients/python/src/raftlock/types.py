"""What reads answer: locks, lists, semaphores, sessions, the cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import Holder, _holders


def _remaining(j: dict[str, Any]) -> float | None:
    ms = j.get("remaining_ms")
    return None if ms is None else ms / 1000.0


@dataclass(frozen=True)
class LockInfo:
    """A lock as ``GET /v1/locks/{name}`` shows it (or as an acquire or renew
    answered it)."""

    name: str
    held: bool
    owner: str = ""
    fencing_token: int = 0
    """The holding lease's fencing token (of a shared lock: the lowest)."""
    ttl: float = 0.0
    """The lease's TTL in seconds."""
    value: str = ""
    """What the holder published with the lock (an election's leader address)."""
    index: int = 0
    """The Raft index of the lock's last change: pass it to a blocking read."""
    remaining: float | None = None
    """The lease's time left on the leader's clock, when the leader answered."""
    shared: bool = False
    holders: list[Holder] = field(default_factory=list)
    """Every holder of a lock held shared; empty for an exclusive hold."""
    waiters: int = 0

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> LockInfo:
        return cls(
            name=j.get("name", ""),
            held=bool(j.get("held", True)),
            owner=j.get("owner", ""),
            fencing_token=int(j.get("fencing_token", 0)),
            ttl=j.get("ttl_ms", 0) / 1000.0,
            value=j.get("value", ""),
            index=int(j.get("index", 0)),
            remaining=_remaining(j),
            shared=j.get("mode") == "shared",
            holders=_holders(j.get("holders")),
            waiters=int(j.get("waiters", 0)),
        )


@dataclass(frozen=True)
class LockList:
    """The held locks under a prefix, sorted by name."""

    locks: list[LockInfo]
    truncated: bool
    """More locks match than were returned."""
    index: int


@dataclass(frozen=True)
class SemaphoreInfo:
    """A semaphore as ``GET /v1/semaphores/{name}`` shows it."""

    name: str
    limit: int
    """0 when nobody holds a permit."""
    holders: list[Holder]
    """The permits' holders, by slot."""
    index: int = 0
    waiters: int = 0


@dataclass(frozen=True)
class SessionLease:
    """One lease of a session, as a session read lists it (never its lease id)."""

    kind: str
    """"lock" or "semaphore"."""
    name: str
    fencing_token: int
    shared: bool = False
    slot: int = 0


@dataclass(frozen=True)
class SessionInfo:
    """A session as ``GET /v1/sessions/{id}`` shows it."""

    session_id: str
    owner: str
    ttl: float
    lock_delay: float
    remaining: float | None
    index: int
    leases: list[SessionLease]


@dataclass(frozen=True)
class ClusterStatus:
    """One node's view of the cluster (``GET /v1/cluster``)."""

    id: str
    leader: str
    term: int
    commit_index: int
    applied_index: int
    nodes: list[dict[str, Any]]
