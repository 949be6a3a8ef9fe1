"""raftlock: the Python client of raftlock, a distributed lock service with
fencing tokens.

>>> from raftlock import Client
>>> client = Client(["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"])
>>> with client.lock("orders/89041", ttl=10.0, wait=5.0) as lease:
...     lease.check()
...     store.write(..., fencing_token=lease.fencing_token)

The HTTP contract is docs/API.md of the raftlock repository.
"""

import logging

from .client import Client, Election, new_lease_id
from .clock import Clock, MonotonicClock
from .errors import (
    APIError,
    BadRequestError,
    ForbiddenError,
    FullError,
    HeldError,
    Holder,
    InternalError,
    LeaseLostError,
    LeaseReleasedError,
    LimitMismatchError,
    NoLeaderElectedError,
    NoLeaderError,
    NoSessionError,
    NotFoundError,
    NotHolderError,
    NotSupportedYetError,
    OverloadedError,
    RaftlockError,
    SessionFullError,
    SessionLostError,
    StateDivergedError,
    StorageError,
    TooLargeError,
    UnauthorizedError,
    UnavailableError,
    UnknownOutcomeError,
    UnsafeChangeError,
)
from .lease import Lease, Permit, Session
from .types import ClusterStatus, LockInfo, LockList, SemaphoreInfo, SessionInfo, SessionLease

__all__ = [
    "APIError", "BadRequestError", "Client", "Clock", "ClusterStatus", "Election", "ForbiddenError", "FullError",
    "HeldError", "Holder", "InternalError", "Lease", "LeaseLostError", "LeaseReleasedError", "LimitMismatchError",
    "LockInfo", "LockList", "MonotonicClock", "NoLeaderElectedError", "NoLeaderError", "NoSessionError",
    "NotFoundError", "NotHolderError", "NotSupportedYetError", "OverloadedError", "Permit", "RaftlockError",
    "SemaphoreInfo", "Session", "SessionFullError", "SessionInfo", "SessionLease", "SessionLostError",
    "StateDivergedError", "StorageError", "TooLargeError", "UnauthorizedError", "UnavailableError",
    "UnknownOutcomeError", "UnsafeChangeError", "new_lease_id",
]

# A library logs only where the application asked it to.
logging.getLogger("raftlock").addHandler(logging.NullHandler())
