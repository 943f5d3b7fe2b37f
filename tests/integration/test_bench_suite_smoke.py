"""``make bench`` at a tiny scale (``benchmarks.suite --quick``), so no benchmark of the suite and no part of
the report can rot. Figures are not checked here, only that everything was measured and every row counted.

The first run builds .venv-bench (scripts/setup_bench_venv.sh: dlt, connectorx, matplotlib; about a minute from an
empty pip cache); later runs find its stamp up to date and reuse it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from benchmarks.bench_round import REPO

# Run by `make bench-smoke`, not by `make test` (CI runs it beside the suite's parallel pass; no figure is checked).
pytestmark = pytest.mark.bench


@pytest.mark.timeout(1200)
def test_quick_suite_measures_everything_and_writes_the_report(pg_server, tmp_path, capsys):
    from benchmarks.suite import main

    venv = REPO / ".venv-bench"
    setup = subprocess.run(
        ["bash", "scripts/setup_bench_venv.sh"], env={**os.environ, "BENCH_VENV": str(venv)}, cwd=REPO, text=True
    )
    assert setup.returncode == 0
    results, docs = tmp_path / "results", tmp_path / "docs" / "benchmarks.md"
    argv = ["--quick", "--dsn", pg_server.dsn, "--workdir", str(tmp_path / "w"), "--results", str(results)]
    assert main([*argv, "--docs", str(docs), "--bench-python", str(venv / "bin" / "python")]) == 0

    full = json.loads((results / "full_load.json").read_text())
    rows = full["rows"]
    assert rows > 50_000
    for variant in ("bare-spark", "adbc-append", "dlt", "round"):
        assert full["results"][variant]["last"]["rows"] == rows, variant
    # dlt as benchmarks/bench_round.py runs it by default: its fastest backend, into Iceberg
    assert (full["results"]["dlt"]["last"]["backend"], full["results"]["dlt"]["last"]["format"]) == (
        "connectorx",
        "iceberg",
    )
    assert full["results"]["idle-round"]["last"]["outcome"] == "nothing_to_tier"

    many = json.loads((results / "tpch_tables.json").read_text())
    assert set(many["rows"]) == {"region", "nation", "lineitem"} and many["rows"]["lineitem"] == rows
    assert {r["kind"] for r in many["runs"]} == {"parallel", "sequential", "lineitem"}
    assert all(r["state"] == "success" for r in many["runs"])

    memory = json.loads((results / "memory.json").read_text())
    assert [r["rows"] for r in memory["results"]] == [20_000, 40_000]
    assert all(r["peak_rss"]["task"] > 0 and r["peak_rss"]["jvm"] > 0 for r in memory["results"])

    incremental = json.loads((results / "incremental.json").read_text())
    assert incremental["results"]["incremental/operator"]["rows"] == incremental["new_rows"] > 0
    assert all(check["ok"] for check in incremental["lake_checks"])

    assert full["results"]["cdc-first-load"]["last"]["rows"] == rows

    merges = json.loads((results / "merge.json").read_text())
    scenario = merges["scenarios"]["1%"]
    assert {"merge", "merge-spark", "merge-monthly", "cdc", "full-load"} <= set(scenario)
    merged = scenario["merge"]["merge"]
    assert merged["files_rewritten"] + merged["files_given_deletes"] >= 1 and scenario["full-load"]["rows_read"] > 0
    assert set(merges["checks"]) >= {"1%/merge", "1%/cdc", "1%/merge-spark", "1%/merge-monthly", "1%/full-load"}

    change_memory = json.loads((results / "change_memory.json").read_text())
    assert {(r["rows"], r["mode"]) for r in change_memory} == {(2000, "chunked"), (2000, "held")}
    assert all(r["rounds"] >= 1 and r["growth_written"] > 0 for r in change_memory)

    text = docs.read_text()
    for heading in ("## B1", "## B2", "## B3", "## B4", "| target | measured |"):
        assert heading in text
    for plot in ("throughput.png", "memory.png"):
        assert (docs.parent / "benchmarks" / plot).stat().st_size > 1000
    assert "wrote" in capsys.readouterr().out
