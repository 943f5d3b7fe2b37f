"""Run a real Airflow 3.3 deployment (api-server, scheduler, dag-processor, triggerer) for e2e tests.

Usage::

    with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env={...}) as af:
        run_id = af.trigger_dag("my_dag")
        assert af.wait_for_run("my_dag", run_id, timeout=60) == "success"

Every component is a separate ``airflow ...`` subprocess in its own process group, with its
output in ``<home>/proc-logs/<component>.log``. The metadata DB is SQLite, the executor is
``LocalExecutor`` (or Celery's, with ``celery=CeleryWorkers(...)``: testbed/celery_workers.py) and only
``127.0.0.1`` is ever bound (the api-server gets a free port;
the scheduler and triggerer run with ``--skip-serve-logs`` because the log server binds
all interfaces). Task logs are read from local files by the api-server.
"""

from __future__ import annotations

import atexit
import configparser
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
import psutil

from testbed.celery_workers import CeleryWorkers
from testbed.ports import find_free_port

log = logging.getLogger(__name__)

__all__ = ["AirflowCluster", "AirflowClusterError", "airflow_cluster"]

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin"  # throwaway test credential

TERMINAL_RUN_STATES = frozenset({"success", "failed"})
SERVER_ERROR_RETRIES = 5
#: How often a wait asks the api-server again: each answer cost it about 20 ms of CPU (measured here), so a wait
#: polling every 0.5 s cost a deployment as much as its idle scheduler.
POLL_SECONDS = 1.0
#: What the benchmarks' deployments run with, their documented figures measured so: an unchanged DAG file parsed every
#: 5 s (the tests' deployments: every 30 s, Airflow's default), and an idle scheduler loop every 0.5 s (the tests':
#: every 1 s, Airflow's default; measured here, an idle scheduler took 5.4 CPU-s a minute at 0.5 s, 3.3 at 1 s).
BENCHMARK_CONFIG: Mapping[str, Mapping[str, str]] = {
    "dag_processor": {"min_file_process_interval": "5"},
    "scheduler": {"scheduler_idle_sleep_time": "0.5"},
}


