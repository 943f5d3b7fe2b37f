"""What the throw-away database servers of the tests share: an OS user to run them as when this process is root,
directories that user may traverse, and a watchdog that stops a server whose owner died without stopping it."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

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
