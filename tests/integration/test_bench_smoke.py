"""The benchmark at a tiny scale factor, so its code cannot rot (figures are not checked here)."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_round import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_benchmark_runs_every_variant_at_small_scale(pg_server, tmp_path, capsys):
    output = tmp_path / "bench.json"
    assert (
        main(
            [
                "--sf",
                "0.01",
                "--repeat",
                "1",
                "--variants",
                "copy-binary,bare-spark,adbc-append,round,idle-round",
                "--dsn",
                pg_server.dsn,
                "--workdir",
                str(tmp_path / "w"),
                "--output",
                str(output),
            ]
        )
        == 0
    )
    report = json.loads(output.read_text())
    rows = report["rows"]
    assert rows > 50_000
    results = report["results"]
    assert results["round"]["last"]["rows"] == rows and results["round"]["last"]["outcome"] == "tiered"
    assert results["bare-spark"]["last"]["rows"] == rows
    assert results["adbc-append"]["last"]["rows"] == rows
    assert results["idle-round"]["last"]["outcome"] == "nothing_to_tier"
    assert "round / variant" in capsys.readouterr().out


def test_spark_connect_benchmark_runs_both_modes_at_small_size(tmp_path, capsys):
    from benchmarks.bench_spark_connect import main as connect_main

    output = tmp_path / "connect.json"
    argv = ["--tables", "2", "--rows", "300", "--workdir", str(tmp_path / "w"), "--output", str(output)]
    assert connect_main(argv) == 0
    report = json.loads(output.read_text())
    assert set(report["report"]) == {"per-task", "connect", "connect+start"}
    for mode in ("per-task", "connect"):
        run = report["runs"][mode]
        assert run["lake_checked"] and [t["rows"] for t in run["tasks"]] == [300, 300]
    assert report["report"]["connect"]["server_start_seconds"] > 0
    assert "shared Spark Connect" in capsys.readouterr().out


def test_spark_cluster_benchmark_runs_one_and_two_workers_at_small_size(pg_server, tmp_path, capsys):
    from benchmarks.bench_spark_cluster import main as cluster_main

    output = tmp_path / "cluster.json"
    argv = ["--rows", "3000", "--split-rows", "500", "--dsn", pg_server.dsn]
    assert cluster_main([*argv, "--workdir", str(tmp_path / "w"), "--output", str(output)]) == 0
    report = json.loads(output.read_text())
    assert report["rows"] == 3000 and set(report["results"]) == {"1", "2"}
    for workers in (1, 2):
        result = report["results"][str(workers)]
        assert result["splits"] >= 2 and result["wall_seconds"] > 0
        assert len({e["worker"] for e in result["executors"]}) == workers
        assert sum(e["tasks"] for e in result["executors"]) >= result["splits"]
    assert "per executor" in capsys.readouterr().out


def test_landing_files_benchmark_runs_both_variants_at_small_size(tmp_path, capsys):
    from benchmarks.bench_landing_files import main as files_main

    output = tmp_path / "files.json"
    argv = ["--files", "40", "--file-kb", "2", "--master", "local[2]", "--output", str(output)]
    assert files_main([*argv, "--workdir", str(tmp_path / "w")]) == 0
    report = json.loads(output.read_text())
    assert report["files"] == 40 and report["lines"] > 40
    assert report["runs"]["tiering round"][0]["rows"] == report["lines"]
    assert report["runs"]["spark json"][0]["rows"] == report["lines"]
    assert "files/s" in capsys.readouterr().out
