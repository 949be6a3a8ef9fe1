"""Fencing: storage that refuses writes made with a stale fencing token.

A lock protects nothing until the storage a holder writes to checks its
token: a holder paused past its lease (a GC pause, a SIGSTOP, a slow network)
still believes it holds the lock when it resumes. The storage must refuse a
write whose token is not higher than the highest it has accepted for the same
resource, and record the new highest token in the same atomic step. Checking
and recording in two steps would let two writers both pass the check, so
there is deliberately no read-only check here.

- :class:`SQLGuard` keeps the highest token per resource in a table, through
  any DB-API connection: ``sqlite3`` from the standard library, or psycopg
  (PostgreSQL). Call ``advance`` inside the transaction that does the write
  it guards, so that both commit or neither does.
- :func:`fenced_update` is a conditional update of a business row that
  carries its own token column.
- :class:`MemoryGuard` is the same in a dict, for tests and one process.
- :func:`slot_resource` names a semaphore slot, which is what a permit's
  token is fenced per.

Tokens are accepted once per resource: a holder that writes one resource
twice under one lease has its second write refused. Fence per write with a
distinct resource, or use fenced_update, whose check is ``<`` on the row.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Protocol

from .errors import RaftlockError

MAX_TOKEN = 2**63 - 1
"""The highest token a guard accepts (a bigint column holds it)."""

DEFAULT_TABLE = "fencing_tokens"


class StaleTokenError(RaftlockError):
    """A write refused because a token at least as high was accepted for the
    resource already."""

    def __init__(self, resource: str, token: int, current: int) -> None:
        self.resource, self.token, self.current = resource, token, current
        super().__init__(
            f"fence: stale fencing token {token} for {resource!r}: token {current} was already accepted"
        )


class InvalidTokenError(RaftlockError, ValueError):
    """Token 0 or above MAX_TOKEN: raftlock never issues them."""


def _valid(token: int) -> None:
    if not isinstance(token, int) or token < 1 or token > MAX_TOKEN:
        raise InvalidTokenError(f"fence: invalid fencing token {token!r}: not in 1..{MAX_TOKEN}")


class Guard(Protocol):
    def advance(self, resource: str, token: int) -> None:
        """Accepts token for resource if it is higher than every token
        accepted for resource before, recording it, atomically; otherwise
        records nothing and raises StaleTokenError."""
        ...


class MemoryGuard:
    """A Guard kept in a dict, safe for threads."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._last: dict[str, int] = {}

    def advance(self, resource: str, token: int) -> None:
        _valid(token)
        with self._mu:
            cur = self._last.get(resource, 0)
            if token <= cur:
                raise StaleTokenError(resource, token, cur)
            self._last[resource] = token

    def current(self, resource: str) -> int:
        with self._mu:
            return self._last.get(resource, 0)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _ident(name: str) -> str:
    """Quotes a possibly schema-qualified identifier."""
    parts = name.split(".")
    for p in parts:
        if not _IDENT.match(p):
            raise ValueError(f"fence: bad SQL identifier {name!r}")
    return ".".join(f'"{p}"' for p in parts)


def _placeholder(dialect: str) -> str:
    if dialect == "sqlite":
        return "?"
    if dialect == "postgres":
        return "%s"
    raise ValueError(f"fence: unknown dialect {dialect!r} (sqlite or postgres)")


class SQLGuard:
    """A Guard over a table ``(resource text PRIMARY KEY, last_token bigint NOT
    NULL)`` through a DB-API connection: ``dialect="sqlite"`` for sqlite3
    (3.24 or later), ``"postgres"`` for psycopg. The check and the record are
    one statement (INSERT ... ON CONFLICT DO UPDATE ... WHERE last_token <
    new), so they are atomic; inside the caller's transaction, a concurrent
    writer of the same resource waits for it and then sees its outcome.

    advance() does not commit: commit the transaction that holds the guarded
    write, or roll it back after a StaleTokenError.
    """

    def __init__(self, conn: Any, table: str = DEFAULT_TABLE, dialect: str = "sqlite") -> None:
        self.conn = conn
        p = _placeholder(dialect)
        t = _ident(table)
        self.create_sql = f"CREATE TABLE IF NOT EXISTS {t} (resource text PRIMARY KEY, last_token bigint NOT NULL)"
        self.advance_sql = (
            f"INSERT INTO {t} AS f (resource, last_token) VALUES ({p}, {p}) "
            f"ON CONFLICT (resource) DO UPDATE SET last_token = excluded.last_token "
            f"WHERE f.last_token < excluded.last_token"
        )
        self.current_sql = f"SELECT last_token FROM {t} WHERE resource = {p}"

    def create_table(self) -> None:
        cur = self.conn.cursor()
        try:
            cur.execute(self.create_sql)
        finally:
            cur.close()

    def advance(self, resource: str, token: int) -> None:
        _valid(token)
        cur = self.conn.cursor()
        try:
            cur.execute(self.advance_sql, (resource, token))
            if cur.rowcount == 1:
                return
            # Refused. The current token is read only for the error.
            cur.execute(self.current_sql, (resource,))
            row = cur.fetchone()
        finally:
            cur.close()
        raise StaleTokenError(resource, token, int(row[0]) if row else 0)

    def current(self, resource: str) -> int:
        cur = self.conn.cursor()
        try:
            cur.execute(self.current_sql, (resource,))
            row = cur.fetchone()
        finally:
            cur.close()
        return int(row[0]) if row else 0


def fenced_update(
    conn: Any,
    table: str,
    row_id: Any,
    token: int,
    set_sql: str,
    params: tuple[Any, ...] = (),
    *,
    id_column: str = "id",
    token_column: str = "last_fencing_token",
    dialect: str = "sqlite",
) -> None:
    """Updates one business row only if token is higher than the token that
    last wrote it, and records token there, in one statement::

        UPDATE t SET <set_sql>, last_fencing_token = :token
         WHERE id = :row_id AND last_fencing_token < :token

    set_sql uses the dialect's placeholders for params. Raises
    StaleTokenError when the row was written with a token at least as high
    (or LookupError when there is no such row). Does not commit.
    """
    _valid(token)
    p = _placeholder(dialect)
    t, idc, tokc = _ident(table), _ident(id_column), _ident(token_column)
    update = f"UPDATE {t} SET {set_sql}, {tokc} = {p} WHERE {idc} = {p} AND {tokc} < {p}"
    cur = conn.cursor()
    try:
        cur.execute(update, (*params, token, row_id, token))
        if cur.rowcount > 0:
            return
        cur.execute(f"SELECT {tokc} FROM {t} WHERE {idc} = {p}", (row_id,))
        row = cur.fetchone()
    finally:
        cur.close()
    if row is None:
        raise LookupError(f"fence: no row {row_id!r} in {table}")
    raise StaleTokenError(f"{table}/{row_id}", token, int(row[0]))


def slot_resource(semaphore: str, slot: int) -> str:
    """The resource a semaphore permit's writes are fenced under:
    ``semaphore:<name>#<slot>``. A permit's token is larger than every
    earlier token of its slot, not of the semaphore (permits held at once
    have tokens in no useful order), so fence per slot."""
    return f"semaphore:{semaphore}#{slot}"


def advance_permit(guard: Guard, permit: Any) -> None:
    """Fences a write made with a semaphore permit: advances guard for the
    permit's (semaphore, slot) to its token."""
    guard.advance(slot_resource(permit.name, permit.slot), permit.fencing_token)
