"""Write the initial defaults of columns added to the hot table into the lake table's files
(``lake.backfill_added_columns``).

A column added with a constant default gets that value as its Iceberg initial default, which pyiceberg and DuckDB's
Iceberg reader give every row of a file written before the column existed. A reader that ignores initial defaults
(one that reads format v2 strictly) would show NULL there: the backfill rewrites those files, read back through
pyiceberg (which fills in the default), so the value is in every file. It runs before the round writes its own
rows, on the round's split writer (Spark tasks for a large table), and commits fenced like a compaction (carrying
the latest tiering commit on), clearing the pending backfill in the same commit; until then the lake's record keeps
it pending, so a round that dies before it runs it again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.ports import SplitWriter
from airflow_provider_tiering.lake.hot_table_record import backfill_property, pending_backfill_ids
from airflow_provider_tiering.lake.live_files import live_data_files
from airflow_provider_tiering.lake.rewrite_files import partition_groups, rewrite_files

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Rewritten files live under <table location>/data/<BACKFILL_DIR>/<run id>/.
BACKFILL_DIR = "backfill"


def _lacks(entry: DataFile, field_ids: Sequence[int]) -> bool:
    """Whether a data file was written before one of ``field_ids`` existed (its statistics count no value of it;
    a file without statistics is rewritten to be sure)."""
    counts = entry.value_counts or {}
    return not counts or any(field_id not in counts for field_id in field_ids)


def backfill_defaults(
    load_table: Callable[[], Table | None], writer: SplitWriter, *, name: str, target_file_bytes: int, table_name: str
) -> int:
    """Rewrite the live files of the table ``load_table`` loads fresh (``name``: the Iceberg table's) that lack a
    column whose default is pending backfill; returns how many files it rewrote (0: none lacked it, and the pending
    backfill is cleared).

    Raises:
        LakeError: the table has delete files (another engine's), which a rewrite would not apply.
        FencedError, CommitConflict: tiering commits kept replacing the files meanwhile (the next round tries again).
    """
    table = load_table()
    if table is None:
        return 0
    pending = pending_backfill_ids(table.properties)
    if not pending:
        return 0
    files = [f for f in live_data_files(table) if _lacks(f, pending)]
    if not files:
        with table.transaction() as tx:
            tx.set_properties(backfill_property([]))
        return 0
    run = uuid.uuid4().hex[:16]
    _, written, _ = rewrite_files(
        load_table,
        writer,
        partition_groups(files, target_file_bytes),
        name=name,
        directory=f"{table.location().rstrip('/')}/data/{BACKFILL_DIR}/{run}",
        target_file_bytes=target_file_bytes,
        table_name=table_name,
        operation="backfill",
        run=run,
        table_properties=backfill_property([]),
    )
    log.info("%s: backfilled added columns' defaults into %d files (%d written)", table_name, len(files), written)
    return len(files)
