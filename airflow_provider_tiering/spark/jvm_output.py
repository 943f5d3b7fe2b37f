"""The local driver JVM's stdout and stderr, logged line by line at the level each line states.

pyspark lets the driver JVM inherit the Python process's stdout and stderr. Under Airflow, a task's stderr is logged
at error level line by line (``error  WARNING: Using incubator modules``), and the JVM's own warnings go to stdout
unlabelled. So this process launches the JVM with pipes instead (pyspark's ``launch_gateway`` takes ``popen_kwargs``
for that), and one thread per pipe logs each line to the ``airflow_provider_tiering.spark.jvm`` logger at the level the
line states: log4j's ``WARN``/``ERROR``/``INFO`` (Spark's console pattern ``yy/MM/dd HH:mm:ss LEVEL Logger: …``), the
JVM's ``WARNING:`` and unified logging's ``[warning]``, Python's ``Traceback``; a line that states none (a stack
trace's ``at …``) keeps the level of the line before it. Python workers of local mode inherit the JVM's streams, so
their output arrives here too. Start-up notices that every session prints and that say nothing about the round
(the incubator module, log4j's profile, the native Hadoop library) are logged at debug.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import IO

log = logging.getLogger("airflow_provider_tiering.spark.jvm")

_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
# Spark's log4j console pattern: ``26/11/24 06:04:53 WARN Utils: …``.
_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
# The JVM's unified logging (``[0.123s][warning][cds] …``) and its plain notices (``WARNING: …``, ``Error: …``).
_UNIFIED = re.compile(r"^(?:\[[^\]]*\])*?\[(trace|debug|info|warning|error)\s*\]", re.IGNORECASE)
_PREFIX = re.compile(r"^(WARNING|ERROR|Error|Exception|Traceback)\b")
# A stack trace: its exception (``java.lang.RuntimeException: …``), frames, causes.
_TRACE = re.compile(r"^(?:\s|Caused by:|\.\.\.|[\w$.]+(?:Exception|Error|Throwable)\b)")

#: Lines every local session prints at start-up, none of them about the round: logged at debug.
STARTUP_NOTICES = (
    re.compile(r"^WARNING: Using incubator modules"),
    re.compile(r"^Using Spark's default log4j profile"),
    re.compile(r'^Setting default log level to "'),
    re.compile(r"^To adjust logging level use sc\.setLogLevel"),
    re.compile(r" WARN NativeCodeLoader: Unable to load native-hadoop library"),
)
#: Only in local mode, where the driver binds 127.0.0.1 whatever the host name resolves to.
LOCAL_NOTICES = (
    re.compile(r" WARN Utils: Your hostname, .* resolves to a loopback address"),
    re.compile(r" WARN Utils: Set SPARK_LOCAL_IP if you need to bind to another address"),
)


def line_level(line: str, previous: int = logging.INFO, notices: Iterable[re.Pattern[str]] = STARTUP_NOTICES) -> int:
    """The logging level of one line of the JVM's output; ``previous`` for a line that states none."""
    if any(pattern.search(line) for pattern in notices):
        return logging.DEBUG
    if match := _LOG4J.match(line):
        return _LEVELS[match.group(1)]
    if match := _UNIFIED.match(line):
        return _LEVELS[match.group(1).upper()]
    if match := _PREFIX.match(line):
        word = match.group(1)
        return logging.WARNING if word == "WARNING" else logging.ERROR
    if _TRACE.match(line):
        return previous  # a stack trace's continuation
    return logging.INFO


def _forward(stream: IO[bytes], notices: tuple[re.Pattern[str], ...]) -> None:
    level = logging.INFO
    with stream:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip()
            if not line:
                continue
            level = line_level(line, level, notices)
            log.log(level, "%s", line)


def _forward_pipes(*, local: bool) -> tuple[list[int], list[threading.Thread]]:
    """Two pipes' write ends, for a child's stdout and stderr, and the threads logging what arrives at their ends."""
    notices = STARTUP_NOTICES + LOCAL_NOTICES if local else STARTUP_NOTICES
    write_ends, readers = [], []
    for _ in range(2):
        read_end, write_end = os.pipe()
        reader = threading.Thread(
            target=_forward, args=(os.fdopen(read_end, "rb"), notices), name="spark-jvm-output", daemon=True
        )
        reader.start()
        write_ends.append(write_end)
        readers.append(reader)
    return write_ends, readers


def launch_driver_jvm(conf: Mapping[str, str], *, local: bool) -> None:
    """Start this process's driver JVM with ``conf`` (as a classic session's builder would), its output logged.

    A no-op when the JVM is already up, or when this process was given one (``PYSPARK_GATEWAY_PORT``, spark-submit).
    Raises what pyspark raises when the JVM does not start (``JAVA_GATEWAY_EXITED``); its output is logged first.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    # pyspark keeps its JVM gateway in a private class attribute; no public way tells whether the JVM is up.
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    # Pipes of our own rather than PIPE: a JVM that dies at start-up raises before pyspark returns its process.
    (stdout, stderr), readers = _forward_pipes(local=local)
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": stdout, "stderr": stderr})
    except BaseException:
        os.close(stdout)
        os.close(stderr)
        for reader in readers:  # the JVM's last words (why it did not start) are logged before the error
            reader.join(timeout=5)
        raise
    os.close(stdout)  # the JVM holds its own copies; the readers end when it exits
    os.close(stderr)
    # The call SparkContext makes with a gateway it is handed (private: a session's builder takes no gateway).
    SparkContext._ensure_initialized(gateway=gateway)
