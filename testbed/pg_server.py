"""A real, throw-away PostgreSQL server for tests and benchmarks.

``PostgresServer`` runs ``initdb`` into a directory, starts the server with
``pg_ctl -w`` on a free port on 127.0.0.1 (never on another interface), and
creates one database owned by a password-authenticated superuser::

    with PostgresServer(tmp_path / "pgdata") as pg:
        with pg.connect() as conn:
            conn.execute("select 1")
        print(pg.dsn)  # postgresql://tiering:...@127.0.0.1:PORT/tiering

The settings trade durability for speed (``fsync=off`` and friends): never
point it at data you want to keep.

Root handling: ``initdb`` and ``postgres`` refuse to run as root. When this
process is root, every server binary is run as the ``postgres`` OS user
(created with ``useradd --system`` if missing) through
``subprocess``' ``user=``/``group=``/``extra_groups=`` (setuid in the child;
no PAM or ``runuser`` needed), the data directory is ``chown``-ed to that
user, and any ancestor directory that user cannot traverse (pytest's
``/tmp/pytest-of-root`` is ``0700``) gets the search bit ``o+x`` (not read).
When this process is not root the binaries run as the current user.

A directory that already holds a cluster (``PG_VERSION`` present) is reused:
``initdb`` is skipped, and the port and settings are rewritten on each start,
so a data set loaded once can survive across runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import psycopg
from psycopg import sql

from testbed.ports import find_free_port
from testbed.server_process import ServerUserError, ensure_os_user, grant_traverse, pid_alive, start_watchdog

PG_LIB_ROOT = Path("/usr/lib/postgresql")
OS_USER = "postgres"
DEFAULT_USER = "tiering"
DEFAULT_PASSWORD = "tiering-test-password"
DEFAULT_DBNAME = "tiering"
# Our settings live in their own file, included from postgresql.conf and
# rewritten on every start (the port may change between starts).
SETTINGS_FILE = "tiering_test.conf"
LOG_FILE = "postgres.log"
# sockaddr_un.sun_path is 108 bytes on Linux, including the NUL.
_MAX_SOCKET_PATH = 107


class PostgresNotInstalledError(RuntimeError):
    """No PostgreSQL server binaries were found."""


class PostgresServerError(RuntimeError):
    """initdb, pg_ctl or the server failed."""


def find_pg_bindir() -> Path:
    """The ``bin`` directory of the newest PostgreSQL under /usr/lib/postgresql.

    ``PG_BINDIR`` in the environment overrides the search.
    """
    override = os.environ.get("PG_BINDIR")
    candidates: list[tuple[tuple[int, ...], Path]] = []
    if override:
        candidates.append(((10**6,), Path(override)))
    if PG_LIB_ROOT.is_dir():
        for entry in PG_LIB_ROOT.iterdir():
            if re.fullmatch(r"\d+(\.\d+)*", entry.name):
                version = tuple(int(part) for part in entry.name.split("."))
                candidates.append((version, entry / "bin"))
    for _, bindir in sorted(candidates, reverse=True):
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise PostgresNotInstalledError(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in "
        f"{PG_LIB_ROOT}/*/bin"
        + (f" nor in PG_BINDIR={override}" if override else "")
        + ". Install the server, e.g. `apt-get install postgresql-15` "
        "(Debian), or set PG_BINDIR to the directory holding initdb."
    )


def pg_major_version(bindir: Path) -> int:
    """Major version of the server in ``bindir``, from ``postgres --version``."""
    out = subprocess.run(
        [str(bindir / "postgres"), "--version"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"(\d+)(?:\.\d+)?", out)
    if not match:
        raise PostgresServerError(f"cannot parse postgres --version output: {out!r}")
    return int(match.group(1))


def default_shared_buffers() -> str:
    """An eighth of RAM, between 128 MB and 4 GB (3 GB on a 24 GiB machine).

    The usual "25% of RAM" assumes a dedicated database host; this server
    shares the machine with Spark/Airflow, and the OS page cache still
    serves whatever does not fit.
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "512MB"
    mib = total // (8 * 1024 * 1024)
    return f"{max(128, min(mib, 4096))}MB"


