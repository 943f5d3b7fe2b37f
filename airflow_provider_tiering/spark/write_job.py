"""The round's Spark job: each task reads one split from the hot store and writes Parquet files.

Arrow end to end: a task reads its split as Arrow batches (binary COPY for PostgreSQL) and writes
them with pyarrow; only file metadata travels back to the driver, never table data.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core import errors
from airflow_provider_tiering.core.errors import InvalidPlan, NotRetryable, SourceError
from airflow_provider_tiering.core.ports import FileKind, SplitReader, SplitT, WriteTarget, WrittenFile
from airflow_provider_tiering.lake.parquet_writer import write_data_files
from airflow_provider_tiering.lake.rejects import REJECTS_SCHEMA
from airflow_provider_tiering.lake.warehouse import LakeStorage
from airflow_provider_tiering.sources.conform import conform_batch
from airflow_provider_tiering.spark.session import SparkSettings, create_spark_session, stop_spark_session

log = logging.getLogger(__name__)

#: A Spark Connect task's result rows: a written file each, or (``refused`` set) its split's refusal as JSON: the
#: error's class in ``core/errors.py`` and its arguments.
RESULT_SCHEMA = "split_index INT, path STRING, rows BIGINT, bytes BIGINT, partition STRING, kind STRING, refused STRING"
_RESULT_FIELDS: list[pa.Field[Any]] = [
    pa.field("split_index", pa.int32()),
    pa.field("path", pa.string()),
    pa.field("rows", pa.int64()),
    pa.field("bytes", pa.int64()),
    pa.field("partition", pa.string()),
    pa.field("kind", pa.string()),
    pa.field("refused", pa.string()),
]
_RESULT_ARROW = pa.schema(_RESULT_FIELDS)


def _result_row(found: WrittenFile | _Refused) -> dict[str, Any]:
    if isinstance(found, _Refused):
        refused = json.dumps({"error": type(found.error).__name__, "args": [str(a) for a in found.error.args]})
        return {"split_index": -1, "path": "", "rows": 0, "bytes": 0, "partition": "", "kind": "", "refused": refused}
    return {**asdict(found), "kind": found.kind.value, "refused": None}


def _from_result_row(row: Any) -> WrittenFile | _Refused:
    if row["refused"] is not None:
        return _Refused(_refusal(json.loads(row["refused"])))
    kind = FileKind(row["kind"])
    return WrittenFile(
        row["path"], int(row["rows"]), int(row["bytes"]), int(row["split_index"]), row["partition"], kind
    )


def _refusal(found: dict[str, Any]) -> NotRetryable:
    """The refusal a Spark Connect task sent back, rebuilt from its class name (only one of ``core/errors.py``'s
    :class:`NotRetryable` errors: a result row is data from a server, never code to run) and its arguments."""
    kind = getattr(errors, str(found.get("error")), None)
    if not (isinstance(kind, type) and issubclass(kind, NotRetryable)):
        raise SourceError(f"a Spark task refused its split with an unknown error: {found}")
    refusal: NotRetryable = kind(*found.get("args", []))
    return refusal


def _task_attempt_id() -> int:
    if "pyspark" not in sys.modules:  # written by the task process itself (no Spark): no task attempt
        return 0
    from pyspark import TaskContext

    context = TaskContext.get()
    return -1 if context is None else int(context.taskAttemptId())


def write_split(
    reader: SplitReader[SplitT],
    split: SplitT,
    read_schema: pa.Schema,
    target: WriteTarget,
    *,
    rejects_uri: str | None = None,
) -> list[WrittenFile]:
    """Read one split and write it as data files (and its bad records, if any, as rejects files, in the same
    catalog's storage); safe to run again (new file names each time)."""
    storage = LakeStorage(target.storage)  # the catalog's, carried in the target: not this executor's environment
    prefix = f"split-{split.index:05d}-task-{_task_attempt_id()}"
    batches = (conform_batch(batch, target.schema) for batch in reader.read_split(split, read_schema))
    files = write_data_files(
        batches,
        target.schema,
        target.directory_uri,
        prefix,
        split.index,
        partitioner=target.partitioner,
        target_file_bytes=target.target_file_bytes,
        storage=storage,
    )
    rejects = reader.take_rejects()
    if rejects:
        if rejects_uri is None:
            raise SourceError(f"{reader.display_name}: {len(rejects)} bad records and no side table to put them in")
        batch = pa.RecordBatch.from_pylist(rejects, schema=REJECTS_SCHEMA)
        written = write_data_files([batch], REJECTS_SCHEMA, rejects_uri, prefix, split.index, storage=storage)
        files.extend(replace(f, kind=FileKind.REJECTS) for f in written)
    return files


@dataclass(frozen=True)
class _Refused:
    """A split's error that no retry cures, handed back as the task's result with its class and arguments (a failed
    task hands back only its traceback's text), so Spark does not retry it in vain: pickled by pyspark with the
    task's other results on the RDD path, as JSON in Spark Connect's result rows."""

    error: NotRetryable


def _refused_or_written(write_one: Callable[[SplitT], list[WrittenFile]], split: SplitT) -> list[Any]:
    try:
        return list(write_one(split))
    except NotRetryable as exc:
        return [_Refused(exc)]


def _files_or_refusal(results: Sequence[Any]) -> list[WrittenFile]:
    """The tasks' files, or the first refusal raised as it was raised in its task."""
    for found in results:
        if isinstance(found, _Refused):
            raise found.error
    return list(results)


class SparkSplitWriter:
    """Runs the write step of a round on Spark. The session starts on first use, not before.

    With ``local_single_split``, a round of one split is written by this process itself, as its Spark task
    would (same reader, writer and file names), without starting Spark: one split is one task either way,
    and a session costs seconds of JVM start-up (most of a small, frequent round).
    """

    def __init__(self, settings: SparkSettings, *, local_single_split: bool = False) -> None:
        self.settings = settings
        self.local_single_split = local_single_split
        self._spark: Any = None

    @property
    def writes_single_split_locally(self) -> bool:
        return self.local_single_split

    @property
    def spark(self) -> Any:
        if self._spark is not None and not self.settings.remote and self._spark.sparkContext._jsc is None:
            # Stopped by someone else: a classic session is shared by the whole process (getOrCreate); pyspark has
            # no public "is stopped", a stopped context drops its private Java handle.
            self._spark = None
        if self._spark is None:
            self._spark = create_spark_session(self.settings)
        return self._spark

    @property
    def parallelism(self) -> int:
        if self.settings.remote:
            return int(self.spark.conf.get("spark.default.parallelism", "2"))
        return int(self.spark.sparkContext.defaultParallelism)

    def write(
        self,
        reader: SplitReader[SplitT],
        splits: Sequence[SplitT],
        read_schema: pa.Schema,
        target: WriteTarget,
        *,
        rejects_uri: str | None = None,
    ) -> list[WrittenFile]:
        """Write every split in parallel, one Spark task per split; returns the files of the successful attempts.

        ``read_schema`` is what the reader reads; ``target.schema`` (the lake's) what is written.
        """
        if not splits:
            return []

        def write_one(split: SplitT) -> list[WrittenFile]:
            return write_split(reader, split, read_schema, target, rejects_uri=rejects_uri)

        if len(splits) == 1 and self.writes_single_split_locally:
            log.debug("one split: written by this process, without Spark")
            return write_one(splits[0])
        by_index = {split.index: split for split in splits}
        indexes = sorted(by_index)
        if indexes != list(range(len(indexes))):
            raise InvalidPlan(f"split indexes must be 0..n-1, not {indexes}")
        return self._write_on_spark(write_one, by_index, indexes)

    def _write_on_spark(
        self, write_one: Callable[[SplitT], list[WrittenFile]], by_index: dict[int, SplitT], indexes: list[int]
    ) -> list[WrittenFile]:
        if not self.settings.remote:
            # The RDD API where there is one: no query planning, code generation or Arrow round trip in the JVM
            # (measured: the first job of a session 3.0-3.9 s with mapInArrow, 2.1-2.3 s without).
            def run_partition(partition: Iterator[int]) -> Iterator[Any]:
                for index in partition:
                    yield from _refused_or_written(write_one, by_index[index])

            rdd = self.spark.sparkContext.parallelize(indexes, len(indexes))
            return _files_or_refusal(self._interruptible(rdd.mapPartitions(run_partition).collect))

        # Spark Connect has no RDD API: a DataFrame job whose Arrow rows carry the file metadata back.
        def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    found = _refused_or_written(write_one, by_index[int(index or 0)])
                    yield pa.RecordBatch.from_pylist([_result_row(f) for f in found], schema=_RESULT_ARROW)

        frame = self.spark.range(0, len(indexes), 1, numPartitions=len(indexes))
        rows = frame.mapInArrow(run_tasks, RESULT_SCHEMA).collect()
        return _files_or_refusal([_from_result_row(r) for r in rows])

    def _interruptible(self, action: Callable[[], list[Any]]) -> list[Any]:
        """Run a Spark action in a thread of its own and wait for it here. A round's timeout (Airflow's
        ``execution_timeout``, a signal to this thread) then interrupts this wait, and the job is cancelled at once;
        it used to interrupt the py4j call itself, whose connection then answered nothing (the cancel neither) until
        the job had run to its end."""
        from concurrent.futures import Future

        from pyspark import InheritableThread  # a plain thread would not carry the session's local properties

        done: Future[list[Any]] = Future()

        def run() -> None:
            try:
                done.set_result(action())
            except BaseException as exc:  # handed to the waiting thread, which raises it
                done.set_exception(exc)

        InheritableThread(run, daemon=True).start()
        try:
            return done.result()
        except BaseException:
            if not done.done():
                log.warning("the round was interrupted: cancelling its Spark job")
                self.spark.sparkContext.cancelAllJobs()
            raise

    def stop(self) -> None:
        """Cancel whatever job still runs (a round stopped by its timeout), then stop a local or cluster session;
        for Spark Connect, interrupt this client's executions and release its server session only.

        A Connect server keeps an unreleased session (its state and artifacts) until its idle timeout.
        """
        if self._spark is not None:
            try:
                if self.settings.remote:
                    self._spark.interruptAll()
                else:
                    self._spark.sparkContext.cancelAllJobs()
            except Exception as exc:  # stopping goes on: the session's stop ends its jobs too
                log.warning("cancelling the Spark jobs failed: %s", exc)
            stop_spark_session(self._spark)
        self._spark = None
