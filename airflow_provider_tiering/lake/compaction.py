"""Compaction: rewrite a lake table's small data files into files of the target size, in one snapshot.

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
from airflow_provider_tiering.lake.live_files import has_live_delete_files, live_data_files
from airflow_provider_tiering.lake.rewrite_files import partition_groups, rewrite_files

if TYPE_CHECKING:
    pass

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
    groups = partition_groups(small, target_file_bytes, min_files=2)
    rewritten = [f for group in groups for f in group]
    if not rewritten:
        return CompactionOutcome(CompactionResult.BELOW_THRESHOLD, len(small), len(files), len(files))

    run = uuid.uuid4().hex[:16]
    directory = f"{table.location().rstrip('/')}/data/{COMPACTION_DIR}/{run}"
    try:
        snapshot_id, written, tries = rewrite_files(
            lake,
            writer,
            groups,
            directory=directory,
            target_file_bytes=target_file_bytes,
            table_name=table_name,
            operation="compaction",
            run=run,
            max_tries=max_tries,
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
    )
