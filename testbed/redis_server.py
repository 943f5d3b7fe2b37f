"""A real, throw-away Redis server for tests: Debian's ``redis-server``, the broker of the CeleryExecutor tests.

``RedisServer`` runs ``redis-server`` on a free port of 127.0.0.1 only (never another interface), keeping nothing
on disk (no snapshots, no append-only file), behind a password::

    with RedisServer(tmp_path / "redis") as redis:
        redis.url(0)  # redis://:PASSWORD@127.0.0.1:PORT/0, for Celery's broker_url

The server is started with ``--daemonize no`` in a session of its own, and a watchdog stops it if this process dies
without stopping it (a server that is its own session leader would outlive the test run).
"""

from __future__ import annotations

import secrets
import shutil
import socket
from pathlib import Path
from typing import Self

from testbed.server_process import LoopbackServer

HOST = "127.0.0.1"
LOG_FILE = "redis.log"


class RedisServerError(RuntimeError):
    """redis-server is missing, did not start, or survived its stop."""


class RedisServer(LoopbackServer):
    """Debian's redis-server on 127.0.0.1, password-protected, in memory only."""

    what = "redis-server"
    error = RedisServerError

    def __init__(self, directory: Path, *, start_timeout: float = 30.0) -> None:
        super().__init__(Path(directory) / LOG_FILE, start_timeout)
        self.directory = Path(directory)
        self.password = secrets.token_hex(16)
        self._binary = ""

    def url(self, database: int = 0) -> str:
        """A ``redis://`` URL of one of the server's numbered databases, with the password."""
        return f"redis://:{self.password}@{HOST}:{self.port}/{database}"

    def start(self) -> Self:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError("redis-server not found: install Debian's redis-server (scripts/setup.sh does)")
        self._binary = binary
        self.directory.mkdir(parents=True, exist_ok=True)
        self._launch()
        return self

    def _command(self, port: int) -> list[str]:
        return [
            self._binary, "--bind", HOST, "--port", str(port), "--requirepass", self.password, "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--dir", str(self.directory), "--protected-mode", "yes",
        ]  # fmt: skip

    def _answers(self) -> bool:
        return self.ping()

    def ping(self) -> bool:
        """True when the server answers an authenticated PING (RESP spoken by hand: the test needs no client)."""
        try:
            with socket.create_connection((HOST, self.port), timeout=2) as conn:
                conn.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                answer = b""
                while answer.count(b"\r\n") < 2:
                    chunk = conn.recv(256)
                    if not chunk:
                        break
                    answer += chunk
                return answer == b"+OK\r\n+PONG\r\n"
        except OSError:
            return False

    def __repr__(self) -> str:
        return f"RedisServer({HOST}:{self._port})"
