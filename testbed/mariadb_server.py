"""A real, throw-away MariaDB server for tests and benchmarks.

``MariaDBServer`` runs ``mariadb-install-db`` into a directory, starts
``mariadbd`` on a free port on 127.0.0.1 (never on another interface) and on a
short unix socket, and creates one database and one password-authenticated
user with all privileges on it (plus the global ``PROCESS`` privilege, which
a tiering reader needs to see other sessions in
``information_schema.INNODB_TRX``)::

    with MariaDBServer(tmp_path / "mariadb") as db:
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("select 1")
        print(db.url)  # mysql://tiering:...@127.0.0.1:PORT/tiering
        reader_url = db.create_user("reader", "pw", ["SELECT ON tiering.*"])

The settings trade durability for speed (``innodb_flush_log_at_trx_commit=0``,
no doublewrite buffer, no binary log unless ``binlog=True``): never point it at
data you want to keep. With ``binlog=True`` the server writes a row binlog a
change stream reads (``log_bin``, ``binlog_format=ROW``, ``binlog_row_image``
and ``binlog_row_metadata`` FULL, server id 1), and the main user may read it
(``REPLICATION SLAVE`` and ``BINLOG MONITOR``). Server-side time zone is UTC, the character set utf8mb4, and
``local_infile`` is on (``LOAD DATA LOCAL INFILE`` with PyMySQL's
``local_infile=True``).

Administration: ``mariadb-install-db`` creates ``root@localhost``
authenticated by ``unix_socket`` (plus, when this process is not root, an
account named after the current OS user, authenticated the same way), so the
admin connection (``admin_connect()``) goes through the unix socket and needs
no password; no root account is reachable over TCP. Anonymous accounts are
dropped on start.

Root handling: ``mariadbd`` refuses to run as root without ``--user``. When
this process is root, ``mariadb-install-db`` and ``mariadbd`` are run as the
``mysql`` OS user (created with ``useradd --system`` if missing) through
``subprocess``' ``user=``/``group=``/``extra_groups=`` (setuid in the child;
no PAM or ``runuser`` needed), the data directory is ``chown``-ed to that
user, and any ancestor directory that user cannot traverse (pytest's
``/tmp/pytest-of-root`` is ``0700``) gets the search bit ``o+x`` (not read).
When this process is not root the binaries run as the current user.

A directory that already holds a data directory (a ``mysql`` system schema
directory present) is reused: ``mariadb-install-db`` is skipped, and the
option file (port, socket, settings) is rewritten on each start, so a data
set loaded once can survive across runs. The server is stopped by
``stop()``, by ``__exit__``, at interpreter exit (``atexit``), and by a
small watchdog process if this process dies without running either.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import pymysql
import pymysql.connections

from testbed.ports import find_free_port
from testbed.server_process import ServerUserError, ensure_os_user, grant_traverse, pid_alive, start_watchdog

OS_USER = "mysql"
DEFAULT_USER = "tiering"
DEFAULT_PASSWORD = "tiering-test-password"
DEFAULT_DATABASE = "tiering"
#: Global privileges of the main user besides ALL on its database: PROCESS shows every
#: session's transactions in information_schema.INNODB_TRX (without it, only the user's own).
DEFAULT_GLOBAL_PRIVILEGES: tuple[str, ...] = ("PROCESS",)
#: What a change stream's user needs besides: reading the binlog, and seeing where it ends.
BINLOG_PRIVILEGES: tuple[str, ...] = ("REPLICATION SLAVE", "BINLOG MONITOR")
# Our option file, the only one the server reads (--defaults-file), rewritten
# on every start (the port may change between starts).
SETTINGS_FILE = "tiering_test.cnf"
LOG_FILE = "mariadbd.log"
PID_FILE = "mariadbd.pid"
SOCKET_NAME = "mysqld.sock"
# sockaddr_un.sun_path is 108 bytes on Linux, including the NUL.
_MAX_SOCKET_PATH = 107
# Substrings of the error log that mean "someone else took our port".
_BIND_ERRORS = ("Address already in use", "Can't start server: Bind on TCP/IP port")


class MariaDBNotInstalledError(RuntimeError):
    """No MariaDB server binaries were found."""


class MariaDBServerError(RuntimeError):
    """mariadb-install-db or the server failed."""


def find_mariadb_binaries() -> tuple[Path, Path]:
    """``(mariadbd, mariadb-install-db)``.

    ``MARIADB_BINDIR`` in the environment (a directory holding both) overrides
    the search of PATH, ``/usr/sbin`` and ``/usr/bin``. The old ``mysqld`` /
    ``mysql_install_db`` names are accepted too.
    """
    override = os.environ.get("MARIADB_BINDIR")
    dirs = [override] if override else []
    dirs += [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/usr/bin", "/usr/local/bin"]
    search = os.pathsep.join(d for d in dirs if d)

    def first(*names: str) -> Path | None:
        for name in names:
            found = shutil.which(name, path=search)
            if found:
                return Path(found)
        return None

    server = first("mariadbd", "mysqld")
    install_db = first("mariadb-install-db", "mysql_install_db")
    if server is None or install_db is None:
        raise MariaDBNotInstalledError(
            "MariaDB server binaries (mariadbd, mariadb-install-db) not found on PATH nor in /usr/sbin, /usr/bin"
            + (f" nor in MARIADB_BINDIR={override}" if override else "")
            + ". Install the server, e.g. `apt-get install mariadb-server` (Debian; no need to start "
            "the system service), or set MARIADB_BINDIR to the directory holding mariadbd."
        )
    return server, install_db


def mariadb_version(server: Path) -> str:
    """The server version, e.g. ``10.11.19``, from ``mariadbd --version``."""
    out = subprocess.run([str(server), "--version"], check=True, capture_output=True, text=True).stdout
    for word in out.split():
        if word[:1].isdigit() and "." in word:
            return word.split("-", 1)[0]
    raise MariaDBServerError(f"cannot parse mariadbd --version output: {out!r}")


def default_buffer_pool_size() -> str:
    """A 24th of RAM in 128 MiB steps, between 128 MiB and 4 GiB (1 GiB on a 24 GiB machine).

    The server shares the machine with Spark/Airflow and the test processes;
    the OS page cache still serves whatever does not fit.
    """
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "512M"
    steps = round(total / 24 / (128 * 1024 * 1024))
    return f"{max(1, min(steps, 32)) * 128}M"


def quote_ident(name: str) -> str:
    """A MariaDB identifier in backquotes, e.g. ``my`db`` -> ```my``db```."""
    return "`" + name.replace("`", "``") + "`"


