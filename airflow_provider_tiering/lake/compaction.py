"""Compaction: rewrite a lake table's small data files into files of the target size, and the files whose position
deletes (merge-on-read rounds') hide enough of their rows without them, in one snapshot.

Safe while rounds run. The small files of each partition are grouped up to the target size and rewritten by
``lake/rewrite_files.py`` on the rounds' own split writer (one task per group), in one snapshot that carries the
latest tiering commit's epoch and offsets on, fenced like a round; it gives up, deleting what it wrote, when
tiering commits keep landing first.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import CommitConflict, FencedError
from airflow_provider_tiering.core.maintenance import CompactionOutcome, CompactionResult
from airflow_provider_tiering.core.ports import SplitWriter
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.live_files import live_data_files, live_delete_files, live_tasks
from airflow_provider_tiering.lake.position_deletes import DeletedPositions
from airflow_provider_tiering.lake.rewrite_files import partition_groups, rewrite_files

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask

log = logging.getLogger(__name__)

#: Rewritten files live under <table location>/data/<COMPACTION_DIR>/<run id>/.
COMPACTION_DIR = "compaction"


def compact(
    lake: IcebergLake,
    writer: SplitWriter,
    *,
    target_file_bytes: int,
    small_file_bytes: int,
    max_small_files: int,
    table_name: str,
    deleted_fraction: float = 0.2,
    max_delete_files: int = 10,
    max_tries: int = 3,
) -> CompactionOutcome:
    """Rewrite the small files (below ``small_file_bytes``) of each partition into files of ``target_file_bytes``,
    when there are more than ``max_small_files`` of them, and every file whose position deletes hide at least
    ``deleted_fraction`` of its rows or that ``max_delete_files`` delete files apply to, without those rows; one
    snapshot replaces them and removes the delete files that then name no live file. A failure leaves nothing
    behind: what was written is deleted."""
    started = time.monotonic()
    table = lake.load_table()
    if table is None:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, 0, 0, 0)
    tasks = live_tasks(table)
    files = [t.file for t in tasks]
    small = [f for f in files if f.file_size_in_bytes < small_file_bytes]
    deletes = DeletedPositions(table.io)
    hidden = {t.file.file_path: deletes.of(t.file, t.delete_files).size for t in tasks if t.delete_files}
    groups = _groups(tasks, small, hidden, target_file_bytes, max_small_files, deleted_fraction, max_delete_files)
    rewritten = [f for group in groups for f in group]
    if not rewritten:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, len(small), len(files), len(files))

    run = uuid.uuid4().hex[:16]
    directory = f"{table.location().rstrip('/')}/data/{COMPACTION_DIR}/{run}"
    deletes_before = len(live_delete_files(table))
    try:
        snapshot_id, written, tries = rewrite_files(
            lake.load_table,
            writer,
            groups,
            name=lake.name,
            directory=directory,
            target_file_bytes=target_file_bytes,
            table_name=table_name,
            operation="compaction",
            run=run,
            max_tries=max_tries,
            deletes=deletes,
        )
    except (FencedError, CommitConflict) as exc:
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
    reloaded = lake.load_table()
    after = 0 if reloaded is None else len(live_data_files(reloaded))
    deletes_after = 0 if reloaded is None else len(live_delete_files(reloaded))
    return CompactionOutcome(
        CompactionResult.COMPACTED,
        len(small),
        len(files),
        after,
        len(rewritten),
        written,
        snapshot_id,
        tries,
        round(time.monotonic() - started, 3),
        files_with_deletes=sum(1 for f in rewritten if hidden.get(f.file_path)),
        deleted_rows_applied=sum(hidden.get(f.file_path, 0) for f in rewritten),
        delete_files_removed=max(0, deletes_before - deletes_after),
    )


def _groups(
    tasks: list[FileScanTask],
    small: list[DataFile],
    hidden: dict[str, int],
    target_file_bytes: int,
    max_small_files: int,
    deleted_fraction: float,
    max_delete_files: int,
) -> list[list[DataFile]]:
    """What one compaction rewrites, in groups of one partition each: the small files when there are too many (at
    least two to a group), and every file whose position deletes hide enough of its rows or that too many delete
    files apply to (alone in a group if it must be)."""
    heavy = [
        t.file
        for t in tasks
        if t.delete_files
        and (
            hidden[t.file.file_path] >= deleted_fraction * t.file.record_count
            or len(t.delete_files) >= max_delete_files
        )
    ]
    groups = partition_groups(small, target_file_bytes, min_files=2) if len(small) > max_small_files else []
    grouped = {f.file_path for group in groups for f in group}
    return groups + partition_groups([f for f in heavy if f.file_path not in grouped], target_file_bytes)
