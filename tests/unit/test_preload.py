"""The scheduler's listener imports a round's modules only in ``airflow scheduler`` with a LocalExecutor, and only when
``[tiering] preload_round_modules`` is on (the modules themselves: tests/integration/test_round_preload.py; under a
real scheduler: tests/e2e/test_database_dag.py)."""

from __future__ import annotations

import sys

import pytest
from airflow.executors import executor_loader
from airflow.jobs.job import Job

from airflow_provider_tiering.plugins import preload


@pytest.fixture
def imports(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(preload, "import_all", lambda modules: (calls.append(list(modules)), (0, []))[1])
    monkeypatch.setattr(preload, "uses_local_executor", lambda: True)
    return calls


def scheduler_job() -> Job:
    return Job.__new__(Job)  # on_starting gets the job from Job.__init__, before its fields are set


def test_the_scheduler_imports_the_rounds_modules(imports: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/bin/airflow", "scheduler", "--skip-serve-logs"])
    preload.on_starting(component=scheduler_job())
    assert len(imports) == 1
    assert {"airflow_provider_tiering.build", "pyiceberg.io.pyarrow"} <= set(imports[0])
    assert "airflow_provider_tiering.sources.sqlite" in imports[0]  # every installed hot store's modules


@pytest.mark.parametrize(
    ("argv", "component"),
    [
        pytest.param(["airflow", "dag-processor"], scheduler_job(), id="dag-processor"),
        pytest.param(["airflow", "triggerer"], scheduler_job(), id="triggerer"),
        pytest.param(["airflow", "api-server"], scheduler_job(), id="api-server"),
        pytest.param(["airflow", "scheduler"], object(), id="a-task-forked-from-the-scheduler"),
    ],
)
def test_other_components_import_nothing(
    imports: list[list[str]], monkeypatch: pytest.MonkeyPatch, argv: list[str], component: object
) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    preload.on_starting(component=component)
    assert imports == []


def test_turned_off_or_without_a_local_executor_nothing_is_imported(
    imports: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["airflow", "scheduler"])
    monkeypatch.setenv("AIRFLOW__TIERING__PRELOAD_ROUND_MODULES", "False")
    preload.on_starting(component=scheduler_job())
    monkeypatch.delenv("AIRFLOW__TIERING__PRELOAD_ROUND_MODULES")
    monkeypatch.setattr(preload, "uses_local_executor", lambda: False)
    preload.on_starting(component=scheduler_job())
    assert imports == []


@pytest.mark.parametrize(
    ("executor", "local"),
    [("LocalExecutor", True), ("CeleryExecutor", False), ("CeleryExecutor,LocalExecutor", True)],
)
def test_a_local_executor_among_the_configured_ones(
    monkeypatch: pytest.MonkeyPatch, executor: str, local: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    monkeypatch.setattr(executor_loader, "_executor_names", [])  # Airflow caches the configured names
    assert preload.uses_local_executor() is local


def test_a_module_that_cannot_be_imported_is_reported_not_raised() -> None:
    imported, failed = preload.import_all(["json", "airflow_provider_tiering.no_such_module"])
    assert imported == 1 and len(failed) == 1 and failed[0].startswith("airflow_provider_tiering.no_such_module: ")
