"""A real three-node raftlock cluster for the integration tests.

The binary is built once per run (``go build -o <tmp>/raftlock ./cmd/raftlock``
from the repository root) unless RAFTLOCK_BIN names one. Nodes listen on
free loopback ports with data dirs in a temporary directory, with short
election timeouts, and are killed when the cluster is closed.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_built: str | None = None


def binary() -> str:
    """The raftlock binary: RAFTLOCK_BIN, or one built once for this run."""
    global _built
    if os.environ.get("RAFTLOCK_BIN"):
        return os.environ["RAFTLOCK_BIN"]
    if _built is None:
        d = tempfile.mkdtemp(prefix="raftlock-pybin-")
        atexit.register(shutil.rmtree, d, True)
        out = os.path.join(d, "raftlock")
        subprocess.run(["go", "build", "-o", out, "./cmd/raftlock"], cwd=ROOT, check=True)
        _built = out
    return _built


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get_json(url: str, timeout: float = 1.0) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}
    except (OSError, ValueError):
        return 0, {}


@dataclass
class Node:
    id: str
    http_port: int
    raft_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None
    stopped: bool = False
    peers: str = ""
    flags: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """Three `raftlock serve` processes; close() kills them."""

    FLAGS = ["--election-timeout", "500ms", "--heartbeat-timeout", "500ms", "--log-level", "debug"]

    def __init__(self, n: int = 3) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="raftlock-pytest-"))
        ports = free_ports(2 * n)
        self.nodes = [
            Node(f"n{i + 1}", ports[2 * i], ports[2 * i + 1], self.dir / f"n{i + 1}", self.dir / f"n{i + 1}.log")
            for i in range(n)
        ]
        peers = ",".join(f"{x.id}=127.0.0.1:{x.raft_port}" for x in self.nodes)
        for x in self.nodes:
            x.peers = peers
        try:
            for x in self.nodes:
                self.start(x)
            self.wait_leader()
        except BaseException:
            self.close()
            raise

    @property
    def endpoints(self) -> list[str]:
        return [x.endpoint for x in self.nodes]

    def start(self, x: Node) -> None:
        x.data_dir.mkdir(parents=True, exist_ok=True)
        with open(x.log_path, "ab") as logf:
            x.proc = subprocess.Popen(
                [binary(), "serve", "--id", x.id, "--data-dir", str(x.data_dir),
                 "--http-addr", f"127.0.0.1:{x.http_port}", "--raft-addr", f"127.0.0.1:{x.raft_port}",
                 "--peers", x.peers, *self.FLAGS],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env={k: v for k, v in os.environ.items() if not k.startswith("RAFTLOCK_")},
            )
        x.stopped = False

    def node(self, node_id: str) -> Node:
        return next(x for x in self.nodes if x.id == node_id)

    def wait_leader(self, timeout: float = 30.0, exclude: set[str] | None = None) -> Node:
        """Waits until every running node names the same leader (not one of
        exclude), and that leader is ready; returns it."""
        exclude = exclude or set()
        end = time.monotonic() + timeout
        while True:
            running = [x for x in self.nodes if x.alive() and not x.stopped]
            views = [_get_json(x.url + "/v1/cluster")[1].get("leader", "") for x in running]
            if views and views[0] and views[0] not in exclude and all(v == views[0] for v in views):
                leader = self.node(views[0])
                if _get_json(leader.url + "/readyz")[0] == 200:
                    return leader
            for x in self.nodes:
                if x.proc is not None and x.proc.poll() is not None and not x.stopped and x.id not in exclude:
                    raise RuntimeError(f"{x.id} exited:\n{self.log_tail(x)}")
            if time.monotonic() > end:
                raise TimeoutError(f"no leader agreed on by {[x.id for x in running]} after {timeout}s: {views}")
            time.sleep(0.05)

    def leader(self) -> Node:
        return self.wait_leader()

    def kill(self, x: Node) -> None:
        """SIGKILL, and reap."""
        if x.alive():
            x.proc.kill()  # type: ignore[union-attr]
            x.proc.wait()  # type: ignore[union-attr]

    def pause(self, x: Node) -> None:
        os.kill(x.pid, signal.SIGSTOP)
        x.stopped = True

    def resume(self, x: Node) -> None:
        os.kill(x.pid, signal.SIGCONT)
        x.stopped = False

    def log_tail(self, x: Node, n: int = 20) -> str:
        try:
            return "\n".join(x.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        for x in self.nodes:
            if x.proc is not None:
                if x.stopped and x.alive():
                    os.kill(x.pid, signal.SIGCONT)
                self.kill(x)
        if os.environ.get("RAFTLOCK_KEEP_TEST_DIRS"):
            print(f"cluster dir kept: {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
