"""A PostgreSQL source whose Spark split tasks misbehave on their first attempt, once their data files are written:
some fail (Spark retries the task), some stall (Spark's speculation runs a copy elsewhere), some kill their
executor's JVM (SIGKILL: a lost executor, whose tasks Spark runs again on another).

The fault strikes in ``take_rejects``, which the split writer calls after it has written and closed the split's
data files: a real task attempt that dies, or is overtaken, with its files already in the lake's staging directory.
Each attempt records itself in ``<record_dir>/split-<k>-attempt-<n>.json``: its Spark task attempt id and the data
files it had written when the fault struck (found under ``lake_dir`` by the writer's file names).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.planner import RangeSplit
from airflow_provider_tiering.lake.merge_rewrite import MergeRewriteReader, MergeSplit
from airflow_provider_tiering.sources.postgres.cursor_source import PostgresSource


class InjectedTaskFailure(RuntimeError):
    """What a failing first attempt raises: Spark retries the task."""


class FirstAttemptFaults(PostgresSource):
    """``fail``: split indexes whose first attempt raises after writing its files; ``stall``: split index ->
    seconds its first attempt sleeps after writing them (a copy started meanwhile by speculation wins);
    ``kill_executor``: split indexes whose first attempt SIGKILLs the executor JVM it runs in."""

    def __init__(
        self,
        source: PostgresSource,
        record_dir: str,
        lake_dir: str,
        *,
        fail: Sequence[int] = (),
        stall: dict[int, float] | None = None,
        kill_executor: Sequence[int] = (),
    ) -> None:
        super().__init__(source.spec, source.connection)
        self.record_dir = record_dir
        self.lake_dir = lake_dir
        self.fail = tuple(fail)
        self.stall = dict(stall or {})
        self.kill_executor = tuple(kill_executor)
        self._split_index: int | None = None

    def select_split_sql(self, split: RangeSplit, schema: pa.Schema) -> str:
        # Every read of a split builds its statement here, whichever reader runs it (this source, or the reader of
        # the round's exported snapshot, which carries this source to the task).
        self._split_index = split.index
        return super().select_split_sql(split, schema)

    def take_rejects(self) -> list[dict[str, Any]]:
        from pyspark import TaskContext

        rejects = super().take_rejects()
        context = TaskContext.get()
        if context is None or self._split_index is None:
            raise RuntimeError("FirstAttemptFaults only runs in Spark split tasks")
        index, attempt, written = record_attempt(context, self._split_index, self.record_dir, self.lake_dir)
        if attempt == 0 and index in self.fail:
            raise InjectedTaskFailure(f"split {index}: first attempt fails after writing {len(written)} file(s)")
        if attempt == 0 and index in self.stall:
            time.sleep(self.stall[index])
        if attempt == 0 and index in self.kill_executor:
            os.kill(executor_jvm_pid(), signal.SIGKILL)
            time.sleep(60)  # the executor's end takes its Python workers with it
        return rejects


class MergeRewriteFaults(MergeRewriteReader):
    """A merge's rewrite whose tasks record each attempt like :class:`FirstAttemptFaults`' and whose first attempt
    of the split indexes in ``kill_executor`` SIGKILLs its executor JVM once its files are written."""

    def __init__(
        self, *args: Any, record_dir: str, lake_dir: str, kill_executor: Sequence[int] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.record_dir = record_dir
        self.lake_dir = lake_dir
        self.kill_executor = tuple(kill_executor)
        self._split_index: int | None = None

    def read_split(self, split: MergeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        self._split_index = split.index
        yield from super().read_split(split, schema)

    def take_rejects(self) -> list[dict[str, Any]]:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None or self._split_index is None:
            raise RuntimeError("MergeRewriteFaults only runs in Spark split tasks")
        index, attempt, _ = record_attempt(context, self._split_index, self.record_dir, self.lake_dir)
        if attempt == 0 and index in self.kill_executor:
            os.kill(executor_jvm_pid(), signal.SIGKILL)
            time.sleep(60)  # the executor's end takes its Python workers with it
        return []


def record_attempt(context: Any, index: int, record_dir: str, lake_dir: str) -> tuple[int, int, list[str]]:
    """Record a split task's attempt in ``<record_dir>/split-<k>-attempt-<n>.json``: its Spark task attempt id and the
    data files it has written (found under ``lake_dir`` by the writer's file names); returns (split index, attempt
    number, those files)."""
    attempt, task_attempt_id = context.attemptNumber(), context.taskAttemptId()
    written = sorted(str(p) for p in Path(lake_dir).rglob(f"split-{index:05d}-task-{task_attempt_id}-*"))
    record = {"split": index, "attempt": attempt, "task_attempt_id": task_attempt_id, "files": written}
    Path(record_dir, f"split-{index}-attempt-{attempt}.json").write_text(json.dumps(record))
    return index, attempt, written


def executor_jvm_pid() -> int:
    """The pid of the executor JVM above this Python worker (its daemon's parent, in standalone mode)."""
    pid = os.getpid()
    while pid > 1:
        if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no executor JVM above this process")


def attempts(record_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Split index -> the records of its attempts that reached the fault point, by attempt number."""
    found: dict[int, list[dict[str, Any]]] = {}
    for path in record_dir.glob("split-*-attempt-*.json"):
        record = json.loads(path.read_text())
        found.setdefault(record["split"], []).append(record)
    return {index: sorted(records, key=lambda r: r["attempt"]) for index, records in found.items()}


class RefusingReader:
    """A split reader (pickled to Spark tasks) whose split ``refuse`` fails with an error no retry cures; the others
    read ``rows`` rows of ``id``."""

    display_name = "a refusing reader"

    def __init__(self, refuse: int, rows: int = 10) -> None:
        self.refuse, self.rows = refuse, rows

    def read_split(self, split: RangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from airflow_provider_tiering.core.errors import UnsupportedColumnType

        if split.index == self.refuse:
            raise UnsupportedColumnType(f"split {split.index}: column 'c' holds a value no lake type can hold")
        yield pa.RecordBatch.from_pydict({"id": pa.array(range(self.rows), pa.int64())}, schema=schema)

    def take_rejects(self) -> list[dict[str, Any]]:
        return []
