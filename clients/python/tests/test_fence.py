"""Unit tests of the fencing guards on SQLite (standard library)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading
import unittest
from types import SimpleNamespace

from raftlock.fence import (
    InvalidTokenError,
    MemoryGuard,
    SQLGuard,
    StaleTokenError,
    advance_permit,
    fenced_update,
    slot_resource,
)


class SQLGuardTest(unittest.TestCase):
    def setUp(self) -> None:
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.path = os.path.join(d.name, "app.db")
        self.db = sqlite3.connect(self.path)
        self.addCleanup(self.db.close)
        self.guard = SQLGuard(self.db)
        self.guard.create_table()
        self.db.commit()

    def test_accepts_only_rising_tokens(self) -> None:
        self.guard.advance("r", 5)
        self.guard.advance("r", 9)
        for stale in (9, 6):
            with self.assertRaises(StaleTokenError) as cm:
                self.guard.advance("r", stale)
            self.assertEqual((cm.exception.token, cm.exception.current), (stale, 9))
        self.guard.advance("other", 1)  # per resource
        self.assertEqual(self.guard.current("r"), 9)

    def test_rolled_back_write_records_no_token(self) -> None:
        self.guard.advance("r", 5)
        self.db.commit()
        self.guard.advance("r", 7)
        self.db.rollback()  # the guarded write failed: its token is not recorded
        self.assertEqual(self.guard.current("r"), 5)
        self.guard.advance("r", 6)

    def test_invalid_tokens(self) -> None:
        for t in (0, -1, 2**63):
            with self.assertRaises(InvalidTokenError):
                self.guard.advance("r", t)

    def test_two_connections_one_winner(self) -> None:
        # The later holder commits first; the earlier one's write, in its own
        # connection, is refused, never recorded over it.
        other = sqlite3.connect(self.path, timeout=10)
        self.addCleanup(other.close)
        SQLGuard(other).advance("r", 20)
        other.commit()
        with self.assertRaises(StaleTokenError):
            self.guard.advance("r", 10)
        self.db.rollback()
        self.assertEqual(self.guard.current("r"), 20)

    def test_concurrent_writers_each_token_once(self) -> None:
        # Each accepted write appends its token to a log in the same
        # transaction, so the log's order is the commit order.
        self.db.execute("CREATE TABLE writes (seq integer PRIMARY KEY AUTOINCREMENT, token integer)")
        self.db.commit()

        def writer(tokens: range) -> None:
            conn = sqlite3.connect(self.path, timeout=30)
            g = SQLGuard(conn)
            for t in tokens:
                try:
                    g.advance("r", t)
                    conn.execute("INSERT INTO writes (token) VALUES (?)", (t,))
                    conn.commit()
                except StaleTokenError:
                    conn.rollback()
            conn.close()

        ts = [threading.Thread(target=writer, args=(range(i, 200, 4),)) for i in range(1, 5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        log = [t for (t,) in self.db.execute("SELECT token FROM writes ORDER BY seq")]
        self.assertTrue(log)
        self.assertTrue(all(a < b for a, b in zip(log, log[1:])), "every accepted token beat all before it")
        self.assertEqual(self.guard.current("r"), log[-1])

    def test_fenced_update(self) -> None:
        self.db.execute("CREATE TABLE tickets (id integer PRIMARY KEY, holder text, "
                        "last_fencing_token integer NOT NULL DEFAULT 0)")
        self.db.execute("INSERT INTO tickets (id) VALUES (402)")
        fenced_update(self.db, "tickets", 402, 16, "holder = ?", ("worker-b",))
        with self.assertRaises(StaleTokenError) as cm:
            fenced_update(self.db, "tickets", 402, 7, "holder = ?", ("worker-a",))
        self.assertEqual(cm.exception.current, 16)
        self.assertEqual(self.db.execute("SELECT holder FROM tickets").fetchone(), ("worker-b",))
        with self.assertRaises(LookupError):
            fenced_update(self.db, "tickets", 403, 20, "holder = ?", ("x",))

    def test_identifiers_are_checked(self) -> None:
        with self.assertRaises(ValueError):
            SQLGuard(self.db, table="t; DROP TABLE x")
        self.assertIn('"app"."tokens"', SQLGuard(self.db, table="app.tokens", dialect="postgres").advance_sql)
        self.assertIn("%s", SQLGuard(self.db, dialect="postgres").advance_sql)


class PermitFenceTest(unittest.TestCase):
    def test_slot_resource_and_advance_permit(self) -> None:
        self.assertEqual(slot_resource("printers", 1), "semaphore:printers#1")
        g = MemoryGuard()
        advance_permit(g, SimpleNamespace(name="printers", slot=0, fencing_token=30))
        advance_permit(g, SimpleNamespace(name="printers", slot=1, fencing_token=10))  # its own slot
        with self.assertRaises(StaleTokenError):
            advance_permit(g, SimpleNamespace(name="printers", slot=0, fencing_token=20))


if __name__ == "__main__":
    unittest.main()


def _pg() -> tuple[object, str] | None:
    """psycopg and the DSN of a test PostgreSQL (scripts/pg.sh start prints
    RAFTLOCK_TEST_PG_DSN), when both are there."""
    dsn = os.environ.get("RAFTLOCK_TEST_PG_DSN", "")
    try:
        import psycopg  # type: ignore[import-not-found]
    except ImportError:
        return None
    return (psycopg, dsn) if dsn else None


@unittest.skipUnless(_pg(), "needs psycopg and RAFTLOCK_TEST_PG_DSN (export \"$(scripts/pg.sh start)\")")
class PostgresGuardTest(unittest.TestCase):
    def setUp(self) -> None:
        psycopg, dsn = _pg()  # type: ignore[misc]
        self.db = psycopg.connect(dsn)  # type: ignore[attr-defined]
        self.addCleanup(self.db.close)
        self.table = f"fence_py_{os.getpid()}"
        self.guard = SQLGuard(self.db, table=self.table, dialect="postgres")
        self.guard.create_table()
        self.db.commit()

        def drop() -> None:
            self.db.rollback()
            self.db.execute(f'DROP TABLE IF EXISTS "{self.table}"')
            self.db.execute('DROP TABLE IF EXISTS "tickets_py"')
            self.db.commit()

        self.addCleanup(drop)

    def test_accepts_only_rising_tokens(self) -> None:
        self.guard.advance("r", 5)
        self.guard.advance("r", 9)
        self.db.commit()
        with self.assertRaises(StaleTokenError) as cm:
            self.guard.advance("r", 9)
        self.assertEqual(cm.exception.current, 9)
        self.db.rollback()
        self.guard.advance("r", 10)
        self.db.rollback()  # rolled back: not recorded
        self.assertEqual(self.guard.current("r"), 9)

    def test_fenced_update(self) -> None:
        self.db.execute('CREATE TABLE "tickets_py" (id int PRIMARY KEY, holder text, '
                        "last_fencing_token bigint NOT NULL DEFAULT 0)")
        self.db.execute('INSERT INTO "tickets_py" (id) VALUES (402)')
        fenced_update(self.db, "tickets_py", 402, 16, "holder = %s", ("worker-b",), dialect="postgres")
        with self.assertRaises(StaleTokenError):
            fenced_update(self.db, "tickets_py", 402, 7, "holder = %s", ("worker-a",), dialect="postgres")
