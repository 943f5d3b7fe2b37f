"""The scheduler imports what a tiering round imports before it starts its LocalExecutor's workers.

A LocalExecutor's worker is forked from the scheduler, and each task process from a worker: a module the scheduler
imported before the workers started is imported in every task process for free, where a task would otherwise import
it again, round after round. A tier task of a small table spent about three quarters of its CPU importing pyiceberg,
pyarrow, pandas and this provider (measured with 40 tables of a declared database, docs/benchmarks.md), which caps how
many rounds a minute a small machine runs.

The listener (registered by the plugin, ``listeners``) acts in ``on_starting`` of the ``airflow scheduler`` process
only, when one of its executors is a LocalExecutor, and unless ``[tiering] preload_round_modules`` is false. Airflow
calls ``on_starting`` in every component, task processes included, so it does nothing anywhere else. A module that
fails to import (an extra not installed) is left to the round that needs it, which then names the extra.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Iterable

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

SECTION, OPTION = "tiering", "preload_round_modules"

#: What a round imports beyond its source's own modules: a tiering DAG file's imports, the round's builder (core,
#: lake, Spark's settings), the hooks a task opens, and what pyiceberg and the lake import lazily when a round
#: writes, commits and records its status.
ROUND_MODULES: tuple[str, ...] = (
    "airflow_provider_tiering.dag_factory",
    "airflow_provider_tiering.build",
    "airflow_provider_tiering.hooks.tiering",
    "airflow_provider_tiering.hooks.iceberg_catalog",
    "airflow_provider_tiering.hooks.history_table",
    "airflow_provider_tiering.hooks.stream_group",
    "airflow_provider_tiering.lineage",
    "airflow_provider_tiering.lake.merge",
    "airflow_provider_tiering.lake.history_table",
    "pyiceberg.io.pyarrow",
    "pyiceberg.avro.decoder_fast",
    "pyiceberg_core",
    "pyarrow.acero",
    "pyiceberg.catalog.sql",
    "pyiceberg.catalog.rest",
    "pandas",
)


def source_modules() -> list[str]:
    """Every hot store's modules whose extra is installed: its implementation, lister, log reader and drivers."""
    from airflow_provider_tiering.sources.registry import SOURCE_KINDS

    return list(dict.fromkeys(name for kind in SOURCE_KINDS for name in kind.modules()))


def import_all(modules: Iterable[str]) -> tuple[int, list[str]]:
    """Import each module; how many imported, and the failures (``module: error``), which never raise."""
    imported, failed = 0, []
    for name in modules:
        try:
            importlib.import_module(name)
            imported += 1
        except Exception as error:  # an optional extra's module: its round reports it, naming the extra
            failed.append(f"{name}: {type(error).__name__}: {error}")
    return imported, failed


def forks_tasks(component: object) -> bool:
    """Whether ``component`` is the job of ``airflow scheduler`` (a task process forked from its workers inherits
    its ``sys.argv``, not its job) and the scheduler runs a LocalExecutor, whose workers fork the tasks."""
    if sys.argv[1:2] != ["scheduler"]:
        return False
    from airflow.jobs.job import Job

    return isinstance(component, Job) and uses_local_executor()


def uses_local_executor() -> bool:
    """Whether one of the configured executors is a LocalExecutor (or a subclass)."""
    from airflow.executors.executor_loader import ExecutorLoader
    from airflow.executors.local_executor import LocalExecutor

    for name in ExecutorLoader.get_executor_names(validate_teams=False):
        executor, _ = ExecutorLoader.import_executor_cls(name)
        if issubclass(executor, LocalExecutor):
            return True
    return False


def enabled() -> bool:
    from airflow.configuration import conf

    return conf.getboolean(SECTION, OPTION, fallback=True)


@hookimpl
def on_starting(component: object) -> None:
    """Airflow's lifecycle hook: in the scheduler of a LocalExecutor, import the round's modules."""
    if not enabled() or not forks_tasks(component):
        return
    started = time.process_time()
    imported, failed = import_all([*ROUND_MODULES, *source_modules()])
    log.info(
        "Tiering: %d modules a round imports imported before the LocalExecutor's workers start, in %.2f CPU-s "
        "([%s] %s = False turns this off)", imported, time.process_time() - started, SECTION, OPTION,
    )  # fmt: skip
    for failure in failed:
        log.info("Tiering: not preloaded (a round that needs it will say what to install): %s", failure)
