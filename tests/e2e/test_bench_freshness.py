"""The freshness and idle-tables benchmarks at a few tables and a short window under a real Airflow, so their code
cannot rot (data ages and CPU are reported, not checked against bounds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_freshness import main

pytestmark = pytest.mark.bench


@pytest.mark.timeout(900)
def test_bench_freshness_smoke(tmp_path: Path) -> None:
    output = tmp_path / "freshness.json"
    # A window longer than the one DAG's 30 s schedule, so that a run of it starts tasks within it.
    argv = ["--tables", "4", "--minutes", "0.6", "--backlog-rows", "20000", "--sample-every", "2"]
    assert main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0

    report = json.loads(output.read_text())
    assert [r["setup"] for r in report["results"]] == ["one-dag", "own-clocks"]
    for result in report["results"]:
        ages = result["data_age_seconds"]
        assert set(ages) == {"30s", "300s", "backlog_table"}, ages
        assert ages["30s"]["tables"] == 2 and ages["300s"]["tables"] == 1
        for klass in ("30s", "300s"):
            assert ages[klass]["samples"] >= ages[klass]["tables"] * 3 and 0 <= ages[klass]["p50"] <= ages[klass]["max"]
        assert ages["backlog_table"]["table"] == "t03_append_300"
        assert result["task_starts_per_minute"] > 0
        cpu = result["cpu"]
        assert cpu["task_processes_cpu_s"] > 0 and cpu["airflow_own_cpu_s"] > 0, cpu
        assert {"scheduler", "supervisors", "postgres", "machine_busy"} <= set(cpu["by_process_cpu_s"]), cpu


@pytest.mark.timeout(900)
def test_bench_idle_tables_smoke(tmp_path: Path) -> None:
    from benchmarks.bench_idle_tables import main as idle_main

    output = tmp_path / "idle.json"
    argv = ["--tables", "3", "--minutes", "0.2", "--setups", "own-clocks", "--workdir", str(tmp_path / "w")]
    assert idle_main([*argv, "--output", str(output)]) == 0
    (result,) = json.loads(output.read_text())["results"]
    assert result["setup"] == "own-clocks" and result["tables"] == 3
    assert result["machine_cpu_s_per_hour"] > 0 and result["airflow_own_cpu_s_per_hour"] > 0, result


@pytest.mark.timeout(1800)
def test_bench_stream_groups_under_the_scheduler_smoke(tmp_path: Path) -> None:
    from benchmarks.bench_stream_groups import main as groups_main

    output = tmp_path / "groups.json"
    argv = ["--parts", "scheduler", "--hot", "postgres,mariadb", "--tables", "4", "--busy", "2", "--minutes", "0.5",
            "--busy-freshness", "10", "--idle-freshness", "30", "--read-every", "5",
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert groups_main([*argv, "--output", str(output)]) == 0
    results = json.loads(output.read_text())["scheduler"]
    assert [(r["hot"], r["setup"]) for r in results] == [
        ("postgres", "per_table"), ("postgres", "group"), ("mariadb", "per_table"), ("mariadb", "group")
    ]  # fmt: skip
    assert [r["slots"] for r in results[:2]] == [4, 1]
    for result in results:
        ages = result["data_age_seconds"]
        assert set(ages) == {"10s", "30s"} and result["task_starts_per_minute"] > 0, result
        assert ages["10s"]["samples"] > 0 and ages["10s"]["max"] > 0, result  # the busy tables were measured


@pytest.mark.timeout(2400)
def test_bench_many_tables_smoke(tmp_path: Path) -> None:
    from benchmarks.bench_many_tables import main as many_main

    output = tmp_path / "many.json"
    argv = ["--tables", "10", "--own-clocks-tables", "4", "--minutes", "0.5", "--idle-minutes", "0.3",
            "--probe-every", "10", "--freshness", "20", "--repeat", "1"]  # fmt: skip
    argv += ["--workdir", str(tmp_path / "w")]
    assert many_main([*argv, "--output", str(output)]) == 0
    database, own_clocks = json.loads(output.read_text())["results"]
    assert (database["setup"], database["tables"], database["busy_tables"]) == ("database", 10, 1)
    assert own_clocks["setup"] == "own-clocks" and own_clocks["tables"] == 4
    assert database["data_age_seconds"]["20s"]["samples"] > 0
    assert 0 < database["busy"]["listing_queries"] <= 4  # a probe every 10 s in a 30 s window
    assert "idle_busy_only" in database and database["idle_cost"]["cpu_s_per_idle_table_hour"] is not None
    for result in (database, own_clocks):
        assert result["surfaces"]["page_list_tables"] >= result["busy_tables"]
        assert result["parse"]["median_s"] > 0 and result["busy"]["task_starts_per_minute"] > 0
