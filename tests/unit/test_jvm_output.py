"""Each line the driver JVM writes is logged at the level it states (spark/jvm_output.py)."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_tiering.spark.jvm_output import LOCAL_NOTICES, STARTUP_NOTICES, line_level

INFO, WARNING, ERROR, DEBUG = logging.INFO, logging.WARNING, logging.ERROR, logging.DEBUG


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("26/11/24 06:04:53 WARN TaskSetManager: Lost task 0.0 in stage 1.0", WARNING),
        ("26/11/24 06:04:53 ERROR Executor: Exception in task 0.0 in stage 1.0 (TID 1)", ERROR),
        ("26/11/24 06:04:53 INFO SparkContext: Running Spark version 4.2.0", INFO),
        ("26/11/24 06:04:53 FATAL SparkContext: gone", logging.CRITICAL),
        ("[16.594s][warning][cds] Preload Warning: Verification failed for X", WARNING),
        ("[0.010s][error][cds] An error has occurred while processing the shared archive file.", ERROR),
        ("WARNING: An illegal reflective access operation has occurred", WARNING),
        ("Error: Could not find or load main class org.apache.spark.deploy.SparkSubmit", ERROR),
        ('Exception in thread "main" java.lang.OutOfMemoryError: Java heap space', ERROR),
        ("Traceback (most recent call last):", ERROR),
        ("worker says hi", INFO),
        # Start-up notices of every session: debug, whatever level they claim.
        ("WARNING: Using incubator modules: jdk.incubator.vector", DEBUG),
        ("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties", DEBUG),
        ('Setting default log level to "WARN".', DEBUG),
        ("26/11/24 06:04:53 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform", DEBUG),
    ],
)
def test_a_line_is_logged_at_the_level_it_states(line: str, level: int) -> None:
    assert line_level(line) == level


def test_a_stack_trace_continues_at_the_level_of_its_first_line() -> None:
    lines = [
        "26/11/24 06:04:53 ERROR Executor: Exception in task 0.0",
        "java.lang.RuntimeException: boom",
        "\tat org.apache.spark.Foo.bar(Foo.scala:12)",
        "Caused by: java.io.IOException: closed",
        "\t... 12 more",
        "26/11/24 06:04:54 WARN TaskSetManager: Lost task 0.0",
    ]
    levels, level = [], INFO
    for line in lines:
        level = line_level(line, level)
        levels.append(level)
    assert levels == [ERROR, ERROR, ERROR, ERROR, ERROR, WARNING]
    assert line_level("java.lang.RuntimeException: boom", INFO) == INFO


def test_the_loopback_host_notice_is_quiet_in_local_mode_only() -> None:
    line = "26/11/24 07:44:43 WARN Utils: Your hostname, vm, resolves to a loopback address: 127.0.0.1; using 10.0.0.2"
    assert line_level(line, notices=STARTUP_NOTICES) == WARNING
    assert line_level(line, notices=STARTUP_NOTICES + LOCAL_NOTICES) == DEBUG
