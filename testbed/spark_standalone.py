"""A local Spark standalone cluster for tests and benchmarks, and a tiering round driven against it.

``StandaloneCluster`` starts and stops the cluster with ``scripts/spark_standalone.sh`` (a master and N workers
of the virtualenv's pyspark, 127.0.0.1 only, each daemon in its own process group), on free ports in its own
directory, and reads the master's and the workers' JSON status.

``run_cluster_round`` runs one ``run_round`` of a PostgreSQL table with ``SparkSplitWriter`` on a ``spark://``
master and reports where its time went (session start, executors registered, plan, write, commit) and, from the
driver's REST API and the workers' status, which worker each executor ran on and its tasks. It runs in a child
process (``python -m testbed.spark_standalone round CONFIG_JSON``, see ``round_in_child``): one JVM holds one
SparkContext, and a test session may already hold a local one.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from testbed.child_result import child_report
from testbed.ports import find_free_port

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "spark_standalone.sh"


def get_json(url: str, timeout: float = 30.0) -> Any:
    """A Spark web UI's JSON (a status or REST API page): 30 s, since a driver on a saturated machine (CI runs the
    benchmark smoke tests beside the suite) took longer than 5 s to answer."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class StandaloneCluster:
    """``workers`` workers of ``cores`` core(s) each, started by the project's script in ``directory``; ``hosts``
    names the host each worker advertises (127.0.0.1 for all by default)."""

    def __init__(
        self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g", hosts: tuple[str, ...] = ()
    ) -> None:
        self.directory = directory
        self.workers = workers
        self.port = find_free_port()
        self.webui_port = find_free_port()
        self.env = {
            **os.environ,
            "VENV": str(Path(sys.executable).parent.parent),
            "SPARK_STANDALONE_DIR": str(directory),
            "SPARK_MASTER_PORT": str(self.port),
            "SPARK_MASTER_WEBUI_PORT": str(self.webui_port),
            "SPARK_WORKER_WEBUI_PORT": "0",  # free ports; the master's status lists them
            "SPARK_WORKER_CORES": str(cores),
            "SPARK_WORKER_MEMORY": memory,
            "SPARK_WORKER_HOSTS": " ".join(hosts),
        }
        self.start_seconds = 0.0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def start(self) -> StandaloneCluster:
        started = time.perf_counter()
        result = self._script("start", str(self.workers))
        if result.returncode != 0:
            raise RuntimeError(f"spark_standalone.sh start failed:\n{result.stdout}{result.stderr}")
        self.start_seconds = time.perf_counter() - started
        return self

    def stop(self) -> None:
        self._script("stop", timeout=120)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def status(self) -> dict[str, Any]:
        """The master's JSON status: ``workers`` (id, state, webuiaddress, ...), ``activeapps``, ``completedapps``."""
        return dict(get_json(f"http://127.0.0.1:{self.webui_port}/json/"))

    def process_groups(self) -> list[int]:
        """The daemons' process groups (pid files of the script); executors and their Python workers join them."""
        return [int(p.read_text()) for p in sorted(self.directory.glob("*.pid"))]


@contextmanager
def running_cluster(directory: Path, **options: Any) -> Iterator[StandaloneCluster]:
    """A started ``StandaloneCluster(directory, **options)``, stopped on exit; raises if any of its processes (the
    daemons, their executors and Python workers) outlives the stop."""
    cluster = StandaloneCluster(directory, **options)
    try:
        cluster.start()  # the script returns once the master lists every worker ALIVE
        yield cluster
    finally:
        groups = cluster.process_groups()
        cluster.stop()
        survivors = group_members(groups)
        if survivors:
            raise RuntimeError(f"processes of the cluster survived its stop: {survivors}")


