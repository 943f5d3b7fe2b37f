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