def _format_option(key: str, value: object) -> str | None:
    """One option-file line; ``True`` writes a bare flag, ``False``/``None`` nothing."""
    if value is None or value is False:
        return None
    if value is True:
        return key
    text = str(value)
    if text == "" or any(ch in text for ch in " #;'\"\\"):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{key} = {text}"


class MariaDBServer:
    """A throw-away MariaDB server in ``datadir``; a context manager.

    Args:
        datadir: the data directory; created if missing.
        user / password: the main account (``user@'%'``; the server listens on 127.0.0.1 only).
        database: a database created (if missing) after start; ``user`` gets ALL on it.
        global_privileges: global privileges also granted to ``user`` (default ``PROCESS``).
        port: fixed TCP port; ``None`` picks a free one.
        buffer_pool_size: e.g. ``"1G"``; ``None`` uses ``default_buffer_pool_size()``.
        settings: extra or overriding server options, e.g. ``{"sql_mode": ""}``
            (``True`` writes a bare flag, ``None``/``False`` drops an option).
        binlog: write a row binlog (see the module's description).
        start_timeout: seconds to wait for the server to accept connections, and to stop.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        datadir: Path | str,
        *,
        user: str = DEFAULT_USER,
        password: str = DEFAULT_PASSWORD,
        database: str = DEFAULT_DATABASE,
        global_privileges: Sequence[str] = DEFAULT_GLOBAL_PRIVILEGES,
        port: int | None = None,
        buffer_pool_size: str | None = None,
        settings: Mapping[str, object] | None = None,
        start_timeout: int = 60,
        binlog: bool = False,
    ) -> None:
        self.datadir = Path(datadir).absolute()
        self._user = user
        self._password = password
        self._database = database
        self._global_privileges = tuple(global_privileges) + (BINLOG_PRIVILEGES if binlog else ())
        self._binlog = binlog
        self._fixed_port = port
        self._port: int | None = port
        self._buffer_pool_size = buffer_pool_size or default_buffer_pool_size()
        self._extra_settings = dict(settings or {})
        self._start_timeout = start_timeout
        self.server_bin, self.install_db_bin = find_mariadb_binaries()
        self.version = mariadb_version(self.server_bin)
        self._as_root = os.geteuid() == 0
        # The unix_socket account the admin connection uses: root, or whoever runs us.
        self._admin_user = "root" if self._as_root else pwd.getpwuid(os.geteuid()).pw_name
        self._socket_dir: Path | None = None  # a private /tmp dir when the datadir path is too long
        self._proc: subprocess.Popen[bytes] | None = None
        self._running = False
        self._atexit_registered = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        #: seconds spent in the last start(): install-db (if any) + server start + provisioning
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- properties
    @property
    def port(self) -> int:
        if self._port is None:
            raise MariaDBServerError("server not started yet: no port")
        return self._port

    @property
    def user(self) -> str:
        return self._user

    @property
    def password(self) -> str:
        return self._password

    @property
    def database(self) -> str:
        return self._database

    @property
    def url(self) -> str:
        """``mysql://user:pass@127.0.0.1:port/database`` (percent-encoded; connectorx, SQLAlchemy+driver)."""
        return self.url_for(self._user, self._password)

    def url_for(self, user: str, password: str, database: str | None = None) -> str:
        """The same URL for another account and/or database on this server."""
        return (
            f"mysql://{quote(user, safe='')}:{quote(password, safe='')}"
            f"@{self.host}:{self.port}/{quote(database or self._database, safe='')}"
        )

    @property
    def socket_path(self) -> Path:
        """The unix socket: ``<datadir>/mysqld.sock``, or one in a private /tmp dir when that is too long."""
        inside = self.datadir / SOCKET_NAME
        if len(str(inside)) <= _MAX_SOCKET_PATH:
            return inside
        if self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="mdb-"))
        return self._socket_dir / SOCKET_NAME

    @property
    def log_path(self) -> Path:
        return self.datadir / LOG_FILE

    @property
    def running(self) -> bool:
        return self._running

    def connect(self, **kwargs: Any) -> pymysql.connections.Connection:
        """A new PyMySQL connection over TCP as the main user (caller closes it).

        ``kwargs`` override the defaults (host, port, user, password, database,
        ``charset="utf8mb4"``), e.g. ``cursorclass=pymysql.cursors.SSCursor``
        or ``local_infile=True``.
        """
        params: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self._user,
            "password": self._password,
            "database": self._database,
            "charset": "utf8mb4",
        }
        params.update(kwargs)
        return pymysql.connect(**params)

    def admin_connect(self, **kwargs: Any) -> pymysql.connections.Connection:
        """A new PyMySQL connection as the administrator (all privileges) over the unix socket, autocommit."""
        params: dict[str, Any] = {
            "unix_socket": str(self.socket_path),
            "user": self._admin_user,
            "charset": "utf8mb4",
            "autocommit": True,
        }
        params.update(kwargs)
        return pymysql.connect(**params)

    # ----------------------------------------------------------------- accounts
    def create_user(
        self,
        name: str,
        password: str,
        grants: Iterable[str] = (),
        *,
        host: str = "%",
    ) -> str:
        """Create (or reset) the account ``name@host`` with exactly ``grants``; returns its URL.

        Each grant is the part of a ``GRANT`` statement before ``TO``, e.g.
        ``"SELECT ON tiering.orders"`` or ``"SELECT, SHOW VIEW ON tiering.*"``.
        An existing account gets the new password and loses every other
        privilege, so repeated runs on a reused data directory agree. With no
        grants the account can log in and do nothing else (``USAGE``).
        """
        with self.admin_connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (name, host, password))
            cur.execute("ALTER USER %s@%s IDENTIFIED BY %s", (name, host, password))
            cur.execute("REVOKE ALL PRIVILEGES, GRANT OPTION FROM %s@%s", (name, host))
            for grant in grants:
                cur.execute(f"GRANT {grant} TO %s@%s", (name, host))
        return self.url_for(name, password)

    def drop_user(self, name: str, *, host: str = "%") -> None:
        """Drop the account ``name@host`` if it exists."""
        with self.admin_connect() as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@%s", (name, host))

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        """mariadb-install-db (unless already initialised), start, create the database and the user."""
        if self._running:
            return self
        began = time.perf_counter()
        self._prepare_os_user_and_dir()
        stale = self._server_pid()
        if stale is not None:
            raise MariaDBServerError(
                f"a mariadbd (pid {stale}) is already running on {self.datadir}; "
                f"stop it first: MariaDBServer({str(self.datadir)!r}).stop()"
            )
        if not (self.datadir / "mysql").is_dir():
            self._install_db()
        attempts = 1 if self._fixed_port is not None else 5
        for attempt in range(attempts):
            if self._fixed_port is None:
                self._port = find_free_port(self.host)
            self._write_settings()
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._launch()
                break
            except MariaDBServerError:
                # Another process may have taken the port between our probe
                # and the server's bind(): pick another one.
                if attempt + 1 < attempts and any(e in self._log_since(log_offset) for e in _BIND_ERRORS):
                    continue
                raise
        self._running = True
        if not self._atexit_registered:
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        self._start_watchdog()
        self._provision()
        self.startup_seconds = time.perf_counter() - began
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGTERM; ``innodb_fast_shutdown=1``); no-op when not running.

        Also stops a server left running on this data directory by another
        ``MariaDBServer`` (found through the pid file).
        """
        pid = self._proc.pid if self._proc is not None else self._server_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if not self._wait_gone(pid, self._start_timeout):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._wait_gone(pid, 10)
        self._proc = None
        self._running = False
        self._stop_watchdog()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        if self._atexit_registered:
            atexit.unregister(self._stop_at_exit)
            self._atexit_registered = False

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop, stay down ``down_seconds``, then start on the same port (connections are dropped)."""
        fixed = self._fixed_port
        self.stop()
        time.sleep(down_seconds)
        self._fixed_port = self._port
        try:
            self.start()
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
        return f"MariaDBServer({str(self.datadir)!r}, {state})"

    # ------------------------------------------------------------------ helpers
    def _server_user_kwargs(self) -> tuple[dict[str, Any], dict[str, str]]:
        """``subprocess`` keyword arguments and environment to run a binary as the server's OS user."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MYSQL", "MARIADB"))}
        env["LC_ALL"] = "C"
        env.pop("LANGUAGE", None)
        kwargs: dict[str, Any] = {}
        if self._as_root:
            pw = pwd.getpwnam(OS_USER)
            kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
            env["HOME"] = pw.pw_dir
            env["USER"] = env["LOGNAME"] = OS_USER
        return kwargs, env

    def _prepare_os_user_and_dir(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        if not self._as_root:
            self.datadir.chmod(0o700)
            return
        try:
            pw = ensure_os_user(
                OS_USER, home="/nonexistent", shell="/bin/false", purpose="MariaDB as (mariadbd refuses root)"
            )
        except ServerUserError as exc:
            raise MariaDBServerError(str(exc)) from exc
        if self.datadir.stat().st_uid != pw.pw_uid:
            for path in [self.datadir, *self.datadir.rglob("*")]:
                os.lchown(path, pw.pw_uid, pw.pw_gid)
        self.datadir.chmod(0o700)
        grant_traverse(self.datadir.parent, pw.pw_uid, pw.pw_gid)
        socket_dir = self.socket_path.parent
        if socket_dir != self.datadir:
            os.chown(socket_dir, pw.pw_uid, pw.pw_gid)

    def _install_db(self) -> None:
        ours = {SETTINGS_FILE, LOG_FILE, SOCKET_NAME, PID_FILE}
        if any(entry.name not in ours for entry in self.datadir.iterdir()):
            raise MariaDBServerError(
                f"{self.datadir} is not empty and holds no MariaDB data directory (no mysql/ schema directory)"
            )
        self._write_settings()
        args = [
            str(self.install_db_bin),
            f"--defaults-file={self.datadir / SETTINGS_FILE}",  # must come first
            f"--datadir={self.datadir}",
            "--auth-root-authentication-method=socket",
            f"--auth-root-socket-user={self._admin_user}",
            "--skip-test-db",
            "--skip-name-resolve",
        ]
        kwargs, env = self._server_user_kwargs()
        result = subprocess.run(
            args,
            cwd="/",  # root's cwd may be unreadable for mysql
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )
        if result.returncode != 0:
            raise MariaDBServerError(
                f"mariadb-install-db failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
            )

    def settings(self) -> dict[str, object]:
        """The server options written to the option file on start."""
        values: dict[str, object] = {
            "datadir": str(self.datadir),
            "port": self._port,
            "bind_address": self.host,
            "socket": str(self.socket_path),
            "pid_file": str(self.datadir / PID_FILE),
            "log_error": str(self.log_path),
            "skip_name_resolve": True,
            "max_connections": 200,
            "table_open_cache": 1000,  # keeps the open-files request under a container's usual limit
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_general_ci",
            "default_time_zone": "+00:00",
            "local_infile": 1,
            # Throw-away: durability off.
            "skip_log_bin": True,
            "sync_binlog": 0,
            "innodb_flush_log_at_trx_commit": 0,
            "innodb_doublewrite": 0,
            "innodb_fast_shutdown": 1,
            # Bulk loads and full scans.
            "innodb_buffer_pool_size": self._buffer_pool_size,
            "innodb_log_file_size": "512M",
            "innodb_log_buffer_size": "64M",
            "innodb_io_capacity": 2000,
            "max_allowed_packet": "256M",
            "skip_performance_schema": True,
            "log_warnings": 1,
        }
        if self._binlog:
            values.update(
                skip_log_bin=None,
                log_bin=str(self.datadir / "binlog"),
                server_id=1,
                binlog_format="ROW",
                binlog_row_image="FULL",
                binlog_row_metadata="FULL",
            )
        values.update(self._extra_settings)
        return values

    def _write_settings(self) -> None:
        lines = [f"# written by {__name__} on every start; do not edit", "[mysqld]"]
        for key, value in self.settings().items():
            line = _format_option(key, value)
            if line is not None:
                lines.append(line)
        path = self.datadir / SETTINGS_FILE
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        path.chmod(0o644)  # mariadbd ignores world-writable option files
        if self._as_root:
            pw = pwd.getpwnam(OS_USER)
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def _launch(self) -> None:
        """Start mariadbd and wait until the admin account can connect over the socket."""
        kwargs, env = self._server_user_kwargs()
        self.socket_path.unlink(missing_ok=True)
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            if self._as_root:
                pw = pwd.getpwnam(OS_USER)
                os.fchown(log, pw.pw_uid, pw.pw_gid)
            proc = subprocess.Popen(
                [str(self.server_bin), f"--defaults-file={self.datadir / SETTINGS_FILE}"],
                cwd="/",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop it cleanly
                **kwargs,
            )
        finally:
            os.close(log)
        self._proc = proc
        deadline = time.monotonic() + self._start_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                raise MariaDBServerError(
                    f"mariadbd exited with {proc.returncode} during start-up\n"
                    f"--- {self.log_path} (tail) ---\n{self._log_tail()}"
                )
            if self.socket_path.exists():
                try:
                    with self.admin_connect(connect_timeout=5) as conn, conn.cursor() as cur:
                        cur.execute("SELECT 1")
                    return
                except pymysql.err.MySQLError as exc:
                    last_error = exc
            time.sleep(0.05)
        self.stop()
        raise MariaDBServerError(
            f"mariadbd did not accept connections within {self._start_timeout}s (last error: {last_error})\n"
            f"--- {self.log_path} (tail) ---\n{self._log_tail()}"
        )

    def _provision(self) -> None:
        """Drop anonymous accounts; create the database and the main user (idempotent)."""
        with self.admin_connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT user, host FROM mysql.user WHERE user = ''")
            for anon_user, anon_host in cur.fetchall():
                cur.execute("DROP USER %s@%s", (anon_user, anon_host))
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote_ident(self._database)} CHARACTER SET utf8mb4")
        grants = [f"ALL PRIVILEGES ON {quote_ident(self._database)}.*"]
        if self._global_privileges:
            grants.append(f"{', '.join(self._global_privileges)} ON *.*")
        self.create_user(self._user, self._password, grants)

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _server_pid(self) -> int | None:
        """The live server's pid from the pid file, else ``None``."""
        try:
            pid = int((self.datadir / PID_FILE).read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None  # no pid file, or a stale one
        if not pid_alive(pid) or b"mariadbd" not in cmdline and b"mysqld" not in cmdline:
            return None
        return pid

    def _wait_gone(self, pid: int, timeout: float) -> bool:
        """Wait (reaping our own child) until ``pid`` has exited; False on timeout."""
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return True
            time.sleep(0.05)
        return False

    def _start_watchdog(self) -> None:
        """Stop the server if this process dies without calling stop().

        atexit does not run on SIGTERM/SIGKILL (e.g. CI's ``timeout``), and
        the server runs in its own session, so it would outlive us.
        """
        self._stop_watchdog()
        if self._proc is None:
            return
        self._watchdog = start_watchdog(self._proc.pid, signal.SIGTERM)

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
            self._watchdog = None

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