def group_members(pgids: list[int]) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) in pgids:
                    members.append(int(entry.name))
            except ProcessLookupError:
                continue
    return members


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [pid], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def listening_addresses(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that one of ``pids`` holds (from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A = LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            if width == 8:
                host = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:  # /proc shows IPv6 as four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                host = socket.inet_ntop(socket.AF_INET6, words)
            found.append((host, int(port, 16)))
    return sorted(set(found))


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "::ffff:127.0.0.1")


# -- the round, in a child process ------------------------------------------------------------------------------------
def _executor_workers(app_id: str, status_url: str) -> dict[str, str]:
    """Executor id -> worker id, from each worker's JSON status (running and finished executors of ``app_id``)."""
    owners: dict[str, str] = {}
    for worker in get_json(status_url)["workers"]:
        worker_status = get_json(worker["webuiaddress"].rstrip("/") + "/json/")
        for executor in [*worker_status.get("executors", []), *worker_status.get("finishedexecutors", [])]:
            if executor.get("appid") == app_id:
                owners[str(executor["id"])] = worker["id"]
    return owners


def run_cluster_round(config: dict[str, Any]) -> dict[str, Any]:
    """One tiering round of ``config["table"]`` (PostgreSQL ``config["dsn"]``) on ``config["master"]``.

    Keys: master, status_url (the master's /json/), executors (how many to wait for), dsn, table, cursor_column (or
    source: the spec's whole source, e.g. a change stream's), target_rows_per_split, catalog (pyiceberg
    properties), state_path, conf (extra Spark settings), and optionally
    spec (more fields of the table's spec, e.g. merge, target_file_size_mb),
    faults (the keyword arguments of ``testbed.split_faults.FirstAttemptFaults``: record_dir, lake_dir, fail,
    stall, kill_executor; the executors must import ``testbed``, e.g. through ``spark.executorEnv.PYTHONPATH``),
    merge_faults (those of ``testbed.split_faults.MergeRewriteFaults``: record_dir, lake_dir, kill_executor), and
    kill_before_merge_commit (this process SIGKILLs itself once a merge's rewrite is written, before its commit).
    """
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import round_parts

    table = config["table"]
    source = config.get("source") or {"conn_id": "unused", "table": table, "cursor_column": config["cursor_column"]}
    spec = TableSpec.parse(
        {
            "name": table,
            "source": source,
            "lake": {"namespace": "cluster", "table": table},
            "target_rows_per_split": config["target_rows_per_split"],
            **config.get("spec", {}),
        }
    )
    executors = int(config["executors"])
    conf = {
        "spark.ui.enabled": "true",  # for the REST API; bound to 127.0.0.1 (SPARK_LOCAL_IP)
        "spark.cores.max": str(executors),
        # The first job waits for every executor (spark.cores.max cores), so the tasks can spread over all workers.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        **config.get("conf", {}),
    }
    timings: dict[str, float] = {}
    started = time.perf_counter()
    writer = build_writer(SparkSettings(master=config["master"], conf=conf, app_name=f"tiering {table}"))
    sc = writer.spark.sparkContext
    timings["session_start"] = time.perf_counter() - started
    registered = time.perf_counter()
    while sc._jsc.sc().getExecutorMemoryStatus().size() - 1 < executors:  # the driver's block manager counts too
        if time.perf_counter() - registered > 120:
            raise RuntimeError(f"fewer than {executors} executors registered after 120s")
        time.sleep(0.1)
    timings["executors_registered"] = time.perf_counter() - registered
    phases: dict[str, float] = {}
    round_started = time.perf_counter()
    try:
        parts = round_parts(spec, ConnectionInfo.from_uri(config["dsn"]), config["catalog"], writer=writer)
        if "faults" in config:
            from testbed.split_faults import FirstAttemptFaults

            faults = config["faults"]
            stall = {int(index): float(seconds) for index, seconds in faults.get("stall", {}).items()}
            source = FirstAttemptFaults(
                parts.source,  # type: ignore[arg-type]
                faults["record_dir"],
                faults["lake_dir"],
                fail=faults.get("fail", ()),
                stall=stall,
                kill_executor=faults.get("kill_executor", ()),
            )
            parts = replace(parts, source=source)
        _inject_merge_faults(config)
        result = parts.run(
            JsonFileStateStore(Path(config["state_path"])),
            observe=lambda phase: phases.setdefault(phase, time.perf_counter()),
        )
        timings["round"] = time.perf_counter() - round_started
        timings["plan"] = phases["planned"] - round_started
        timings["split_cut"] = phases["writing"] - phases["planned"]
        timings["write"] = phases["written"] - phases["writing"]
        timings["commit"] = phases["committed"] - phases["written"]
        timings["record_clean"] = phases["cleaned"] - phases["committed"]
        app_id = sc.applicationId
        api = f"{sc.uiWebUrl}/api/v1/applications/{app_id}"
        owners = _executor_workers(app_id, config["status_url"])
        executor_rows = [
            {
                "id": e["id"],
                "worker": owners.get(e["id"]),
                "host_port": e["hostPort"],
                "tasks": e["totalTasks"],
                "task_seconds": e["totalDuration"] / 1000,
                "gc_seconds": e["totalGCTime"] / 1000,
            }
            for e in get_json(f"{api}/allexecutors")
            if e["id"] != "driver"
        ]
        tasks = [
            {
                "index": t["index"],
                "attempt": t["attempt"],
                "status": t["status"],
                "speculative": t["speculative"],
                "host": t["host"],
                "executor": t["executorId"],
                "stage": stage["stageId"],
            }
            for stage in get_json(f"{api}/stages")
            for t in get_json(f"{api}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=10000")
        ]
        listening = listening_addresses(descendants(os.getpid()))
        metrics = result.metrics
        return {
            "app_id": app_id,
            "outcome": result.outcome,
            "rows": metrics.rows if metrics else 0,
            "splits": metrics.splits if metrics else 0,
            "files": metrics.files if metrics else 0,
            "merge": None if metrics is None or metrics.merge is None else asdict(metrics.merge),
            "parallelism": writer.parallelism,
            "timings": timings,
            "executors": executor_rows,
            "tasks": tasks,
            "driver_listening": listening,
        }
    finally:
        writer.stop()
        timings["total"] = time.perf_counter() - started


def _inject_merge_faults(config: dict[str, Any]) -> None:
    """Replace the merge's rewrite reader (``merge_faults``) or its rewrite step (``kill_before_merge_commit``) in this
    driver process: the merge looks both up in its module at each round."""
    from airflow_provider_tiering.lake import merge

    if "merge_faults" in config:
        from testbed.split_faults import MergeRewriteFaults

        faults = config["merge_faults"]
        merge.MergeRewriteReader = functools.partial(  # type: ignore[misc]
            MergeRewriteFaults,
            record_dir=faults["record_dir"],
            lake_dir=faults["lake_dir"],
            kill_executor=tuple(faults.get("kill_executor", ())),
        )
    if config.get("kill_before_merge_commit"):
        rewrite = merge.rewrite

        def rewrite_then_die(*args: Any, **kwargs: Any) -> Any:
            done = rewrite(*args, **kwargs)
            print(f"merge rewritten: {len(done.written)} files in {done.tasks} tasks; killing the driver", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            return done

        merge.rewrite = rewrite_then_die  # type: ignore[assignment]


def round_in_child(config: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """``run_cluster_round(config)`` in a fresh Python process (its own driver JVM); returns its report."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.spark_standalone", "round", json.dumps(config)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = child_report(proc, "cluster round")
    report["child_seconds"] = report["timings"]["total"]
    return report


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "round":
        sys.exit("usage: python -m testbed.spark_standalone round CONFIG_JSON")
    outcome = run_cluster_round(json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(outcome), flush=True)
