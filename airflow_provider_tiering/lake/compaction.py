"""Compaction: rewrite a lake table's small data files into files of the target size, in one snapshot.

Safe while rounds run. The rewrite runs on the rounds' own split writer (one task per group of small files of one
partition, read back through pyiceberg so files written under an older schema come out in the current one) and
commits one snapshot (an ``overwrite``: pyiceberg 0.12 cannot write ``replace``) that carries the tiering epoch
and offsets of the latest tiering commit, so readers and the next round see the same committed offsets before and
after. It is fenced like a round: if a tiering commit lands first, it is committed again with that commit's offsets
(its files are still valid while every file it replaces is still live), a bounded number of times, or gives up
and deletes what it wrote.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import CommitConflict, FencedError, LakeError
from airflow_provider_tiering.core.maintenance import CompactionOutcome, CompactionResult
from airflow_provider_tiering.core.ports import LakeCommit, SplitWriter, WriteTarget, WrittenFile
from airflow_provider_tiering.lake.add_files import data_file
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.live_files import has_live_delete_files, live_data_files
from airflow_provider_tiering.lake.tiering_commits import (
    ATTEMPT_PROPERTY,
    END_PROPERTY,
    EPOCH_PROPERTY,
    OPERATION_PROPERTY,
    START_PROPERTY,
    TABLE_PROPERTY,
    latest_tiering_commit,
    offsets_to_property,
)
from airflow_provider_tiering.lake.warehouse import LakeStorage, storage_properties

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Rewritten files live under <table location>/data/<COMPACTION_DIR>/<run id>/.
COMPACTION_DIR = "compaction"


@dataclass(frozen=True)
class CompactionSplit:
    """The small files of one partition that one Spark task rewrites."""

    index: int
    files: tuple[DataFile, ...]


class LakeFileReader:
    """What a compaction task reads: lake data files through pyiceberg's Arrow scan, so files written under an
    older schema come out in the current one (a :class:`~airflow_provider_tiering.core.ports.SplitReader`)."""

    def __init__(self, table: Table) -> None:
        self.metadata = table.metadata
        self.io_properties = storage_properties(table.io.properties)  # not the catalog's URI or token
        self.display_name = f"Iceberg table {'.'.join(table.name())}"

    def read_split(self, split: CompactionSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
        from pyiceberg.table import FileScanTask

        scan = ArrowScan(self.metadata, PyArrowFileIO(self.io_properties), self.metadata.schema(), AlwaysTrue())
        yield from scan.to_record_batches([FileScanTask(f) for f in split.files])

    def take_rejects(self) -> list[dict[str, Any]]:
        return []


def _bins(files: Sequence[DataFile], target_bytes: int) -> list[list[DataFile]]:
    """Consecutive groups of files of about ``target_bytes`` each (first fit on files sorted by size)."""
    bins: list[list[DataFile]] = []
    sizes: list[int] = []
    for entry in sorted(files, key=lambda f: f.file_size_in_bytes, reverse=True):
        for i, size in enumerate(sizes):
            if size + entry.file_size_in_bytes <= target_bytes:
                bins[i].append(entry)
                sizes[i] += entry.file_size_in_bytes
                break
        else:
            bins.append([entry])
            sizes.append(entry.file_size_in_bytes)
    return [b for b in bins if len(b) > 1]


def compact(
    lake: IcebergLake,
    writer: SplitWriter,
    *,
    target_file_bytes: int,
    small_file_bytes: int,
    max_small_files: int,
    table_name: str,
    max_tries: int = 3,
) -> CompactionOutcome:
    """Rewrite the small files (below ``small_file_bytes``) of each partition into files of ``target_file_bytes``,
    when there are more than ``max_small_files`` of them; one snapshot replaces them. A failure leaves nothing
    behind: what was written is deleted."""
    started = time.monotonic()
    table = lake.load_table()
    if table is None:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, 0, 0, 0)
    files = live_data_files(table)
    small = [f for f in files if f.file_size_in_bytes < small_file_bytes]
    if len(small) <= max_small_files:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, len(small), len(files), len(files))
    if has_live_delete_files(table):
        note = "the table has delete files (merge-on-read deletes of another engine); compact it with that engine"
        return CompactionOutcome(CompactionResult.SKIPPED, len(small), len(files), len(files), note=note)
    by_partition: dict[tuple[int, tuple[Any, ...]], list[DataFile]] = defaultdict(list)
    for entry in small:
        partition = entry.partition
        by_partition[(entry.spec_id, tuple(partition[i] for i in range(len(partition))))].append(entry)
    groups = [group for part in by_partition.values() for group in _bins(part, target_file_bytes)]
    rewritten = [f for group in groups for f in group]
    if not rewritten:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, len(small), len(files), len(files))

    run = uuid.uuid4().hex[:16]
    directory = f"{table.location().rstrip('/')}/data/{COMPACTION_DIR}/{run}"
    splits = [CompactionSplit(index=i, files=tuple(group)) for i, group in enumerate(groups)]
    schema = lake.write_schema()
    storage = lake.lake_storage()
    try:
        target = WriteTarget(directory, schema, lake.partitioner(), target_file_bytes, dict(storage.properties))
        written = writer.write(LakeFileReader(table), splits, schema, target)
        snapshot_id, tries = _commit_replace(
            lake, rewritten, written, table_name=table_name, run=run, max_tries=max_tries
        )
    except (FencedError, CommitConflict) as exc:
        _delete(directory, storage)
        log.warning("%s: compaction gave up: %s", table_name, exc)
        return CompactionOutcome(
            CompactionResult.GAVE_UP,
            len(small),
            len(files),
            len(files),
            len(rewritten),
            0,
            None,
            max_tries,
            round(time.monotonic() - started, 3),
            str(exc),
        )
    except Exception:
        _delete(directory, storage)
        raise
    _delete_unlisted(directory, {f.path for f in written}, storage)  # files of Spark task attempts that did not succeed
    reloaded = lake.load_table()
    after = 0 if reloaded is None else len(live_data_files(reloaded))
    return CompactionOutcome(
        CompactionResult.COMPACTED,
        len(small),
        len(files),
        after,
        len(rewritten),
        len(written),
        snapshot_id,
        tries,
        round(time.monotonic() - started, 3),
    )


def _commit_replace(
    lake: IcebergLake,
    rewritten: Sequence[DataFile],
    written: Sequence[WrittenFile],
    *,
    table_name: str,
    run: str,
    max_tries: int,
) -> tuple[int, int]:
    """Commit the rewrite; a tiering commit landing first changes the offsets it must carry: commit again."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.snapshots import Operation

    # pyiceberg 0.12 cannot summarize a "replace" snapshot (update_snapshot_summaries raises), and its public
    # overwrite deletes by row filter, not by file: its file-level producer, marked tiering.operation=compaction.
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    old_paths = {f.file_path for f in rewritten}
    for attempt in range(1, max_tries + 1):
        table = lake.load_table()
        if table is None:
            raise LakeError(f"Iceberg table {lake.name} disappeared during the compaction")
        commit = latest_tiering_commit(table)

        def fence(refreshed: Table, expected: LakeCommit | None = commit) -> None:
            now = latest_tiering_commit(refreshed)
            if (now is None) != (expected is None) or (
                now is not None
                and expected is not None
                and (now.epoch, now.end_offsets) != (expected.epoch, expected.end_offsets)
            ):
                raise CommitConflict("a tiering round committed during the compaction; its offsets must be carried")
            live = {f.file_path for f in live_data_files(refreshed)}
            if not old_paths <= live:
                raise FencedError("files the compaction rewrote were replaced or removed meanwhile")

        fence(table)
        properties = {
            OPERATION_PROPERTY: "compaction",
            ATTEMPT_PROPERTY: f"compaction-{run}",
            TABLE_PROPERTY: table_name,
        }
        if commit is not None:
            properties.update(_tiering_summary(table, commit))
        data_files = [data_file(table, f) for f in written]
        try:
            with fenced_transaction(table, fence) as tx:
                replace = _OverwriteFiles(
                    operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties
                )
                with replace as producer:
                    for entry in rewritten:
                        producer.delete_data_file(entry)
                    for entry in data_files:
                        producer.append_data_file(entry)
        except (CommitConflict, CommitFailedException) as exc:
            log.warning("compaction commit try %d: %s", attempt, exc)
            continue
        reloaded = lake.load_table()
        snapshot = None if reloaded is None else reloaded.current_snapshot()
        if snapshot is None:
            raise LakeError(f"Iceberg table {lake.name} disappeared after the compaction's commit")
        return int(snapshot.snapshot_id), attempt
    raise CommitConflict(f"the compaction commit lost {max_tries} times to other commits; nothing was committed")


def _tiering_summary(table: Table, commit: LakeCommit) -> dict[str, str]:
    """The tiering properties of the latest tiering commit, carried by the replace snapshot."""
    snapshot = table.snapshot_by_id(commit.snapshot_id)
    summary = snapshot.summary if snapshot is not None else None
    start = summary.get(START_PROPERTY) if summary is not None else None
    return {
        EPOCH_PROPERTY: str(commit.epoch),
        START_PROPERTY: start if start is not None else offsets_to_property(commit.end_offsets),
        END_PROPERTY: offsets_to_property(commit.end_offsets),
    }


def _delete(directory_uri: str, storage: LakeStorage) -> None:
    filesystem, path = storage.filesystem_and_path(directory_uri)
    try:
        filesystem.delete_dir(path)
    except FileNotFoundError:
        pass


def _delete_unlisted(directory_uri: str, keep: set[str], storage: LakeStorage) -> None:
    filesystem, path = storage.filesystem_and_path(directory_uri)
    kept = {k.split("://", 1)[-1] for k in keep}
    for info in filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.path not in kept:
            filesystem.delete_file(info.path)
