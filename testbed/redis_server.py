"""A real, throw-away Redis server for tests: Debian's ``redis-server``, the broker of the CeleryExecutor tests.

``RedisServer`` runs ``redis-server`` on a free port of 127.0.0.1 only (never another interface), keeping nothing
on disk (no snapshots, no append-only file), behind a password::

    with RedisServer(tmp_path / "redis") as redis:
        redis.url(0)  # redis://:PASSWORD@127.0.0.1:PORT/0, for Celery's broker_url

The server is started with ``--daemonize no`` in a session of its own, and a watchdog stops it if this process dies
without stopping it (a server that is its own session leader would outlive the test run).
"""

from __future__ import annotations

import atexit
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from testbed.ports import find_free_port
from testbed.server_process import pid_alive, start_watchdog

HOST = "127.0.0.1"
LOG_FILE = "redis.log"


class RedisServerError(RuntimeError):
    """redis-server is missing, did not start, or survived its stop."""


class RedisServer:
    """Debian's redis-server on 127.0.0.1, password-protected, in memory only."""

    def __init__(self, directory: Path, *, start_timeout: float = 30.0) -> None:
        self.directory = Path(directory)
        self.start_timeout = start_timeout
        self.password = secrets.token_hex(16)
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("server not started yet: no port")
        return self._port

    def url(self, database: int = 0) -> str:
        """A ``redis://`` URL of one of the server's numbered databases, with the password."""
        return f"redis://:{self.password}@{HOST}:{self.port}/{database}"

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    def start(self) -> Self:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError("redis-server not found: install Debian's redis-server (scripts/setup.sh does)")
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            self._port = find_free_port(HOST)
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    [binary, "--bind", HOST, "--port", str(self._port), "--requirepass", self.password,
                     "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(self.directory),
                     "--protected-mode", "yes"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,  # a test's Ctrl-C or killpg does not reach it; stop() does
                )  # fmt: skip
            if self._wait_ready():
                break
            self._terminate()  # another process may have taken the port between our probe and its bind
        else:
            raise RedisServerError(f"redis-server did not start:\n{self.log_path.read_text(errors='replace')[-2000:]}")
        assert self._process is not None
        atexit.register(self.stop)
        self._watchdog = start_watchdog(self._process.pid, signal.SIGTERM)
        return self

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

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            if self.ping():
                return True
            time.sleep(0.1)
        return False

    def _terminate(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None

    def stop(self) -> None:
        pid = None if self._process is None else self._process.pid
        self._terminate()
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=5)  # it exits once the server is gone
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait(timeout=5)
            self._watchdog = None
        atexit.unregister(self.stop)
        if pid is not None and pid_alive(pid):
            raise RedisServerError(f"redis-server (pid {pid}) survived its stop")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisServer({HOST}:{self._port})"
