"""The round's Spark job: each task reads one split from the hot store and writes Parquet files.

Arrow end to end: a task reads its split as Arrow batches (binary COPY for PostgreSQL) and writes
them with pyarrow; only file metadata travels back to the driver, never table data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.planner import Split
from airflow_provider_tiering.lake.data_files import WrittenFile, write_data_files
from airflow_provider_tiering.sources.base import Source
from airflow_provider_tiering.spark.session import SparkSettings, create_spark_session

log = logging.getLogger(__name__)

RESULT_SCHEMA = "split_index INT, path STRING, rows BIGINT, bytes BIGINT"


def _task_attempt_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return -1 if context is None else int(context.taskAttemptId())


def write_split(
    source: Source,
    split: Split,
    schema: pa.Schema,
    directory_uri: str,
    partition_by: Sequence[str],
    target_file_bytes: int,
) -> list[WrittenFile]:
    """Read one split and write it as data files; safe to run again (new file names each time)."""
    prefix = f"split-{split.index:05d}-task-{_task_attempt_id()}"
    return write_data_files(
        source.read_split(split, schema),
        schema,
        directory_uri,
        prefix,
        split.index,
        partition_by=partition_by,
        target_file_bytes=target_file_bytes,
    )


class SparkSplitWriter:
    """Runs the write step of a round on Spark. The session starts on first use, not before."""

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        self._spark: Any = None

    @property
    def spark(self) -> Any:
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
        source: Source,
        splits: Sequence[Split],
        schema: pa.Schema,
        directory_uri: str,
        partition_by: Sequence[str] = (),
        target_file_bytes: int = 128 * 1024 * 1024,
    ) -> list[WrittenFile]:
        """Write every split in parallel, one Spark task per split; returns the files of the successful attempts."""
        if not splits:
            return []
        by_index = {split.index: split for split in splits}
        partition_columns = tuple(partition_by)

        def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    files = write_split(
                        source, by_index[index], schema, directory_uri, partition_columns, target_file_bytes
                    )
                    yield pa.RecordBatch.from_pylist(
                        [
                            {"split_index": f.split_index, "path": f.path, "rows": f.rows, "bytes": f.bytes}
                            for f in files
                        ],
                        schema=pa.schema(
                            [
                                ("split_index", pa.int32()),
                                ("path", pa.string()),
                                ("rows", pa.int64()),
                                ("bytes", pa.int64()),
                            ]
                        ),
                    )

        indexes = sorted(by_index)
        frame = self.spark.range(0, len(indexes), 1, numPartitions=len(indexes))
        if indexes != list(range(len(indexes))):
            raise ValueError("split indexes must be 0..n-1")
        rows = frame.mapInArrow(run_tasks, RESULT_SCHEMA).collect()
        return [WrittenFile(r["path"], int(r["rows"]), int(r["bytes"]), int(r["split_index"])) for r in rows]

    def stop(self) -> None:
        """Stop a local or cluster session; for Spark Connect, release this client's server session only.

        A Connect server keeps an unreleased session (its state and artifacts) until its idle timeout.
        """
        if self._spark is not None:
            self._spark.stop()
        self._spark = None
