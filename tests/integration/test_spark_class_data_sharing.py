"""Class data sharing with a real driver JVM: the first local session records the archive, quietly, later ones map
it, and a damaged archive (which crashes JDK 17 at start-up) is dropped without failing the session. The JVM's own
output reaches Python logging at the level each line states."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import logging, sys
from airflow_provider_tiering.spark.session import SparkSettings, create_spark_session, stop_spark_session

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s | %(message)s", stream=sys.stderr)
settings = SparkSettings(master="local[2]", conf={"spark.driver.extraJavaOptions": sys.argv[1]})
spark = create_spark_session(settings)
spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("probe").warn("a warning of the JVM's")
assert spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x * 2).collect() == [2, 4]
stop_spark_session(spark)
print("session ok")
"""


def run_with_archive_dir(script: str, *args: str, archive_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a child Python whose class data sharing archives live in ``archive_dir``; it must succeed."""
    env = {**os.environ, "AIRFLOW_PROVIDER_TIERING_CDS_DIR": str(archive_dir)}
    result = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _session(archive_dir: Path, workdir: Path, java_options: str) -> subprocess.CompletedProcess[str]:
    result = run_with_archive_dir(CHILD, java_options, archive_dir=archive_dir, cwd=workdir)
    assert "session ok" in result.stdout
    return result


def test_recorded_once_mapped_after_and_a_damaged_archive_is_dropped(tmp_path: Path) -> None:
    archive_dir, workdir = tmp_path / "cds", tmp_path / "cwd"
    workdir.mkdir()
    class_log = tmp_path / "classes.log"
    # The same options in every run (they are part of the archive's key); the log shows where classes come from.
    java_options = f"-XX:+UseSerialGC -Xlog:class+load=info:file={class_log}"

    recorded = _session(archive_dir, workdir, java_options)
    archives = list(archive_dir.glob("spark-driver-*.jsa"))
    assert len(archives) == 1, sorted(p.name for p in archive_dir.iterdir())
    archive = archives[0]
    # Quiet: none of the JVM's class data sharing warnings, one line saying where the archive goes and how to stop it.
    output = recorded.stdout + recorded.stderr
    assert "[cds" not in output and "Signed JAR" not in output, output[-3000:]
    said = [line for line in output.splitlines() if "class data sharing archive" in line]
    assert len(said) == 1 and str(archive) in said[0] and "AIRFLOW_PROVIDER_TIERING_CDS_DIR=off" in said[0], said
    # The JVM's lines at their own level; its start-up notices below INFO.
    jvm_lines = [line for line in recorded.stderr.splitlines() if " airflow_provider_tiering.spark.jvm | " in line]
    assert any(line.startswith("WARNING ") and "WARN probe: a warning of the JVM's" in line for line in jvm_lines)
    assert not [line for line in jvm_lines if "incubator modules" in line or "NativeCodeLoader" in line]
    assert not list(archive_dir.glob("*.lock")) and not list(archive_dir.glob("*.recording-*"))
    recorded_loads = class_log.read_text()
    assert "shared objects file (top)" not in recorded_loads

    _session(archive_dir, workdir, java_options)
    # Spark's classes now come from the dynamic ("top") layer of the shared archive.
    mapped_loads = class_log.read_text()
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in mapped_loads

    size = archive.stat().st_size
    with archive.open("r+b") as fh:
        fh.truncate(size // 2)
    result = _session(archive_dir, workdir, java_options)
    assert "failed to start with class data sharing archive" in result.stderr
    assert not archive.exists()
    assert not list(workdir.glob("hs_err_pid*.log"))  # the crash report went next to the archive
    assert "org.apache.spark.SparkContext source: file:" in class_log.read_text()
