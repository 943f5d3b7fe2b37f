from __future__ import annotations

from airflow_provider_tiering.core.error_text import (
    MAX_ERROR_BYTES,
    condense_jvm_error,
    condense_python_traceback,
    describe_error,
    mask_secrets,
)

JVM_TRACE = """py4j.protocol.Py4JJavaError: An error occurred while calling o52.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$2(DAGScheduler.scala:2792)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)
Caused by: java.net.ConnectException: Connection refused (Connection refused)
\tat java.base/sun.nio.ch.Net.connect0(Native Method)
"""


def test_jvm_trace_is_condensed_to_root_cause():
    text = condense_jvm_error(JVM_TRACE)
    assert text.startswith("java.net.ConnectException: Connection refused")
    assert "DAGScheduler" not in text


def test_known_and_pattern_secrets_are_masked():
    text = "could not connect to postgresql://tiering:s3cr3t-pw@db:5432/x (password=s3cr3t-pw token: abcd1234)"
    masked = mask_secrets(text, ["s3cr3t-pw"])
    assert "s3cr3t-pw" not in masked and "abcd1234" not in masked
    assert "postgresql://tiering:***@db" in masked


def test_uri_password_is_masked_without_being_known():
    assert mask_secrets("postgresql://u:hunter22@h/db") == "postgresql://u:***@h/db"


def test_error_text_is_bounded():
    text = describe_error(RuntimeError("x" * 1_000_000))
    assert len(text.encode()) <= MAX_ERROR_BYTES and text.endswith("[truncated]")


def test_error_names_type_and_cause():
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError as inner:
            raise RuntimeError("round failed") from inner
    except RuntimeError as exc:
        assert describe_error(exc) == "RuntimeError: round failed (caused by ConnectionError: refused)"


PY4J_WITHOUT_CAUSE = """An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.
: java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.
This stopped SparkContext was created at:

org.apache.spark.api.java.JavaSparkContext.<init>(JavaSparkContext.scala:59)
py4j.Gateway.invoke(Gateway.java:238)
\tat org.apache.spark.SparkContext.assertNotStopped(SparkContext.scala:128)
\tat org.apache.spark.sql.classic.SparkSession.<init>(SparkSession.scala:125)
"""


def test_py4j_error_without_cause_keeps_the_java_exception():
    # An unreachable Spark master fails the session like this: the Java exception is on Py4J's ": " line.
    assert condense_jvm_error(PY4J_WITHOUT_CAUSE) == (
        "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext. "
        "(in: An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.)"
    )


PYTHON_WORKER_TRACE = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 3622, in main
    process()
  File "/work/main/airflow_provider_tiering/sources/postgres.py", line 87, in _connect
    raise SourceError(f"{self.display_name}: cannot connect: {exc}") from None
airflow_provider_tiering.core.errors.SourceError: postgres table "t": cannot connect: IO: [libpq] connection
refused
"""


def test_python_worker_traceback_is_condensed_to_its_exception():
    text = condense_python_traceback(PYTHON_WORKER_TRACE)
    assert text == (
        'SourceError: postgres table "t": cannot connect: IO: [libpq] connection\nrefused'
        " (in: An exception was thrown from the Python worker)"
    )
    assert condense_python_traceback("no traceback here") == "no traceback here"


def test_python_worker_exception_without_a_message_keeps_its_name():
    trace = 'Worker failed:\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\nOSError\n'
    assert condense_python_traceback(trace) == "OSError (in: Worker failed)"


def test_spark_python_error_is_not_repeated_by_its_java_cause():
    class PythonException(Exception):
        pass

    class Py4JJavaError(Exception):
        pass

    worker = (
        'Traceback (most recent call last):\n  File "w.py", line 1, in f\n    g()\nOSError: [Errno 28] No space left\n'
    )
    java = (
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted\n"
        f"Caused by: org.apache.spark.api.python.PythonException: {worker}"
        "\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:600)\n"
    )
    try:
        try:
            raise Py4JJavaError(java)
        except Py4JJavaError:
            raise PythonException(f"An exception was thrown from the Python worker:\n{worker}") from None
    except PythonException as exc:
        text = describe_error(exc)
    assert (
        text
        == "PythonException: OSError: [Errno 28] No space left (in: An exception was thrown from the Python worker)"
    )


def test_every_error_crosses_processes_with_its_class_and_arguments() -> None:
    """Errors travel pickled between processes (a Spark task's refusal, a round in a child process): each keeps its
    class, its arguments and its message."""
    import inspect
    import pickle

    from airflow_provider_tiering.core import errors

    kinds = [k for _, k in inspect.getmembers(errors, inspect.isclass) if issubclass(k, errors.TieringError)]
    assert len(kinds) > 10
    for kind in kinds:
        error = kind(f"{kind.__name__}: table t, column 'c'")
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is kind and back.args == error.args and str(back) == str(error)


def test_a_spark_connect_tasks_refusal_travels_as_data_and_only_a_known_refusal_is_rebuilt() -> None:
    """Spark Connect hands a task's results back as rows: a refusal travels as its class name and arguments (never
    as code to run), and the driver rebuilds only one of the package's NotRetryable errors."""
    import json

    import pytest

    from airflow_provider_tiering.core.errors import SourceError, UnsupportedColumnType
    from airflow_provider_tiering.core.ports import WrittenFile
    from airflow_provider_tiering.spark.write_job import _from_result_row, _Refused, _result_row

    row = _result_row(_Refused(UnsupportedColumnType("table t: column 'c' holds a value no lake type can hold")))
    back = _from_result_row(row)
    assert isinstance(back, _Refused) and type(back.error) is UnsupportedColumnType
    assert back.error.args == ("table t: column 'c' holds a value no lake type can hold",)
    written = WrittenFile("s3://b/f.parquet", 3, 10, 1, '["x"]')
    assert _from_result_row(_result_row(written)) == written
    for forged in ({"error": "SourceError", "args": ["x"]}, {"error": "os.system", "args": ["rm -rf /"]}):
        with pytest.raises(SourceError, match="unknown error"):
            _from_result_row({**row, "refused": json.dumps(forged)})
