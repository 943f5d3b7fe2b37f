"""Rewrite some of a lake table's live data files on the rounds' split writer and commit the rewrites in their
place, in one snapshot that carries the latest tiering commit on: compaction (small files into large ones) and the
backfill of added columns' defaults (files written before a column existed, read back through pyiceberg, which
gives them the column's initial default) both do so.

The files are read back through pyiceberg's Arrow scan, so files written under an older schema come out in the
current one; one Spark task rewrites each group. The commit (an ``overwrite``: pyiceberg 0.12 cannot write
``replace``) carries the epoch and offsets of the latest tiering commit, so readers and the next round see the same
committed offsets before and after; if a tiering commit lands first it is committed again with that commit's offsets
(its files are still valid while every file it replaces is still live), a bounded number of times, or gives up and
deletes what it wrote. A file's position deletes are applied as it is read, and the delete files that name no live
file once the rewrite commits are removed in the same snapshot (``lake/row_delta.py``).

It is handed what it needs of the lake table (how to load it fresh, and its name), not the lake facade
(``lake/iceberg.py``) that calls it through the backfill: the schema, partitioning and storage its files follow are
read off the pyiceberg table it loads.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import CommitConflict, FencedError, LakeError
from airflow_provider_tiering.core.ports import LakeCommit, RejectedRecord, SplitWriter, WriteTarget, WrittenFile
from airflow_provider_tiering.lake.add_files import data_file
from airflow_provider_tiering.lake.fenced_commit import committed_snapshot_id, fenced_commit, replace_data_files
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction
from airflow_provider_tiering.lake.live_files import live_data_files, live_delete_files, live_tasks
from airflow_provider_tiering.lake.partitioner import Partitioner
from airflow_provider_tiering.lake.position_deletes import DeletedPositions, trim_delete_files, write_position_deletes
from airflow_provider_tiering.lake.row_delta import commit_row_delta
from airflow_provider_tiering.lake.schema import write_schema
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


@dataclass(frozen=True)
class RewriteSplit:
    """The files (of one partition) that one Spark task rewrites, each with the position-delete files whose rows
    the rewrite leaves out."""

    index: int
    files: tuple[DataFile, ...]
    deletes: tuple[tuple[DataFile, ...], ...] = ()


class LakeFileReader:
    """What a rewriting task reads: lake data files through pyiceberg's Arrow scan, their position deletes applied,
    so files written under an older schema come out in the current one (a
    :class:`~airflow_provider_tiering.core.ports.SplitReader`)."""

    def __init__(self, table: Table) -> None:
        self.metadata = table.metadata
        self.io_properties = storage_properties(table.io.properties)  # not the catalog's URI or token
        self.display_name = f"Iceberg table {'.'.join(table.name())}"

    def read_split(self, split: RewriteSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
        from pyiceberg.table import FileScanTask

        scan = ArrowScan(self.metadata, PyArrowFileIO(self.io_properties), self.metadata.schema(), AlwaysTrue())
        deletes = split.deletes or tuple(() for _ in split.files)
        tasks = [FileScanTask(f, set(d)) for f, d in zip(split.files, deletes, strict=True)]
        yield from scan.to_record_batches(tasks)

    def take_rejects(self) -> list[RejectedRecord]:
        return []


def partition_groups(files: Sequence[DataFile], target_bytes: int, *, min_files: int = 1) -> list[list[DataFile]]:
    """``files`` in groups of one partition each, of about ``target_bytes`` (first fit on files sorted by size), only
    the groups of at least ``min_files``: what one task rewrites."""
    by_partition: dict[tuple[int, tuple[Any, ...]], list[DataFile]] = defaultdict(list)
    for entry in files:
        partition = entry.partition
        by_partition[(entry.spec_id, tuple(partition[i] for i in range(len(partition))))].append(entry)
    groups: list[list[DataFile]] = []
    for part in by_partition.values():
        bins: list[list[DataFile]] = []
        sizes: list[int] = []
        for entry in sorted(part, key=lambda f: f.file_size_in_bytes, reverse=True):
            for i, size in enumerate(sizes):
                if size + entry.file_size_in_bytes <= target_bytes:
                    bins[i].append(entry)
                    sizes[i] += entry.file_size_in_bytes
                    break
            else:
                bins.append([entry])
                sizes.append(entry.file_size_in_bytes)
        groups.extend(b for b in bins if len(b) >= min_files)
    return groups


def rewrite_files(
    load_table: Callable[[], Table | None],
    writer: SplitWriter,
    groups: Sequence[Sequence[DataFile]],
    *,
    name: str,
    directory: str,
    target_file_bytes: int,
    table_name: str,
    operation: str,
    run: str,
    max_tries: int = 3,
    table_properties: Mapping[str, str] | None = None,
    deletes: DeletedPositions | None = None,
) -> tuple[int, int, int]:
    """Rewrite each group of live files of the table ``load_table`` loads fresh (``name``: the Iceberg table's) into
    files of ``target_file_bytes`` under ``directory`` (one task per group) and commit them in their place; returns
    (snapshot id, files written, commit tries). ``table_properties`` are set in the same commit. A failure leaves
    nothing behind: what was written is deleted. ``deletes``: the delete files the caller read already (a
    compaction's, measuring its files), which the commit's trim reads again otherwise.

    Raises:
        FencedError, CommitConflict: a rewritten file was replaced meanwhile, or the commit kept losing.
    """
    table = load_table()
    if table is None:
        raise LakeError(f"Iceberg table {name} disappeared before its files were rewritten")
    deletes_of = {task.file.file_path: tuple(task.delete_files) for task in live_tasks(table)}
    splits = [
        RewriteSplit(i, tuple(group), tuple(deletes_of.get(f.file_path, ()) for f in group))
        for i, group in enumerate(groups)
    ]
    schema = write_schema(table.schema())
    storage = LakeStorage.of(table.io.properties)
    rewritten = [f for group in groups for f in group]
    try:
        target = WriteTarget(directory, schema, Partitioner.of(table), target_file_bytes, dict(storage.properties))
        written = writer.write(LakeFileReader(table), splits, schema, target)
        snapshot_id, tries, carried = commit_rewrite(
            load_table,
            rewritten,
            written,
            name=name,
            directory=directory,
            read_deletes={d.file_path for found in deletes_of.values() for d in found},
            table_name=table_name,
            operation=operation,
            run=run,
            max_tries=max_tries,
            table_properties=table_properties,
            deletes=deletes or DeletedPositions(table.io),
        )
    except BaseException:
        delete_directory(directory, storage)
        raise
    # Files of Spark task attempts that did not succeed, and delete files of commit tries that lost.
    delete_unlisted(directory, {f.path for f in written} | carried, storage)
    return snapshot_id, len(written), tries


def commit_rewrite(
    load_table: Callable[[], Table | None],
    rewritten: Sequence[DataFile],
    written: Sequence[WrittenFile],
    *,
    name: str,
    directory: str,
    read_deletes: set[str] | None = None,
    table_name: str,
    operation: str,
    run: str,
    max_tries: int,
    table_properties: Mapping[str, str] | None = None,
    deletes: DeletedPositions,
) -> tuple[int, int, set[str]]:
    """Commit the rewrite onto the table ``load_table`` loads fresh for each try (``name``: the Iceberg table's); a
    tiering commit landing first changes the offsets it must carry: commit again, unless it replaced a rewritten
    file or added position deletes to one (the rewrite would bring their rows back): ``read_deletes`` are the delete
    files the rewrite applied. The delete files naming a rewritten file go in the same snapshot, what they delete of
    other files carried into delete files written under ``directory``; returns (snapshot id, tries, the delete files
    committed). ``deletes``: where the delete files read so far delete; each read once over every try (they never
    change)."""
    old_paths = {f.file_path for f in rewritten}
    applied = read_deletes or set()

    def commit_once(table: Table, try_number: int) -> int:
        commit = latest_tiering_commit(table)

        def fence(refreshed: Table) -> None:
            now = latest_tiering_commit(refreshed)
            if (now is None) != (commit is None) or (
                now is not None
                and commit is not None
                and (now.epoch, now.end_offsets) != (commit.epoch, commit.end_offsets)
            ):
                raise CommitConflict("a tiering round committed during the compaction; its offsets must be carried")
            if not old_paths <= {f.file_path for f in live_data_files(refreshed)}:
                raise FencedError(f"files the {operation} rewrote were replaced or removed meanwhile")
            added = [d for d in live_delete_files(refreshed) if d.file_path not in applied]
            if any(deletes.by_file(d).keys() & old_paths for d in added):
                raise FencedError(f"rows of files the {operation} rewrote were deleted meanwhile (a merge round)")

        fence(table)
        properties = {OPERATION_PROPERTY: operation, ATTEMPT_PROPERTY: f"{operation}-{run}", TABLE_PROPERTY: table_name}
        if commit is not None:
            properties.update(tiering_summary(table, commit))
        data_files = [data_file(table, f) for f in written]
        staying = {f.file_path: f for f in live_data_files(table) if f.file_path not in old_paths}
        trim = trim_delete_files(table.io, live_delete_files(table), staying, deletes)
        storage = LakeStorage.of(table.io.properties)  # this try's: a catalog may vend new credentials per load
        carried = write_position_deletes(table, trim.carried, f"{directory}/deletes-{try_number}", storage)
        committed_deletes.clear()
        with fenced_transaction(table, fence) as tx:
            if table_properties:
                tx.set_properties(dict(table_properties))
            if trim.removed or carried:
                commit_row_delta(
                    tx, table, properties=properties, added_data=data_files, added_deletes=carried,
                    removed_data=rewritten, removed_deletes=trim.removed,
                )  # fmt: skip
            else:
                replace_data_files(tx, table, rewritten, data_files, properties)
        committed_deletes.update(d.file_path for d in carried)
        return committed_snapshot_id(load_table(), name=name, what=operation)

    committed_deletes: set[str] = set()
    snapshot_id, tries = fenced_commit(
        load_table, commit_once, name=name, what=f"{operation} commit", max_tries=max_tries, back_off=False
    )
    return snapshot_id, tries, committed_deletes


def tiering_summary(table: Table, commit: LakeCommit) -> dict[str, str]:
    """The tiering properties of the latest tiering commit, carried by the replace snapshot."""
    snapshot = table.snapshot_by_id(commit.snapshot_id)
    summary = snapshot.summary if snapshot is not None else None
    start = summary.get(START_PROPERTY) if summary is not None else None
    return {
        EPOCH_PROPERTY: str(commit.epoch),
        START_PROPERTY: start if start is not None else offsets_to_property(commit.end_offsets),
        END_PROPERTY: offsets_to_property(commit.end_offsets),
    }


def delete_directory(directory_uri: str, storage: LakeStorage) -> None:
    filesystem, path = storage.filesystem_and_path(directory_uri)
    try:
        filesystem.delete_dir(path)
    except FileNotFoundError:
        pass


def delete_unlisted(directory_uri: str, keep: set[str], storage: LakeStorage) -> None:
    filesystem, path = storage.filesystem_and_path(directory_uri)
    kept = {k.split("://", 1)[-1] for k in keep}
    for info in filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.path not in kept:
            filesystem.delete_file(info.path)
