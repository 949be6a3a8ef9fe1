"""Test doubles: a clock that moves only when told, and fake raftlock nodes
(http.server in a thread) whose answers the test scripts."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeClock:
    """A raftlock Clock that moves only on advance(). wait() returns when its
    event is set or the fake time reaches its deadline."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._cond = threading.Condition()
        self._waiters: list[list[float]] = []

    def now(self) -> float:
        with self._cond:
            return self._now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        with self._cond:
            entry = [self._now + timeout]
            if timeout > 0:
                self._waiters.append(entry)
            try:
                # The event may be set by code that knows nothing of this
                # clock: look at it often (in real time) as well.
                while not event.is_set() and self._now < entry[0]:
                    self._cond.wait(0.002)
                return event.is_set()
            finally:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def advance(self, d: float) -> None:
        with self._cond:
            self._now += d
            # Fired timers leave pending() at once, not when their thread wakes.
            self._waiters = [w for w in self._waiters if w[0] > self._now]
            self._cond.notify_all()

    def pending(self) -> list[float]:
        """How long until each waiter's deadline, soonest first."""
        with self._cond:
            return sorted(w[0] - self._now for w in self._waiters)

    def drive(self, t: threading.Thread, timeout: float = 10.0) -> None:
        """Advances the clock to each timer of the waiting code in turn, until
        thread t ends (real time bounded by timeout)."""
        end = time.monotonic() + timeout
        while t.is_alive():
            if time.monotonic() > end:
                raise AssertionError("fake clock: the thread did not end")
            p = self.pending()
            if p:
                self.advance(max(p[0], 0.0))
            t.join(0.002)

    def wait_for(self, pred: Callable[[list[float]], bool], timeout: float = 10.0) -> list[float]:
        """Waits (real time, bounded) until pred(pending()) holds."""
        end = time.monotonic() + timeout
        while True:
            p = self.pending()
            if pred(p):
                return p
            if time.monotonic() > end:
                raise AssertionError(f"fake clock: condition not reached; pending {p}")
            time.sleep(0.002)


@dataclass
class Seen:
    method: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    before: Callable[[], None] | None = None
    """Runs before the answer is sent (block, move a fake clock, ...)."""
    drop: bool = False
    """Close the connection without answering."""


Responder = Callable[[Seen], Answer]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out or are cancelled reset their connections


class FakeNode:
    """A fake raftlock node. Answers come from per-path queues of Answers
    (script), then from a default responder; every request is recorded in
    seen (a queue) and log (a list)."""

    def __init__(self, node_id: str, leader: str = "") -> None:
        self.node_id = node_id
        self.leader = leader or node_id
        self.log: list[Seen] = []
        self.seen: queue.Queue[Seen] = queue.Queue()
        self._scripts: dict[str, list[Answer | Responder]] = {}
        self._mu = threading.Lock()
        self.default: Responder = self._default
        self.token = 0
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                s = Seen(self.command, self.path, json.loads(raw) if raw else {}, dict(self.headers))
                ans = node._answer(s)
                with node._mu:
                    node.log.append(s)
                node.seen.put(s)
                if ans.before is not None:
                    ans.before()
                if ans.drop:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                data = json.dumps(ans.body).encode()
                self.send_response(ans.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Raftlock-Node", node.node_id)
                if node.leader:
                    self.send_header("X-Raftlock-Leader", node.leader)
                for k, v in ans.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (a test of its timeout)

            do_GET = do_POST = _handle

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def script(self, path: str, *answers: Answer | Responder) -> None:
        """Queues answers for requests to path (without query string)."""
        with self._mu:
            self._scripts.setdefault(path, []).extend(answers)

    def _answer(self, s: Seen) -> Answer:
        path = s.path.split("?", 1)[0]
        with self._mu:
            q = self._scripts.get(path)
            a = q.pop(0) if q else None
        if a is None:
            return self.default(s)
        return a if isinstance(a, Answer) else a(s)

    def _default(self, s: Seen) -> Answer:
        """A well-behaved leader: grants every acquire and renew."""
        path = s.path.split("?", 1)[0]
        b = s.body
        if path in ("/v1/locks/acquire", "/v1/locks/renew"):
            if path.endswith("acquire"):
                self.token += 1
            return Answer(200, {"name": b["name"], "lease_id": b["lease_id"], "fencing_token": self.token or 1,
                                "ttl_ms": b.get("ttl_ms", 10000), "owner": b.get("owner", "")})
        if path == "/v1/locks/release":
            return Answer(200, {"released": True})
        if path == "/v1/cluster":
            return Answer(200, {"id": self.node_id, "leader": self.leader, "nodes": []})
        if path in ("/v1/sessions", "/v1/sessions/renew"):
            return Answer(200, {"session_id": b["session_id"], "ttl_ms": b.get("ttl_ms", 10000), "lock_delay_ms": 0})
        if path == "/v1/sessions/close":
            return Answer(200, {"closed": True, "released": 0})
        return Answer(404, {"error": "not_found", "message": "no such endpoint"})

    def requests(self, path: str) -> list[Seen]:
        with self._mu:
            return [s for s in self.log if s.path.split("?", 1)[0] == path]

    def next(self, path: str, timeout: float = 10.0) -> Seen:
        """Waits (bounded) for the next request to path."""
        end = time.monotonic() + timeout
        while True:
            try:
                s = self.seen.get(timeout=max(end - time.monotonic(), 0.001))
            except queue.Empty:
                raise AssertionError(f"{self.node_id}: no request to {path} within {timeout}s") from None
            if s.path.split("?", 1)[0] == path:
                return s

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def error(status: int, code: str, retry_after: str | None = None, **extra: Any) -> Answer:
    h = {"Retry-After": retry_after} if retry_after is not None else {}
    return Answer(status, {"error": code, "message": code.replace("_", " "), **extra}, h)
