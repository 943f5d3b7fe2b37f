"""Build the Spark session a round runs on: local mode, a cluster master, or a Spark Connect server."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_tiering.core.errors import SparkUnavailable
from airflow_provider_tiering.spark import cds_archive, jvm_output

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"

# Local defaults: nothing listens beyond loopback, no UI port, few shuffle partitions.
_LOCAL_DEFAULTS: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.python.worker.reuse": "true",
    # How long the JVM waits for the driver's Python to connect to a job's result socket (default 15 s): on a busy
    # worker the connection can come later, and the collect then fails with "Connection reset by peer".
    "spark.python.authenticate.socketTimeout": "120s",
    # In local mode the JVM only schedules (rows flow through Arrow in Python workers): C1-only JIT and
    # the serial GC halve its CPU cost (measured: 13.6 vs 25.5 CPU-s for start-up plus the first job).
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}

#: Spark's own name for this machine's loopback; a standalone master there means a one-machine cluster.
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})

# A standalone master on loopback (scripts/spark_standalone.sh): the driver must be reachable by executors on
# 127.0.0.1 and listen nowhere else (its web UI binds SPARK_LOCAL_IP, set below). Driver and executor JVMs only
# schedule and pass split ids and file metadata to Python workers, hence the same cheap JIT and GC as local mode.
_LOOPBACK_CLUSTER_DEFAULTS: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.python.worker.reuse": "true",
    "spark.python.authenticate.socketTimeout": "120s",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def is_loopback_master(master: str) -> bool:
    """True for ``spark://`` masters on this machine's loopback only (``spark://127.0.0.1:7077``)."""
    if not master.startswith("spark://"):
        return False
    hosts = [address.rsplit(":", 1)[0] for address in master.removeprefix("spark://").split(",")]
    return all(host in _LOOPBACK_HOSTS for host in hosts)


@dataclass(frozen=True)
class SparkSettings:
    """Where Spark runs. ``remote`` (``sc://host:port``) selects Spark Connect; else ``master``."""

    master: str = DEFAULT_MASTER
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    app_name: str = "airflow-provider-tiering"
    #: Map (or record) a class data sharing archive when this process starts a local driver JVM.
    class_data_sharing: bool = True


#: This process's driver JVM records a class data sharing archive, published when its session stops.
_recording: cds_archive.Archive | None = None


#: How long a standalone master may take to accept a TCP connection before it counts as unreachable.
MASTER_PROBE_SECONDS = 10.0


def check_master_reachable(master: str, timeout: float = MASTER_PROBE_SECONDS) -> None:
    """Raise :class:`SparkUnavailable` unless a ``spark://`` master (one of, for a list) accepts connections.

    Spark's standalone client retries an unreachable master for a minute (3 registrations of 20 s, fixed in
    Spark) and then fails with "Cannot call methods on a stopped SparkContext", which names neither the
    master nor the cause.
    """
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {exc}")
    raise SparkUnavailable(f"Spark master {master} is unreachable ({'; '.join(failures)})")


def create_spark_session(settings: SparkSettings) -> Any:
    """Start (or attach to) a Spark session. Python workers run this interpreter."""
    # py4j logs every connection at INFO, even from __del__ at interpreter exit (after streams close).
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder: Any
    driver_jvm: dict[str, str] | None = None  # how to launch this process's driver JVM (None: Spark Connect)
    if settings.remote:
        # Spark Connect's own builder: the classic one refuses a remote session while a local one runs in this
        # process (SESSION_ALREADY_EXIST), and it sets SPARK_CONNECT_MODE_ENABLED in os.environ for good, after
        # which every classic session of this process or its child processes fails (CONNECT_URL_NOT_SET).
        from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

        builder = ConnectSparkSession.builder.appName(settings.app_name).remote(settings.remote)
        conf = dict(settings.conf)
    else:
        from pyspark.sql import SparkSession

        check_master_reachable(settings.master)
        builder = SparkSession.builder.appName(settings.app_name).master(settings.master)
        conf = session_conf(settings)
        driver_jvm = {"spark.master": settings.master, "spark.app.name": settings.app_name}
    archive = None
    local = not settings.remote and settings.master.startswith("local")
    if settings.class_data_sharing and local:
        archive = _prepare_class_data_sharing(conf)
    try:
        return _get_or_create(builder, conf, archive, driver_jvm, local=local)
    except Exception as exc:
        if archive is None:
            raise
        jvm_died = "JAVA_GATEWAY_EXITED" in str(exc)
        if archive.recording is None and not jvm_died:
            raise
        cds_archive.abandon(archive)  # give up the recording, or drop the archive the JVM died on
        if not jvm_died:
            raise
        # The only JVM options we added are the archive's: a JVM that dies on them must not keep rounds from starting.
        log.warning("Spark driver JVM failed to start with class data sharing archive %s; removed it", archive.path)
        return _get_or_create(builder, conf, None, driver_jvm, local=local)


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """The Spark conf a classic (not Connect) session of ``settings`` is built with: our defaults, then the user's."""
    if settings.master.startswith("local"):
        conf = dict(_LOCAL_DEFAULTS)
    elif is_loopback_master(settings.master):
        conf = dict(_LOOPBACK_CLUSTER_DEFAULTS)
        # Read by the driver JVM at launch: its web UI (on by default for a cluster) binds this address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    else:
        conf = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    conf["spark.pyspark.python"] = os.environ.get("PYSPARK_PYTHON", sys.executable)
    conf.update(settings.conf)
    return conf


def _prepare_class_data_sharing(conf: dict[str, str]) -> cds_archive.Archive | None:
    from pyspark import SparkContext

    # pyspark keeps its JVM gateway in a private class attribute; no public way tells whether the JVM is up.
    if SparkContext._gateway is not None:  # this process's JVM is already up: its options are fixed
        return None
    return cds_archive.prepare(conf)


def _get_or_create(
    builder: Any,
    conf: dict[str, str],
    archive: cds_archive.Archive | None,
    driver_jvm: dict[str, str] | None,
    *,
    local: bool,
) -> Any:
    global _recording
    conf = dict(conf)
    if archive is not None:
        key = "spark.driver.extraJavaOptions"
        conf[key] = f"{conf.get(key, '')} {archive.java_options}".strip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    if driver_jvm is not None:
        # Started here rather than by the builder, so that its output is logged at its own level (jvm_output.py).
        jvm_output.launch_driver_jvm({**driver_jvm, **conf}, local=local)
    session = builder.getOrCreate()
    if archive is not None and archive.recording is not None:
        _recording = archive
    return session


def stop_spark_session(spark: Any) -> None:
    """Stop a session; if this process's driver JVM records a class data sharing archive, let it exit and
    publish the archive (the next session in this process starts a new JVM)."""
    global _recording
    classic = getattr(spark, "_sc", None) is not None  # a Connect session leaves this process's local JVM alone
    spark.stop()
    if not classic:
        return
    archive, _recording = _recording, None
    if archive is None:
        return
    from pyspark import SparkContext

    # Ending the driver JVM (so it writes the archive) needs pyspark's private gateway and its launcher process.
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None or process.stdin is None:
        cds_archive.abandon(archive)
        return
    gateway.close()
    process.stdin.close()  # Spark's Python gateway server exits on EOF of its stdin; the JVM writes the archive
    SparkContext._gateway = None
    SparkContext._jvm = None
    cds_archive.publish(archive, process)
