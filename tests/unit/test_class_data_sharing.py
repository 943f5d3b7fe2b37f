"""The class data sharing archive's bookkeeping: key, lock, publication (no JVM; the JVM side is
tests/integration/test_spark_class_data_sharing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_tiering.spark import cds_archive as cds

JAVA_OPTS = "spark.driver.extraJavaOptions"


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cds.DIR_ENV, str(tmp_path / "cds"))
    return tmp_path / "cds"


def test_the_key_changes_with_the_driver_class_path_and_jvm_options_only(tmp_path: Path) -> None:
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    (spark_home / "jars" / "a.jar").write_bytes(b"a")
    java = tmp_path / "java"
    java.write_bytes(b"java")
    key = cds.archive_key(spark_home, java, {JAVA_OPTS: "-Xmx1g", "spark.sql.shuffle.partitions": "4"})
    assert key == cds.archive_key(spark_home, java, {JAVA_OPTS: "-Xmx1g", "spark.sql.shuffle.partitions": "8"})
    assert key != cds.archive_key(spark_home, java, {JAVA_OPTS: "-Xmx2g"})
    assert key != cds.archive_key(spark_home, java, {JAVA_OPTS: "-Xmx1g", "spark.jars": "/x.jar"})
    (spark_home / "jars" / "b.jar").write_bytes(b"b")
    assert key != cds.archive_key(spark_home, java, {JAVA_OPTS: "-Xmx1g"})


def test_off_when_disabled_or_when_the_user_manages_class_data_sharing(
    archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cds.prepare({JAVA_OPTS: "-Xshare:off"}) is None
    assert cds.prepare({JAVA_OPTS: "-XX:SharedArchiveFile=/elsewhere.jsa"}) is None
    monkeypatch.setenv(cds.DIR_ENV, "off")
    assert cds.prepare({}) is None
    assert not archive_dir.exists()


def test_one_recorder_at_a_time_and_a_dead_recorders_lock_expires(archive_dir: Path) -> None:
    first = cds.prepare({})
    assert first is not None and first.recording is not None
    assert f"-XX:ArchiveClassesAtExit={first.recording}" in first.java_options
    assert "-XX:ErrorFile=" in first.java_options
    assert cds.prepare({}) is None  # another session meanwhile: no sharing, no second recorder
    stale = time.time() - cds.STALE_LOCK_SECONDS - 1
    os.utime(first.lock, (stale, stale))
    second = cds.prepare({})
    assert second is not None and second.recording is not None


def _exited_jvm(code: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    process.wait()
    return process


def test_only_a_whole_archive_from_a_jvm_that_exited_normally_is_published(archive_dir: Path) -> None:
    archive = cds.prepare({})
    assert archive is not None and archive.recording is not None
    archive.recording.write_bytes(b"\x00" * 8192)  # not an archive (no magic)
    cds.publish(archive, _exited_jvm(0))
    assert not archive.path.exists() and not archive.recording.exists() and not archive.lock.exists()

    archive = cds.prepare({})
    assert archive is not None and archive.recording is not None
    archive.recording.write_bytes(bytes.fromhex("a8ab0bf0") + b"\x00" * 8192)
    cds.publish(archive, _exited_jvm(1))  # the JVM failed: whatever it wrote is not trusted
    assert not archive.path.exists() and not archive.lock.exists()

    archive = cds.prepare({})
    assert archive is not None and archive.recording is not None
    archive.recording.write_bytes(bytes.fromhex("a8ab0bf0") + b"\x00" * 8192)
    cds.publish(archive, _exited_jvm(0))
    assert archive.path.exists() and not archive.recording.exists() and not archive.lock.exists()

    mapped = cds.prepare({})
    assert mapped == cds.Archive(archive.path)
    assert f"-XX:SharedArchiveFile={archive.path}" in mapped.java_options
    cds.abandon(mapped)
    assert not archive.path.exists()


def test_recordings_of_processes_that_died_are_removed_after_an_hour(archive_dir: Path) -> None:
    archive_dir.mkdir(parents=True)
    old = archive_dir / "spark-driver-x.jsa.recording-1"
    new = archive_dir / "spark-driver-x.jsa.recording-2"
    for path in (old, new):
        path.write_bytes(b"partial")
    stale = time.time() - cds.STALE_RECORDING_SECONDS - 1
    os.utime(old, (stale, stale))
    assert cds.prepare({}) is not None
    assert not old.exists() and new.exists()