def benchmark_config(**sections: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``BENCHMARK_CONFIG`` with ``sections`` (``section={key: value}``) merged over it, as ``config_overrides``."""
    config = {section: dict(values) for section, values in BENCHMARK_CONFIG.items()}
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    return config


_ENV_PREFIXES_TO_DROP = (
    "AIRFLOW__",
    "AIRFLOW_CONN_",
    "AIRFLOW_VAR_",
    "_AIRFLOW",
    "PYTEST_",
)
_ENV_KEYS_TO_DROP = frozenset({"AIRFLOW_HOME", "AIRFLOW_CONFIG"})
# Structured task-log keys that task_log() does not repeat on every line.
_LOG_KEYS_NOT_SHOWN = frozenset(
    {"timestamp", "level", "event", "logger", "loc", "filename", "lineno"}
    | {"dag_id", "run_id", "task_id", "map_index", "try_number", "ti_id"}
)

# Clusters still running at interpreter exit are torn down (e.g. after a KeyboardInterrupt).
_LIVE_CLUSTERS: weakref.WeakSet[AirflowCluster] = weakref.WeakSet()


@atexit.register
def _stop_leftover_clusters() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        with contextlib.suppress(Exception):
            cluster.stop()


class AirflowClusterError(RuntimeError):
    """A component died, a wait timed out, or the REST API answered with an error."""


def _error_summary(body: str, limit: int = 600) -> str:
    """An error response's gist: with ``expose_stacktrace`` the body is a whole traceback, whose last lines
    name the exception (a CI log shows only the start of a long message)."""
    with contextlib.suppress(ValueError, AttributeError):
        detail = json.loads(body).get("detail")
        if isinstance(detail, dict) and "orig_error" in detail:
            return f"{detail.get('reason')}: {detail.get('orig_error')}"[:limit]
        if detail is not None:
            body = detail if isinstance(detail, str) else json.dumps(detail)
    lines = [line for line in body.strip().splitlines() if line.strip()]
    gist = " | ".join(lines[-3:]) if len(lines) > 3 else " | ".join(lines)
    return gist if len(gist) <= limit else gist[:limit] + "…"


def _tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:])


def _might_contain_dag(path: Path) -> bool:
    """Mirror of Airflow's default heuristic (file mentions both ``airflow`` and ``dag``)."""
    content = path.read_bytes().lower()
    return b"airflow" in content and b"dag" in content


class AirflowCluster:
    """A real Airflow deployment on 127.0.0.1 built from subprocesses; use as a context manager."""

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        extra_env: Mapping[str, str] | None = None,
        *,
        with_triggerer: bool = False,
        expected_dag_ids: Collection[str] | None = None,
        config_overrides: Mapping[str, Mapping[str, str]] | None = None,
        venv: Path | None = None,
        startup_timeout: float = 120.0,
        parse_timeout: float = 90.0,
        path_prefix: str = "",
        celery: CeleryWorkers | None = None,
    ) -> None:
        """
        Describe the cluster; nothing is started before ``start()`` / ``__enter__``.

        :param home: AIRFLOW_HOME (created; config, DB, task logs and component logs live here).
        :param dags_folder: folder scanned by the dag-processor.
        :param extra_env: env vars for every component and task (e.g. ``AIRFLOW_CONN_*``);
            ``AIRFLOW__SECTION__KEY`` entries here override the generated airflow.cfg.
        :param with_triggerer: also run ``airflow triggerer`` (deferrable operators).
        :param expected_dag_ids: DAG ids to wait for at start. By default the start waits until
            every ``*.py`` file of ``dags_folder`` that mentions "airflow" and "dag" has produced
            a DAG or an import error (an import error fails the start).
        :param config_overrides: ``{section: {key: value}}`` merged into airflow.cfg.
        :param venv: virtualenv whose ``bin/airflow`` runs everything (default: ``sys.prefix``). Another
            virtualenv runs as an installation of its own: the test's ``PYTHONPATH`` is not passed on, so only
            what is installed there can be imported (e.g. the provider installed from its wheel, not the repo).
        :param path_prefix: serve Airflow under this path (``[api] base_url``), as behind a proxy, e.g. ``/airflow``.
        :param celery: run tasks with the CeleryExecutor on these workers (each in a home of its own) instead of the
            LocalExecutor; the start also waits for every worker to be ready.
        """
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.extra_env: dict[str, str] = dict(extra_env or {})
        self.with_triggerer = with_triggerer
        self.expected_dag_ids = set(expected_dag_ids) if expected_dag_ids is not None else None
        self.config_overrides = {s: dict(kv) for s, kv in (config_overrides or {}).items()}
        self.venv = Path(venv) if venv is not None else Path(sys.prefix)
        self.startup_timeout = startup_timeout
        self.parse_timeout = parse_timeout
        self.path_prefix = path_prefix.rstrip("/")
        self.celery = celery

        self.port = 0
        self.proc_log_dir = self.home / "proc-logs"
        self.config_file = self.home / "airflow.cfg"
        self.passwords_file = self.home / "simple_auth_manager_passwords.json"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.timings: dict[str, float] = {}
        self._client: httpx.Client | None = None
        self._token: str | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path_prefix}"

    @property
    def airflow_bin(self) -> Path:
        return self.venv / "bin" / "airflow"

    @property
    def python_bin(self) -> Path:
        return self.venv / "bin" / "python"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and not issubclass(exc_type, AirflowClusterError):
            # AirflowClusterError already carries log tails; add them for plain assertion failures.
            sys.stderr.write(self.diagnostics())
        self.stop()

    def start(self) -> None:
        """Write config, migrate the DB, start every component and wait for API + DAG parsing."""
        t0 = time.monotonic()
        _LIVE_CLUSTERS.add(self)
        self._token = None  # a restart signs tokens with a new secret
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            self.dags_folder.mkdir(parents=True, exist_ok=True)
            self.proc_log_dir.mkdir(parents=True, exist_ok=True)
            self.passwords_file.write_text(json.dumps({ADMIN_USER: ADMIN_PASSWORD}) + "\n")
            for attempt in range(3):
                self.port = find_free_port()
                self._write_config()
                if attempt == 0:
                    self._prepare_database()
                    self.timings["db_migrate"] = time.monotonic() - t0
                try:
                    self._spawn_all()
                    self._wait_healthy()
                    break
                except _PortTaken:
                    self._kill_all()
            else:
                raise AirflowClusterError("could not bind the api-server to a free port in 3 attempts")
            self.timings["healthy"] = time.monotonic() - t0
            self.wait_for_dags(self.expected_dag_ids, timeout=self.parse_timeout)
            self.timings["dags_parsed"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every component's process group (and stray descendants), SIGKILL what is left."""
        t0 = time.monotonic()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.processes:
            self._kill_all(grace)
            self.timings["stop"] = time.monotonic() - t0
        _LIVE_CLUSTERS.discard(self)

    def _kill_all(self, grace: float = 15.0) -> None:
        if not self.processes:
            return
        # start_new_session=True made every component the leader of its own group.
        groups = {proc.pid: name for name, proc in self.processes.items()}
        victims: dict[int, psutil.Process] = {}
        for proc in self.processes.values():
            with contextlib.suppress(psutil.Error):
                leader = psutil.Process(proc.pid)
                victims[leader.pid] = leader
                for child in leader.children(recursive=True):
                    victims[child.pid] = child
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        # Task processes setpgid() into groups of their own; signal each exactly once
        # (a second SIGTERM makes e.g. the triggerer skip its graceful shutdown).
        for pid, victim in victims.items():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(pid) not in groups:
                    victim.terminate()
        _, alive = psutil.wait_procs(list(victims.values()), timeout=grace)
        if alive:
            self._note(f"still alive {grace}s after SIGTERM, sending SIGKILL: {alive}")
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for victim in alive:
            with contextlib.suppress(psutil.Error):
                victim.kill()
        psutil.wait_procs(alive, timeout=5)
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.processes.clear()

    def _note(self, message: str) -> None:
        """Append a harness message to ``proc-logs/harness.log``."""
        with (self.proc_log_dir / "harness.log").open("a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    # ------------------------------------------------------------------ config / processes

    def config(self) -> dict[str, dict[str, str]]:
        """Return the airflow.cfg content (section -> key -> value) this cluster runs with."""
        home = self.home
        cfg: dict[str, dict[str, str]] = {
            "core": {
                "dags_folder": str(self.dags_folder),
                "plugins_folder": str(home / "plugins"),
                "executor": "LocalExecutor",
                "parallelism": "4",
                "max_active_tasks_per_dag": "4",
                "max_active_runs_per_dag": "4",
                "load_examples": "False",
                "dags_are_paused_at_creation": "False",
                "auth_manager": ("airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"),
                "simple_auth_manager_users": f"{ADMIN_USER}:admin",
                "simple_auth_manager_all_admins": "False",
                "simple_auth_manager_passwords_file": str(self.passwords_file),
                "execution_api_server_url": f"{self.base_url}/execution/",
                "fernet_key": _fernet_key(),
                "default_task_retries": "0",
                "min_serialized_dag_update_interval": "1",
            },
            "database": {
                # A lock waited for up to 60 s, not pysqlite's 5: on a loaded machine one component can hold the
                # write lock longer, and another's query would then fail.
                "sql_alchemy_conn": f"sqlite:///{home / 'airflow.db'}?timeout=60",
            },
            "api": {
                "host": "127.0.0.1",
                "port": str(self.port),
                "base_url": f"{self.base_url}/",
                "workers": "1",
                "secret_key": secrets.token_urlsafe(16),
                "expose_stacktrace": "True",
                "maximum_page_limit": "1000",
            },
            "api_auth": {
                # Must be identical in every process: the scheduler signs task JWTs that
                # the api-server's execution API verifies.
                "jwt_secret": secrets.token_urlsafe(64),
            },
            "dag_processor": {
                "refresh_interval": "2",
                # Airflow's default: a file changed since its last parse ended is parsed again at once, whatever this
                # says (one written during a parse waits for this); an unchanged one parsed every 5 s cost each
                # deployment about 0.02 of a core, all test long.
                "min_file_process_interval": "30",
                "parsing_processes": "1",
                "print_stats_interval": "300",
                "bundle_refresh_check_interval": "1",
                "dag_bundle_storage_path": str(home / "dag_bundles"),
                "stale_dag_threshold": "50",
            },
            "scheduler": {
                "scheduler_heartbeat_sec": "1",
                "job_heartbeat_sec": "1",
                "scheduler_idle_sleep_time": "1",
                "enable_health_check": "False",
                "parsing_cleanup_interval": "10",
                "pool_metrics_interval": "60",
                "task_queued_timeout_check_interval": "30",
            },
            "triggerer": {
                "job_heartbeat_sec": "1",
            },
            "logging": {
                "base_log_folder": str(home / "logs"),
                "dag_processor_child_process_log_directory": str(home / "logs" / "dag_processor"),
                "colored_console_log": "False",
                "logging_level": "INFO",
            },
        }
        for section, values in (self.celery.executor_config() if self.celery else {}).items():
            cfg.setdefault(section, {}).update(values)
        for section, values in self.config_overrides.items():
            cfg.setdefault(section, {}).update(values)
        return cfg

    def _write_config(self) -> None:
        config = self.config()  # once: its secrets (JWT, Fernet key) are drawn anew at each call
        _write_config_file(self.config_file, config)
        if self.celery is not None:
            for name in self.celery.names:
                self.celery.prepare(name, self.dags_folder)
                _write_config_file(self.celery.home(name) / "airflow.cfg", self.celery.worker_config(name, config))

    def env(self) -> dict[str, str]:
        """Return the environment every component (and therefore every task) gets."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _ENV_KEYS_TO_DROP and not k.startswith(_ENV_PREFIXES_TO_DROP)
        }
        if self.venv.resolve() != Path(sys.prefix).resolve():
            env.pop("PYTHONPATH", None)
        bin_dir = str(self.venv / "bin")
        no_proxy = ",".join(
            filter(
                None,
                ["127.0.0.1", "localhost", env.get("NO_PROXY") or env.get("no_proxy")],
            )
        )
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW_CONFIG": str(self.config_file),
                "PATH": os.pathsep.join([bin_dir, env.get("PATH", "")]),
                "VIRTUAL_ENV": str(self.venv),
                "PYSPARK_PYTHON": str(self.python_bin),
                "PYSPARK_DRIVER_PYTHON": str(self.python_bin),
                "NO_PROXY": no_proxy,
                "no_proxy": no_proxy,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _template_database(self) -> Path | None:
        """Where a freshly migrated metadata database of this cluster's Airflow version is kept for the next
        clusters to copy (a migration costs seconds of CPU per cluster); None when the version cannot be told."""
        found = sorted(self.venv.glob("lib/python*/site-packages/apache_airflow-*.dist-info"))
        if not found:
            return None
        return Path(__file__).resolve().parents[1] / ".cache" / "airflow-metadata-db" / f"{found[0].name}.db"

    def _prepare_database(self) -> None:
        """A fresh metadata database (none on a restart): a copy of the migrated template, else migrated here (and
        kept as the template, written aside then renamed into place, so parallel test runs never read half of one)."""
        database = self.home / "airflow.db"
        if database.exists():
            # A restart keeps its deployment's database. A copy over it lost the first start's state, and when a
            # killed component had left a hot journal beside it, SQLite rolled that back into the copy: "database
            # disk image is malformed", a scheduler exit.
            return
        on_sqlite = self.config()["database"]["sql_alchemy_conn"] == f"sqlite:///{database}?timeout=60" and not any(
            key.startswith("AIRFLOW__DATABASE__") for key in self.extra_env
        )
        template = self._template_database() if on_sqlite else None
        if template is not None and template.exists():
            shutil.copyfile(template, database)
            return
        self._migrate()
        if template is not None:
            template.parent.mkdir(parents=True, exist_ok=True)
            aside = template.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(database, aside)
            os.replace(aside, template)

    def _migrate(self) -> None:
        log_path = self.proc_log_dir / "db-migrate.log"
        with log_path.open("ab") as log:
            result = subprocess.run(
                [str(self.airflow_bin), "db", "migrate"],
                env=self.env(),
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=300,
                check=False,
            )
        if result.returncode != 0:
            raise AirflowClusterError(f"airflow db migrate failed ({result.returncode}):\n{_tail(log_path)}")

    def _spawn_all(self) -> None:
        commands: dict[str, list[str]] = {
            "api-server": [
                "api-server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            "scheduler": ["scheduler", "--skip-serve-logs"],
            "dag-processor": ["dag-processor"],
        }
        if self.with_triggerer:
            commands["triggerer"] = ["triggerer", "--skip-serve-logs"]
        env = self.env()
        environments = {name: env for name in commands}
        directories = {name: self.home for name in commands}
        if self.celery is not None:
            for worker in self.celery.names:
                commands[worker] = self.celery.command(worker)
                environments[worker] = self.celery.environment(worker, env)
                directories[worker] = self.celery.home(worker)
        # The api-server first, answering: the dag-processor and scheduler of a deployment whose DAGs are unpaused
        # at creation queue the first runs at once, and a task that cannot reach the execution API (a loaded
        # machine took 18 s to start the api-server) fails before its first line runs.
        first = {"api-server": commands.pop("api-server")}
        self._spawn(first, environments, directories)
        self._wait_api()
        self._spawn(commands, environments, directories)

    def _spawn(
        self, commands: dict[str, list[str]], environments: dict[str, dict[str, str]], directories: dict[str, Path]
    ) -> None:
        for name, args in commands.items():
            log_path = self.proc_log_dir / f"{name}.log"
            with log_path.open("ab") as log:
                log.write(f"\n===== {time.strftime('%H:%M:%S')} starting {name} =====\n".encode())
                log.flush()
                self.processes[name] = subprocess.Popen(
                    [str(self.airflow_bin), *args],
                    env=environments[name],
                    cwd=directories[name],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # own session => own process group
                )

    def check_processes(self) -> None:
        """Raise if a component exited."""
        for name, proc in self.processes.items():
            code = proc.poll()
            if code is not None:
                log_path = self.proc_log_dir / f"{name}.log"
                if name == "api-server" and "address already in use" in _tail(log_path, 200).lower():
                    raise _PortTaken(name)
                # The exited component's log first, and longer: a CI log keeps only the start of a long message.
                raise AirflowClusterError(
                    f"airflow {name} exited with {code}\n"
                    f"----- {log_path.name} (last 80 lines) -----\n{_tail(log_path, 80)}\n{self.diagnostics()}"
                )

    def diagnostics(self, lines: int = 40) -> str:
        """Tails of every component log (for failure messages)."""
        parts = [f"\n===== AirflowCluster diagnostics (home={self.home}) ====="]
        for path in sorted(self.proc_log_dir.glob("*.log")):
            parts.append(f"----- {path.name} (last {lines} lines) -----\n{_tail(path, lines)}")
        return "\n".join(parts) + "\n"

    def _wait_api(self) -> None:
        """Wait for the api-server to answer, its execution API warmed up."""

        def warmed_up(client: httpx.Client, health: httpx.Response) -> bool:
            # Cadwyn builds the execution API's versioned routers lazily on its first request: 5-25 s of CPU inside
            # the event loop, which stalls the whole api-server and makes the first task's "run" call exceed
            # [workers] execution_api_timeout (5 s) and retry. Pay it now, before any task can start.
            client.get("/execution/health", timeout=180).raise_for_status()
            return True

        self._poll_health(warmed_up, lambda: "api-server not up")

    def _wait_healthy(self) -> None:
        """Wait for /api/v2/monitor/health to report every started component healthy."""
        components = ["metadatabase", "scheduler", "dag_processor"]
        if self.with_triggerer:
            components.append("triggerer")

        def healthy(client: httpx.Client, health: httpx.Response) -> bool:
            body = health.json()
            statuses = [(body.get(c) or {}).get("status") for c in components]
            return all(s == "healthy" for s in statuses) and self._workers_ready()

        self._poll_health(
            healthy,
            lambda: "api-server not healthy" + ("" if self._workers_ready() else ", or a Celery worker not ready"),
        )

    def _poll_health(self, ready: Callable[[httpx.Client, httpx.Response], bool], failure: Callable[[], str]) -> None:
        """Ask /api/v2/monitor/health every 0.5 s until ``ready`` says so of an answer (each component's process
        checked alive meanwhile); past the start-up timeout, raise with ``failure()``'s words."""
        deadline = time.monotonic() + self.startup_timeout
        last: Any = None
        with httpx.Client(base_url=self.base_url, timeout=30, trust_env=False) as client:
            while time.monotonic() < deadline:
                self.check_processes()
                try:
                    resp = client.get("/api/v2/monitor/health")
                    last = resp.text
                    if resp.status_code == 200 and ready(client, resp):
                        return
                except httpx.TransportError as err:
                    last = repr(err)
                time.sleep(0.5)
        raise AirflowClusterError(f"{failure()} after {self.startup_timeout}s (last: {last})\n{self.diagnostics()}")

    def _workers_ready(self) -> bool:
        """Every Celery worker has said it is ready (the health endpoint does not report workers)."""
        if self.celery is None:
            return True
        for name in self.celery.names:
            since_start = _tail(self.proc_log_dir / f"{name}.log", 400).rsplit(f"starting {name} =====", 1)[-1]
            if " ready." not in since_start:  # this start's, not an earlier attempt's (the log is appended to)
                return False
        return True

    def wait_for_dags(self, dag_ids: Collection[str] | None = None, timeout: float = 90.0) -> None:
        """
        Wait until the dag-processor has parsed the DAGs; raise on import errors.

        With ``dag_ids=None`` waits for every ``*.py`` file of the dags folder that mentions
        "airflow" and "dag" to show up as the fileloc of some DAG.
        """
        if dag_ids is None:
            pending_files = {
                str(p.relative_to(self.dags_folder)) for p in self.dags_folder.rglob("*.py") if _might_contain_dag(p)
            }
        deadline = time.monotonic() + timeout
        while True:
            self.check_processes()
            errors = self.get("/api/v2/importErrors", params={"limit": 1000})["import_errors"]
            if errors:
                detail = "\n".join(f"{e['filename']}:\n{e['stack_trace']}" for e in errors)
                raise AirflowClusterError(f"DAG import errors:\n{detail}")
            dags = self.get("/api/v2/dags", params={"limit": 1000})["dags"]
            if dag_ids is not None:
                missing = set(dag_ids) - {d["dag_id"] for d in dags}
            else:
                missing = pending_files - {d["relative_fileloc"] for d in dags}
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AirflowClusterError(f"not parsed after {timeout}s: {sorted(missing)}\n{self.diagnostics()}")
            time.sleep(POLL_SECONDS)

    # ------------------------------------------------------------------ REST

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            # trust_env=False: a HTTP(S)_PROXY in the environment must not capture 127.0.0.1.
            self._client = httpx.Client(base_url=self.base_url, timeout=30, trust_env=False)
        return self._client

    def token(self, *, refresh: bool = False) -> str:
        """JWT from SimpleAuthManager: ``POST /auth/token`` with JSON username/password (201)."""
        if self._token is None or refresh:
            resp = self.client.post("/auth/token", json={"username": ADMIN_USER, "password": ADMIN_PASSWORD})
            if resp.status_code != 201:
                raise AirflowClusterError(f"POST /auth/token -> {resp.status_code}: {resp.text}")
            self._token = str(resp.json()["access_token"])
        return self._token

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        expected: Collection[int] = (200, 201, 204),
    ) -> httpx.Response:
        """Authenticated request; retries once with a fresh token on 401, and a few times on a server error:
        SQLite allows one writer, and on a loaded machine the scheduler, triggerer and api-server writing at
        once exceed its 5 s busy wait ("database is locked"; the transaction is rolled back, so a retried
        POST does not act twice)."""
        refreshed = refresh_now = False
        for retry in range(SERVER_ERROR_RETRIES + 2):
            all_headers = {"Authorization": f"Bearer {self.token(refresh=refresh_now)}"}
            all_headers.update(headers or {})
            resp = self.client.request(method, path, json=json_body, params=params, headers=all_headers)
            refresh_now = resp.status_code == 401 and not refreshed
            if refresh_now:
                refreshed = True
                continue
            if resp.status_code >= 500 and retry < SERVER_ERROR_RETRIES:
                log.warning("%s %s -> %s, retrying: %s", method, path, resp.status_code, _error_summary(resp.text))
                time.sleep(1 + retry)
                continue
            break
        if resp.status_code not in expected:
            raise AirflowClusterError(f"{method} {path} -> {resp.status_code}: {_error_summary(resp.text)}")
        return resp

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).json()

    def post(self, path: str, json: Any = None) -> Any:
        resp = self.request("POST", path, json_body=json)
        return resp.json() if resp.content else None

    def patch(self, path: str, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        resp = self.request("PATCH", path, json_body=json, params=params)
        return resp.json() if resp.content else None

    def put(self, path: str, json: Any = None) -> Any:
        resp = self.request("PUT", path, json_body=json)
        return resp.json() if resp.content else None

    def delete(self, path: str) -> None:
        self.request("DELETE", path)

    # ------------------------------------------------------------------ DAG helpers

    def unpause(self, dag_id: str) -> None:
        self.patch(f"/api/v2/dags/{quote(dag_id, safe='')}", json={"is_paused": False})

    def trigger_dag(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Create a manual run now (``logical_date`` null) and return its run_id."""
        body = {"logical_date": None, "conf": dict(conf or {})}
        run = self.post(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", json=body)
        return str(run["dag_run_id"])

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"))

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 120.0) -> str:
        """Poll the run until success/failed and return that state; raise on timeout."""
        return self._wait_for_state(
            lambda: self.dag_run(dag_id, run_id)["state"],
            TERMINAL_RUN_STATES,
            timeout,
            lambda state: (
                f"run {dag_id}/{run_id} still {state!r} after {timeout}s; TIs: {self.task_instances(dag_id, run_id)}"
            ),
        )

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, wanted: Collection[str], timeout: float) -> str:
        """Poll the task instance (``task_id[i]`` for a mapped one) until its state is one of ``wanted`` and return
        that state; raise on timeout."""
        return self._wait_for_state(
            lambda: self.task_instances(dag_id, run_id).get(task_id),
            wanted,
            timeout,
            lambda state: f"{dag_id}/{run_id}/{task_id} stayed {state!r} after {timeout}s, wanted {sorted(wanted)}",
        )

    def _wait_for_state(
        self,
        read: Callable[[], str | None],
        wanted: Collection[str],
        timeout: float,
        failure: Callable[[str | None], str],
    ) -> str:
        """Ask ``read`` every ``POLL_SECONDS`` (each component checked alive) until it answers one of ``wanted``;
        past ``timeout``, raise with ``failure``'s words and the components' log tails."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_processes()
            state = read()
            if state in wanted:
                return str(state)
            if time.monotonic() > deadline:
                raise AirflowClusterError(f"{failure(state)}\n{self.diagnostics()}")
            time.sleep(POLL_SECONDS)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        """Map task_id (``task_id[i]`` for mapped TIs) to state."""
        body = self.get(
            f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances",
            params={"limit": 1000},
        )
        out: dict[str, str | None] = {}
        for ti in body["task_instances"]:
            key = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}[{ti['map_index']}]"
            out[key] = ti["state"]
        return out

    def task_log(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        try_number: int = 1,
        map_index: int = -1,
    ) -> str:
        """Full task log as text (one line per structured log record)."""
        resp = self.request(
            "GET",
            f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
            f"/taskInstances/{quote(task_id, safe='')}/logs/{try_number}",
            params={"full_content": "true", "map_index": map_index},
            headers={"Accept": "application/json"},
        )
        lines: list[str] = []
        for item in resp.json().get("content", []):
            if isinstance(item, str):
                lines.append(item)
                continue
            rest = {k: v for k, v in item.items() if k not in _LOG_KEYS_NOT_SHOWN}
            line = " ".join(
                str(part)
                for part in (
                    item.get("timestamp"),
                    item.get("level"),
                    item.get("event"),
                )
                if part
            )
            if rest:
                line += " " + json.dumps(rest, default=str)
            lines.append(line)
        return "\n".join(lines)

    # ------------------------------------------------------------------ asset helpers

    def asset_by_name(self, name: str) -> dict[str, Any]:
        """The AssetResponse whose name equals ``name`` (``name_pattern`` is a substring match)."""
        body = self.get("/api/v2/assets", params={"name_pattern": name, "limit": 1000})
        matches = [a for a in body["assets"] if a["name"] == name]
        if not matches:
            raise AirflowClusterError(f"no asset named {name!r}; got {[a['name'] for a in body['assets']]}")
        return dict(matches[0])

    def asset_state_store(self, asset_name: str) -> dict[str, Any]:
        """All state-store entries of an asset as ``{key: value}`` (values JSON-decoded)."""
        return {e["key"]: e["value"] for e in self.asset_state_store_entries(asset_name)}

    def asset_state_store_entries(self, asset_name: str) -> list[dict[str, Any]]:
        """Raw entries: ``{key, value, updated_at, last_updated_by: {kind, dag_id, ...} | None}``."""
        asset_id = self.asset_by_name(asset_name)["id"]
        body = self.get(f"/api/v2/assets/{asset_id}/state-store", params={"limit": 1000})
        return list(body["asset_state_store"])

    def asset_events(self, asset_name: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Asset events, oldest first; filters: source_dag_id, source_run_id, source_task_id, ..."""
        params: dict[str, Any] = {"limit": 1000, "order_by": "timestamp", **filters}
        if asset_name is not None:
            params["asset_id"] = self.asset_by_name(asset_name)["id"]
        return list(self.get("/api/v2/assets/events", params=params)["asset_events"])


class _PortTaken(AirflowClusterError):
    pass


def task_span(ti: Mapping[str, Any]) -> tuple[datetime, datetime]:
    """When a task instance (as the REST API returns it) started and ended."""
    return datetime.fromisoformat(ti["start_date"]), datetime.fromisoformat(ti["end_date"])


def _write_config_file(path: Path, config: Mapping[str, Mapping[str, str]]) -> None:
    parser = configparser.RawConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    for section, values in config.items():
        parser[section] = {k: v.replace("%", "%%") for k, v in values.items()}
    with path.open("w") as fh:
        parser.write(fh)


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


@contextlib.contextmanager
def airflow_cluster(
    home: Path,
    dags_folder: Path,
    extra_env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Iterator[AirflowCluster]:
    """Functional spelling of ``with AirflowCluster(...) as cluster``."""
    with AirflowCluster(home, dags_folder, extra_env, **kwargs) as cluster:
        yield cluster