def _quote_conf(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


class PostgresServer:
    """A throw-away PostgreSQL server in ``datadir``; a context manager.

    Args:
        datadir: the cluster directory (PGDATA); created if missing.
        user / password: the bootstrap superuser (scram-sha-256 over TCP).
        dbname: a database created (if missing) after start.
        port: fixed TCP port; ``None`` picks a free one.
        shared_buffers: e.g. ``"3GB"``; ``None`` uses ``default_shared_buffers()``.
        settings: extra or overriding ``postgresql.conf`` settings, e.g.
            ``{"wal_level": "minimal", "max_wal_senders": 0}``.
        start_timeout: seconds ``pg_ctl -w`` waits for start/stop.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        datadir: Path | str,
        *,
        user: str = DEFAULT_USER,
        password: str = DEFAULT_PASSWORD,
        dbname: str = DEFAULT_DBNAME,
        port: int | None = None,
        shared_buffers: str | None = None,
        settings: Mapping[str, object] | None = None,
        start_timeout: int = 60,
    ) -> None:
        self.datadir = Path(datadir).absolute()
        self._user = user
        self._password = password
        self._dbname = dbname
        self._fixed_port = port
        self._port: int | None = port
        self._shared_buffers = shared_buffers or default_shared_buffers()
        self._extra_settings = dict(settings or {})
        self._start_timeout = start_timeout
        self.bindir = find_pg_bindir()
        self.major_version = pg_major_version(self.bindir)
        self._as_root = os.geteuid() == 0
        self._running = False
        self._atexit_registered = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        #: seconds spent in the last start(): initdb (if any) + pg_ctl start + createdb
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- properties
    @property
    def port(self) -> int:
        if self._port is None:
            raise PostgresServerError("server not started yet: no port")
        return self._port

    @property
    def user(self) -> str:
        return self._user

    @property
    def password(self) -> str:
        return self._password

    @property
    def dbname(self) -> str:
        return self._dbname

    @property
    def dsn(self) -> str:
        """libpq URI ``postgresql://user:pass@127.0.0.1:port/dbname``."""
        return self.dsn_for(self._dbname)

    def dsn_for(self, dbname: str) -> str:
        """The same URI for another database on this server."""
        return (
            f"postgresql://{quote(self._user, safe='')}:{quote(self._password, safe='')}"
            f"@{self.host}:{self.port}/{quote(dbname, safe='')}"
        )

    @property
    def log_path(self) -> Path:
        return self.datadir / LOG_FILE

    @property
    def running(self) -> bool:
        return self._running

    def connect(self, dbname: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A new psycopg connection over TCP with the password (caller closes it)."""
        return psycopg.connect(self.dsn_for(dbname or self._dbname), **kwargs)

    def create_role(self, name: str, password: str, grants: Iterable[str] = ()) -> str:
        """Create (or reset) the login role ``name`` with exactly ``grants`` in this database; returns its URI.

        Each grant is the part of a ``GRANT`` statement before ``TO``, e.g. ``"SELECT ON public.orders"`` or
        ``"pg_read_all_stats"`` (a role). An existing role gets the new password and loses its privileges on
        this database's tables and its predefined roles, so repeated runs on a reused data directory agree.
        """
        role = sql.Identifier(name)
        with self.connect(autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            if exists is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(password)))
            else:
                conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(password)))
                conn.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {}").format(role))
                conn.execute(sql.SQL("REVOKE pg_read_all_stats, pg_read_all_data FROM {}").format(role))
            for grant in grants:
                conn.execute(sql.SQL(f"GRANT {grant} TO {{}}").format(role))  # type: ignore[arg-type]
        return (
            f"postgresql://{quote(name, safe='')}:{quote(password, safe='')}"
            f"@{self.host}:{self.port}/{quote(self._dbname, safe='')}"
        )

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        """initdb (unless already initialised), start, create the database."""
        if self._running:
            return self
        began = time.perf_counter()
        self._prepare_os_user_and_dir()
        if not (self.datadir / "PG_VERSION").exists():
            self._initdb()
        attempts = 1 if self._fixed_port is not None else 5
        for attempt in range(attempts):
            if self._fixed_port is None:
                self._port = find_free_port(self.host)
            self._write_settings()
            try:
                self._pg_ctl(
                    "start",
                    "-w",
                    "-t",
                    str(self._start_timeout),
                    "-l",
                    str(self.log_path),
                )
                break
            except PostgresServerError:
                # Another process may have taken the port between our probe
                # and the server's bind(): pick another one.
                if attempt + 1 < attempts and "could not bind" in self._log_tail():
                    continue
                raise
        self._running = True
        if not self._atexit_registered:
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        self._start_watchdog()
        self._create_database()
        self.startup_seconds = time.perf_counter() - began
        return self

    def stop(self) -> None:
        """Fast shutdown (``pg_ctl stop -m fast -w``); no-op when not running."""
        if not self._running and not (self.datadir / "postmaster.pid").exists():
            return
        try:
            self._pg_ctl("stop", "-m", "fast", "-w", "-t", str(self._start_timeout))
        except PostgresServerError:
            # e.g. pg_ctl as postgres can no longer reach the directory
            # (someone reset an ancestor's mode): signal the postmaster directly.
            self._signal_postmaster(signal.SIGINT)
        self._running = False
        self._stop_watchdog()
        if self._atexit_registered:
            atexit.unregister(self._stop_at_exit)
            self._atexit_registered = False

    def restart(self, down_seconds: float = 0.0) -> None:
        """Fast stop, stay down ``down_seconds``, then start on the same port (connections are dropped)."""
        fixed = self._fixed_port
        self.stop()
        time.sleep(down_seconds)
        self._fixed_port = self._port
        try:
            for attempt in range(3):  # under heavy load a start right after a stop has been seen to fail once
                try:
                    self.start()
                    break
                except PostgresServerError:
                    if attempt == 2:
                        raise
                    time.sleep(2.0)
        finally:
            self._fixed_port = fixed

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self._port}" if self._running else "stopped"
        return f"PostgresServer({str(self.datadir)!r}, {state})"

    # ------------------------------------------------------------------ helpers
    def _run_as_server_user(
        self, args: Sequence[str], *, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env.pop("LANGUAGE", None)
        kwargs: dict[str, Any] = {}
        if self._as_root:
            pw = pwd.getpwnam(OS_USER)
            kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
            env["HOME"] = pw.pw_dir
            env["USER"] = env["LOGNAME"] = OS_USER
        return subprocess.run(
            list(args),
            cwd="/",  # root's cwd may be unreadable for postgres
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            # pg_ctl's postmaster must not inherit our stdin
            stdin=subprocess.DEVNULL,
            **kwargs,
        )

    def _prepare_os_user_and_dir(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        if not self._as_root:
            self.datadir.chmod(0o700)
            return
        try:
            pw = ensure_os_user(
                OS_USER, home="/var/lib/postgresql", shell="/bin/sh", purpose="PostgreSQL as (initdb refuses root)"
            )
        except ServerUserError as exc:
            raise PostgresServerError(str(exc)) from exc
        if self.datadir.stat().st_uid != pw.pw_uid:
            for path in [self.datadir, *self.datadir.rglob("*")]:
                os.lchown(path, pw.pw_uid, pw.pw_gid)
        self.datadir.chmod(0o700)
        grant_traverse(self.datadir.parent, pw.pw_uid, pw.pw_gid)

    def _initdb(self) -> None:
        if any(self.datadir.iterdir()):
            raise PostgresServerError(f"{self.datadir} is not empty and holds no PostgreSQL cluster (no PG_VERSION)")
        pwfile = self._write_pwfile()
        try:
            args = [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "--username",
                self._user,
                "--pwfile",
                str(pwfile),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ]
            if self.major_version >= 14:
                args.append("--no-instructions")
            result = self._run_as_server_user(args, timeout=300)
        finally:
            pwfile.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                pwfile.parent.rmdir()
        if result.returncode != 0:
            raise PostgresServerError(f"initdb failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
        conf = self.datadir / "postgresql.conf"
        with conf.open("a", encoding="utf-8") as fh:
            fh.write(f"\n# added by tests/pg_server.py\ninclude_if_exists = '{SETTINGS_FILE}'\n")

    def _write_pwfile(self) -> Path:
        tmpdir = Path(tempfile.mkdtemp(prefix="pgpw-"))
        pwfile = tmpdir / "pw"
        pwfile.write_text(self._password + "\n", encoding="utf-8")
        pwfile.chmod(0o600)
        if self._as_root:
            pw = pwd.getpwnam(OS_USER)
            os.chown(tmpdir, pw.pw_uid, pw.pw_gid)
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        return pwfile

    def settings(self) -> dict[str, object]:
        """The settings written to the included config file on start."""
        socket_path = self.datadir / f".s.PGSQL.{self._port}"
        socket_dir = str(self.datadir) if len(str(socket_path)) <= _MAX_SOCKET_PATH else ""
        values: dict[str, object] = {
            "listen_addresses": self.host,
            "port": self._port,
            # "" (no unix socket) when the data dir path is too long for one;
            # pg_ctl -w waits on postmaster.pid, not on the socket.
            "unix_socket_directories": socket_dir,
            "max_connections": 100,
            # Two-phase commit on, for the tests of prepared transactions.
            "max_prepared_transactions": 10,
            "shared_buffers": self._shared_buffers,
            "password_encryption": "scram-sha-256",
            # Throw-away: durability off.
            "fsync": False,
            "synchronous_commit": False,
            "full_page_writes": False,
            # Bulk loads: few checkpoints, big sorts for index builds.
            "max_wal_size": "8GB",
            "checkpoint_timeout": "30min",
            "maintenance_work_mem": "512MB",
            "work_mem": "32MB",
            "jit": False,
            # Logical replication, for the change-stream tables (a slot and a publication per table).
            "wal_level": "logical",
            "max_replication_slots": 40,
            "max_wal_senders": 40,
            "log_min_messages": "warning",
            "log_line_prefix": "%m [%p] ",
        }
        values.update(self._extra_settings)
        return values

    def _write_settings(self) -> None:
        lines = ["# written by tests/pg_server.py on every start; do not edit"]
        lines += [f"{key} = {_quote_conf(value)}" for key, value in self.settings().items()]
        path = self.datadir / SETTINGS_FILE
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if self._as_root:
            pw = pwd.getpwnam(OS_USER)
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def _pg_ctl(self, *args: str) -> None:
        cmd = [
            str(self.bindir / "pg_ctl"),
            *args[:1],
            "-D",
            str(self.datadir),
            *args[1:],
        ]
        result = self._run_as_server_user(cmd, timeout=self._start_timeout + 30)
        if result.returncode != 0:
            raise PostgresServerError(
                f"pg_ctl {args[0]} failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}\n--- {self.log_path} (tail) ---\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _create_database(self) -> None:
        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            exists = conn.execute("select 1 from pg_database where datname = %s", (self._dbname,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(self._dbname)))

    def _postmaster_pid(self) -> int | None:
        """The live postmaster's pid from postmaster.pid, else ``None``."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None  # no pid file, or a stale one
        return pid if b"postgres" in cmdline else None

    def _start_watchdog(self) -> None:
        """Fast-stop the server if this process dies without calling stop().

        atexit does not run on SIGTERM/SIGKILL (e.g. CI's ``timeout``), and
        the postmaster is its own session leader, so it would outlive us.
        """
        self._stop_watchdog()
        pid = self._postmaster_pid()
        if pid is None:
            return
        self._watchdog = start_watchdog(pid, signal.SIGINT)

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
            self._watchdog = None

    def _signal_postmaster(self, sig: signal.Signals, timeout: float = 60) -> None:
        pid = self._postmaster_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)
        raise PostgresServerError(f"postmaster {pid} did not exit after {sig.name}")

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


def drop_table_slot(dsn: str, table: str, schema: str = "public", *, slot: str | None = None) -> None:
    """Drop a change-stream table's replication slot (``slot``, by default ``tiering_<schema>_<table>``) unless a
    stream holds it: slots outlive the tests' tables and keep WAL."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
            (slot or f"tiering_{schema}_{table}",),
        )
