"""What the throw-away servers of the tests share: an OS user to run them as when this process is root, directories
that user may traverse, a watchdog that stops a server whose owner died without stopping it, and the life cycle of a
server on a free loopback port (``LoopbackServer``)."""

from __future__ import annotations

import atexit
import grp
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

# Runs as ``python -c _WATCHDOG OWNER_PID SERVER_PID SIGNAL``: polls until the owner is gone (we get reparented),
# then asks the server to shut down with SIGNAL; exits when the server is gone.
_WATCHDOG = """
import os, signal, sys, time
owner, server, stop = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
while True:
    try:  # gone, or a zombie nobody reaps (not every container init does)
        with open(f"/proc/{server}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                break
    except (OSError, IndexError):
        break
    if os.getppid() != owner:
        os.kill(server, stop)
    time.sleep(0.5)
"""


class ServerUserError(RuntimeError):
    """The OS user to run a server as cannot be created."""


def start_watchdog(server_pid: int, stop: signal.Signals) -> subprocess.Popen[bytes]:
    """A process that sends ``stop`` to ``server_pid`` once this process is gone. atexit does not run on
    SIGTERM/SIGKILL (e.g. CI's ``timeout``), and a server that is its own session leader would outlive us."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(server_pid), str(int(stop))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survive the terminal's Ctrl-C with us
    )


def pid_alive(pid: int) -> bool:
    """True unless ``pid`` is gone or a zombie."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def ensure_os_user(name: str, *, home: str, shell: str, purpose: str) -> pwd.struct_passwd:
    """The OS user ``name``, created as a system user (with its group) if missing; ``purpose`` says why, for the
    error when it cannot be created."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    args = [useradd, "--system", "--home-dir", home, "--no-create-home", "--shell", shell]
    try:
        grp.getgrnam(name)
        args += ["--gid", name]
    except KeyError:
        args.append("--user-group")
    result = subprocess.run([*args, name], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServerUserError(f"cannot create OS user {name!r} to run {purpose}: {result.stderr.strip()}")
    return pwd.getpwnam(name)


def grant_traverse(directory: Path, uid: int, gid: int) -> None:
    """Give ``uid`` search (x, not read) permission on ``directory`` and its ancestors."""
    for path in [directory, *directory.parents]:
        st = path.stat()
        if st.st_uid == uid:
            can = st.st_mode & stat.S_IXUSR
        elif st.st_gid == gid:
            can = st.st_mode & stat.S_IXGRP
        else:
            can = st.st_mode & stat.S_IXOTH
        if not can:
            path.chmod(stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


class LoopbackServer:
    """A test's server process on a free port of 127.0.0.1, in a session of its own (a test's Ctrl-C or killpg does not
    reach it; ``stop()`` does) and watched (``start_watchdog``). Subclasses name the server and its error, say how to
    launch it on a port and when it answers, and call ``_launch`` from their ``start``; they are context managers."""

    #: The server's name in errors.
    what: ClassVar[str]
    #: The error a subclass raises.
    error: ClassVar[type[Exception]]

    def __init__(self, log_path: Path, start_timeout: float) -> None:
        self.log_path = log_path
        self.start_timeout = start_timeout
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise self.error("server not started yet: no port")
        return self._port

    @property
    def pid(self) -> int:
        """The server's process id (benchmarks measure its CPU time)."""
        if self._process is None:
            raise self.error("server not started")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _command(self, port: int) -> list[str]:
        """The command line that serves on ``port``."""
        raise NotImplementedError

    def _answers(self) -> bool:
        """Whether the started server answers yet (``self.port`` is its port)."""
        raise NotImplementedError

    def _launch(self, env: Mapping[str, str] | None = None) -> None:
        """Start the server on a free port, on another when it does not answer (another process may take the port
        between our probe and its bind), five times at most; then watch it."""
        from testbed.ports import find_free_port

        for _ in range(5):
            self._port = find_free_port("127.0.0.1")
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    self._command(self._port), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=None if env is None else dict(env), start_new_session=True,
                )  # fmt: skip
            if self._wait_ready():
                break
            self._terminate()
        else:
            raise self.error(f"{self.what} did not start:\n{self.log_path.read_text(errors='replace')[-2000:]}")
        assert self._process is not None
        atexit.register(self.stop)
        self._watchdog = start_watchdog(self._process.pid, signal.SIGTERM)

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                return False
            if self._answers():
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
            raise self.error(f"{self.what} (pid {pid}) survived its stop")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Self:
        raise NotImplementedError
