"""The class data sharing (JDK AppCDS) archive of the local Spark driver JVM: where it is, and its recording,
publication and removal.

A local session spends most of its start-up loading and verifying Spark's classes. The first session on a
machine records the classes it loads into an archive; every later session maps that archive instead
(measured here: session start 10.3 → 4.7 s, first job 4.1 → 1.9 s).

JDK 17 crashes at start-up on a truncated archive instead of ignoring it, so an archive is only published
whole: a JVM records into a temporary file named for this process, exits normally when the session is
stopped, and only then is the file renamed into place. An archive that still fails to start a JVM is
deleted and the session started without it. One recorder per archive at a time (a lock file); the other
sessions meanwhile start without sharing.

Recording is quiet: the JVM's class data sharing warnings (a hundred and more lines of "Skipping …: Signed JAR" at
exit) are turned off (``-Xlog:cds*=error``), and the process that starts a recording says once, in one line, where
the archive goes and how to turn it off.

The archive sits in ``$AIRFLOW_PROVIDER_TIERING_CDS_DIR`` (default ``~/.cache/airflow-provider-tiering/
spark-cds``), named by a digest of what it depends on: the Java binary, Spark's jars, the driver's class path
and JVM options. ``AIRFLOW_PROVIDER_TIERING_CDS_DIR=off`` (or the spec's ``spark.class_data_sharing: false``)
turns it off.

A session (``spark/session.py``) prepares the archive before its driver JVM starts, and publishes or abandons it
after; ``spark/class_data_sharing.py`` records it once for the machine (``make spark-cds``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# class_data_sharing.py's logger, where this logged before: logging configurations naming it still apply.
log = logging.getLogger("airflow_provider_tiering.spark.class_data_sharing")

DIR_ENV = "AIRFLOW_PROVIDER_TIERING_CDS_DIR"
DEFAULT_DIR = Path.home() / ".cache" / "airflow-provider-tiering" / "spark-cds"
#: A recorder that has held the lock this long is presumed dead (a round that never stopped its session).
STALE_LOCK_SECONDS = 15 * 60
#: Recordings never published (the process died before stopping its session) are deleted after this.
STALE_RECORDING_SECONDS = 60 * 60
#: Conf keys that change the driver's class path or JVM: an archive is only valid for the same values.
_CLASS_PATH_CONF = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath", "spark.driver.extraJavaOptions")
#: The JDK's own options for class data sharing: when the user sets one, we add none.
_CDS_OPTIONS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "DumpLoadedClassList")
_DYNAMIC_ARCHIVE_MAGIC = 0xF00BABA8


@dataclass(frozen=True)
class Archive:
    """The archive for one driver configuration, and what this process does with it."""

    path: Path
    #: The file this process's JVM records into (``-XX:ArchiveClassesAtExit``), or None when it maps ``path``.
    recording: Path | None = None

    @property
    def lock(self) -> Path:
        return self.path.with_suffix(".lock")

    @property
    def java_options(self) -> str:
        # A JVM that crashes on the archive writes its crash report next to it, not into the task's directory.
        crash_report = f"-XX:ErrorFile={self.path.parent / 'hs_err_pid%p.log'}"
        # Recording warns for every class it cannot archive (signed jars, old class files): errors only.
        quiet = "-Xlog:cds*=error"
        if self.recording is not None:
            return f"-XX:ArchiveClassesAtExit={self.recording} {quiet} {crash_report}"
        return f"-XX:SharedArchiveFile={self.path} {quiet} {crash_report}"


def archive_dir() -> Path | None:
    value = os.environ.get(DIR_ENV)
    if value is not None and value.strip().lower() in ("", "off", "0", "false", "no"):
        return None
    return Path(value) if value else DEFAULT_DIR


def _java_binary() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")  # Spark's launcher prefers it over PATH
    found = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_key(spark_home: Path, java: Path, conf: dict[str, str]) -> str:
    """A digest of everything the archive's validity depends on."""
    jars_dir = spark_home / "jars"
    jars = sorted((p.name, p.stat().st_size) for p in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    stat = java.stat()
    identity = {
        "java": [str(java), stat.st_size, int(stat.st_mtime)],
        "spark_home": str(spark_home),
        "jars": jars,
        "conf": {key: conf.get(key, "") for key in _CLASS_PATH_CONF},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def _take_lock(lock: Path) -> bool:
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
                    lock.unlink()
                    continue
            return False
        with os.fdopen(fd, "w") as fh:
            fh.write(str(os.getpid()))
        return True
    return False


def _remove_stale_recordings(directory: Path) -> None:
    now = time.time()
    for leftover in directory.glob("*.recording-*"):
        with contextlib.suppress(FileNotFoundError):
            if now - leftover.stat().st_mtime > STALE_RECORDING_SECONDS:
                leftover.unlink()


def archive_path(conf: dict[str, str]) -> Path | None:
    """Where the archive of a driver JVM started with ``conf`` is (or would be); None: no sharing."""
    if any(option in conf.get("spark.driver.extraJavaOptions", "") for option in _CDS_OPTIONS):
        return None
    directory = archive_dir()
    java = _java_binary()
    if directory is None or java is None:
        return None
    # pyspark's own lookup of its Spark home (private; the jars it finds there are what the archive depends on).
    from pyspark.find_spark_home import _find_spark_home

    return directory / f"spark-driver-{archive_key(Path(_find_spark_home()), java, conf)}.jsa"


def prepare(conf: dict[str, str]) -> Archive | None:
    """The archive a new local driver JVM should map, or record when there is none yet; None: no sharing."""
    path = archive_path(conf)
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            return Archive(path)
        _remove_stale_recordings(path.parent)
        archive = Archive(path, recording=path.with_name(f"{path.name}.recording-{os.getpid()}"))
        if not _take_lock(archive.lock):
            return None  # another session is recording it
        log.info(
            "Recording Spark's class data sharing archive (over 100 MB; later local sessions start in about half the "
            "time) at %s; %s=off turns it off",
            path,
            DIR_ENV,
        )
        return archive
    except OSError as exc:  # a read-only or full home: run without sharing
        log.info("Spark class data sharing off: %s", exc)
        return None


def publish(archive: Archive, gateway_process: Any) -> None:
    """After the recording JVM was told to exit: wait for it, then rename its archive into place if whole."""
    assert archive.recording is not None
    try:
        try:
            code = gateway_process.wait(timeout=120)
        except Exception as exc:
            log.warning("Spark driver JVM did not exit after its session stopped: %s", exc)
            return
        if code == 0 and _is_whole(archive.recording):
            os.replace(archive.recording, archive.path)
            log.debug("Spark class data sharing archive written: %s", archive.path)
        else:
            log.info("Spark class data sharing archive not kept (JVM exit code %s)", code)
    finally:
        with contextlib.suppress(FileNotFoundError):
            archive.recording.unlink()
        with contextlib.suppress(FileNotFoundError):
            archive.lock.unlink()


def abandon(archive: Archive) -> None:
    """The session could not start with this archive: delete it (mapping) or give up the recording."""
    for path in (archive.recording or archive.path, archive.lock if archive.recording else None):
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _is_whole(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            magic = int.from_bytes(fh.read(4), "little")
        return magic == _DYNAMIC_ARCHIVE_MAGIC and path.stat().st_size > 4096
    except OSError:
        return False
