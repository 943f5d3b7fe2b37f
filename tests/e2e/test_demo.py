"""``make demo`` on a fresh machine (no class data sharing archive yet) reads as a short account: the archive's one
line, the demo's steps with their tables, rows and times, the lake checked against the hot store, and the status
table; none of the JVM's, Spark's, pip's or Airflow's warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOISE = (
    "[cds",  # the JVM's class data sharing warnings
    "Signed JAR",
    "WARNING: Using incubator modules",  # the JVM's start-up notice
    "log4j",
    "NativeCodeLoader",
    "Looking in indexes",  # pip
    "WARNING: Retrying",
    "graphviz",  # Airflow's `dags test`
    "Skipping masking",
    "Traceback",
)


@pytest.mark.timeout(600)
def test_demo_output_is_its_progress_and_the_status_table(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TIERING_DEMO_HOME": str(tmp_path / "demo"),
        "AIRFLOW_PROVIDER_TIERING_CDS_DIR": str(tmp_path / "cds"),  # as on a fresh machine: recorded first
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    output = ""
    for command in (  # what `make demo` runs once its virtualenv is set up
        [sys.executable, "-m", "airflow_provider_tiering.spark.class_data_sharing"],
        [sys.executable, str(REPO / "demo" / "run_demo.py")],
    ):
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
        output += done.stdout + done.stderr
        assert done.returncode == 0, output[-5000:]

    lines = output.splitlines()
    assert not [line for line in lines if any(noise in line for noise in NOISE)], output
    assert len(lines) <= 40, output
    assert all(len(line) <= 120 for line in lines if str(tmp_path) not in line), output  # but for paths
    assert lines[0].startswith("Spark class data sharing archive: ") and "_CDS_DIR=off turns it off" in lines[0]
    assert (tmp_path / "cds").is_dir() and list((tmp_path / "cds").glob("*.jsa"))
    steps = [line for line in lines if line.startswith("[")]
    assert [step.split(" ...")[0] for step in steps] == [
        "[1/4] Airflow metadata database (SQLite)",
        "[2/4] round 1",
        "[3/4] new rows arrive",
        "[4/4] round 2",
    ]
    assert "customers 500 rows, orders 20,000 rows, page_views 5,000 rows" in steps[1]
    assert "customers nothing new, orders 2,500 rows, page_views 1,000 rows" in steps[3]
    assert any(line.startswith("All tables TIERED and the lake matches the hot store") for line in lines)

    # It ends with the status table, one TIERED row per table, then its legend.
    table = lines[lines.index("$ airflow tiering status") + 1 :]
    assert table[0].split()[:4] == ["TABLE", "STATUS", "EPOCH", "LAST"]
    rows = {line.split()[0]: line.split() for line in table[1:4]}
    assert set(rows) == {"customers", "orders", "page_views"} and all(r[1] == "TIERED" for r in rows.values())
    assert rows["orders"][2] == "2" and "2,500" in rows["orders"]
    assert any(line.startswith("BACKLOG: ") for line in table[4:])

    # And then the lake's status table, read back in SQL (DuckDB): a TIERED row per table, at its epoch.
    sql = lines[[i for i, line in enumerate(lines) if "in SQL" in line][-1] :]
    assert "FROM sys.lake_tiering_status" in "\n".join(sql), output
    header = next(i for i, line in enumerate(sql) if line.split()[:2] == ["table_name", "status"])
    found = {line.split()[0]: line.split() for line in sql[header + 2 : header + 5]}
    assert set(found) == {"customers", "orders", "page_views"}, output
    assert all(r[1] == "TIERED" for r in found.values()) and found["orders"][2] == "2", output
