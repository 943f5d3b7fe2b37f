"""Airflow's CeleryExecutor for an ``AirflowCluster``: the broker, and workers laid out as on machines of their own.

Each worker has its own Airflow home (its own ``airflow.cfg``, task logs, DAG bundle storage), which is also its
working directory and its user's ``HOME``, so its caches are its own (the Spark driver's class-data archive is
linked in from this machine's, as each machine's installation records its own with ``make spark-cds``). It has its
own copy of the DAG files (copied at start: a DAG file written later does not reach it) and its own temporary
directory (``TMPDIR``, and ``SPARK_LOCAL_DIRS`` for Spark's scratch): what a task leaves on disk is seen by no other
worker, nor by the scheduler or the api-server. Only the machine's installation (the virtualenv, Java) is shared, as
every machine of a deployment has its own copy of it. Workers reach the rest only through the broker, the result
backend and the api-server's Execution API, as they would across machines.
They run with ``--skip-serve-logs`` (the log server binds every interface): their task logs stay in their homes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_tiering.spark.cds_archive import DEFAULT_DIR as CDS_DIR

__all__ = ["CeleryWorkers"]


@dataclass(frozen=True)
class CeleryWorkers:
    """``count`` Celery workers of ``concurrency`` task slots each, their homes and temporary directories under
    ``root`` (``root/worker-N/home``, ``root/worker-N/tmp``)."""

    broker_url: str
    result_backend: str
    root: Path
    count: int = 2
    concurrency: int = 1

    @property
    def names(self) -> list[str]:
        return [f"worker-{n}" for n in range(1, self.count + 1)]

    def home(self, name: str) -> Path:
        return self.root / name / "home"

    def tmp(self, name: str) -> Path:
        return self.root / name / "tmp"

    def task_logs(self, name: str) -> list[Path]:
        """The task log files a worker wrote (in its own home)."""
        return sorted(p for p in (self.home(name) / "logs").rglob("*.log") if "dag_processor" not in p.parts)

    def executor_config(self) -> dict[str, dict[str, str]]:
        """What every process of the deployment is configured with to run tasks through Celery."""
        return {
            "core": {"executor": "CeleryExecutor"},
            "celery": {
                "broker_url": self.broker_url,
                "result_backend": self.result_backend,
                "worker_concurrency": str(self.concurrency),
                # With late acknowledgement (Airflow's default) a worker holds no more tasks than it runs: a task
                # queued while one worker is busy goes to the other.
                "worker_prefetch_multiplier": "1",
                "sync_parallelism": "1",
            },
        }

    def worker_config(self, name: str, cluster: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """The cluster's configuration with every path moved into the worker's own home."""
        home = self.home(name)
        config = {section: dict(values) for section, values in cluster.items()}
        config["core"].update({"dags_folder": str(home / "dags"), "plugins_folder": str(home / "plugins")})
        config["dag_processor"]["dag_bundle_storage_path"] = str(home / "dag_bundles")
        config["logging"].update(
            {
                "base_log_folder": str(home / "logs"),
                "dag_processor_child_process_log_directory": str(home / "logs" / "dag_processor"),
            }
        )
        return config

    def prepare(self, name: str, dags_folder: Path) -> None:
        """Create the worker's home and temporary directory, and copy the DAG files into its home."""
        home = self.home(name)
        for folder in (home, home / "plugins", self.tmp(name)):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.copytree(dags_folder, home / "dags", dirs_exist_ok=True)
        own_cds = home / CDS_DIR.relative_to(Path.home())
        own_cds.mkdir(parents=True, exist_ok=True)
        for archive in CDS_DIR.glob("*.jsa") if CDS_DIR.is_dir() else ():
            if not (own_cds / archive.name).exists():
                try:
                    os.link(archive, own_cds / archive.name)  # read-only, never rewritten: a link is a copy
                except OSError:  # another filesystem: not 150 MB copied per archive and worker
                    os.symlink(archive, own_cds / archive.name)

    def command(self, name: str) -> list[str]:
        """``airflow ...`` arguments that start the worker."""
        return [
            "celery", "worker", "--concurrency", str(self.concurrency), "--celery-hostname", f"{name}@%h",
            "--skip-serve-logs", "--without-mingle", "--without-gossip",
        ]  # fmt: skip

    def environment(self, name: str, cluster_env: Mapping[str, str]) -> dict[str, str]:
        """The cluster's environment with the worker's own home, configuration and temporary directories."""
        home = self.home(name)
        return {
            **cluster_env,
            "HOME": str(home),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW_CONFIG": str(home / "airflow.cfg"),
            "TMPDIR": str(self.tmp(name)),
            "SPARK_LOCAL_DIRS": str(self.tmp(name)),
        }
