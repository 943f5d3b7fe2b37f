"""The DAG-run benchmark at a few tables under a real Airflow, so its code cannot rot (timings are not checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_dag_run import EMPTY, NOT_DUE, NOTHING_NEW, main

pytestmark = pytest.mark.bench


@pytest.mark.timeout(900)
def test_bench_dag_run_smoke(tmp_path: Path) -> None:
    output = tmp_path / "dag_run.json"
    argv = ["--tables", "3", "--repeat", "1", "--warmup", "0", "--profile", "1", "--timelines", "1"]
    assert main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0

    report = json.loads(output.read_text())
    assert report["tables"] == 3 and report["prepared"]["rows"] == 3 * report["rows_per_table"]
    runs = {run["dag_id"]: run for run in report["runs"]}
    assert set(runs) == {EMPTY, NOTHING_NEW, NOT_DUE}
    for run in runs.values():
        assert run["state"] == "success" and run["run_seconds"] is not None and run["client_seconds"] > 0
    assert runs[EMPTY]["task_states"] == {"success": 3}
    # Nothing to tier / not due: every table task skips, the summary task succeeds.
    assert runs[NOTHING_NEW]["task_states"] == {"skipped": 3, "success": 1}
    assert runs[NOT_DUE]["task_states"] == {"skipped": 3, "success": 1}
    assert {"ratio_run", "ratio_client"} <= set(report["summary"][NOTHING_NEW])
    assert report["profile"]["tiering_task_steps"]["run_round: nothing to tier"] > 0
