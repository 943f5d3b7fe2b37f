"""The dlt baseline (benchmarks/alt_dlt.py) at a tiny scale factor, in its own virtualenv, so it cannot rot.

The first run builds /work/main/.venv-bench (scripts/setup_bench_venv.sh, about a minute from an empty pip
cache); later runs find its stamp up to date and reuse it. Figures are not checked here.
"""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest

from benchmarks.bench_round import REPO, run_variant
from benchmarks.tpch_data import load_lineitem

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH_VENV = REPO / ".venv-bench"


def test_dlt_baseline_loads_lineitem_at_small_scale(pg_server, tmp_path):
    env = {**os.environ, "BENCH_VENV": str(BENCH_VENV)}
    setup = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup_bench_venv.sh")], env=env, capture_output=True, text=True, cwd=REPO
    )
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-4000:]
    bench_python = BENCH_VENV / "bin" / "python"

    load_lineitem(pg_server.dsn, 0.01, tmp_path)
    with psycopg.connect(pg_server.dsn) as conn:
        count_row = conn.execute("select count(*) from lineitem").fetchone()
    assert count_row is not None
    count = count_row[0]

    # exactly as benchmarks/bench_round.py runs it: defaults (the fastest backend, into Iceberg)
    result = run_variant("dlt", pg_server.dsn, tmp_path, bench_python)
    assert result["rows"] == count and result["seconds"] > 0
    assert (result["backend"], result["format"]) == ("connectorx", "iceberg")

    # the other backend and the plain-Parquet route
    command = [str(bench_python), str(REPO / "benchmarks" / "alt_dlt.py"), "--dsn", pg_server.dsn]
    command += ["--workdir", str(tmp_path / "dlt-parquet"), "--backend", "pyarrow", "--format", "parquet"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout
    parquet = json.loads(lines[0].removeprefix("RESULT "))
    assert parquet["rows"] == count
    assert (parquet["backend"], parquet["format"]) == ("pyarrow", "parquet")
