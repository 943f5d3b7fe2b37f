"""A PostgreSQL source whose split readers race a writer: before split ``k`` (k >= 1) reads, a row of that split's
cursor range is updated and committed, moving it above the round's watermark.

It is a real concurrent update, placed at the one moment that tells whether splits share the round's snapshot:
after the snapshot was taken and before the split's own statement runs. A split that reads the round's snapshot
still reads the row's old version; one that reads its own fresh snapshot no longer finds it in its range.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

from airflow_provider_tiering.core.planner import RangeSplit
from airflow_provider_tiering.sources.postgres.cursor_source import PostgresSource


class UpdatesBeforeEachSplit(PostgresSource):
    """Update (``version + 1``, ``updated_at = clock_timestamp()``) the first row of each split's range but the
    first's, once per split whatever the attempts; each updated id is written to ``<record_dir>/split-<k>``."""

    def __init__(self, source: PostgresSource, record_dir: Path) -> None:
        super().__init__(source.spec, source.connection)
        self.record_dir = str(record_dir)

    def select_split_sql(self, split: RangeSplit, schema: pa.Schema) -> str:
        # Every read of a split builds its statement here, whichever reader runs it (this source, or the reader of
        # the round's exported snapshot): the update commits before that statement runs.
        if split.index >= 1:
            self._update_one_row_of(split)
        return super().select_split_sql(split, schema)

    def _update_one_row_of(self, split: RangeSplit) -> None:
        record = os.path.join(self.record_dir, f"split-{split.index}")
        try:  # once per split: a retried or speculative attempt must not move a second row
            marker = os.open(record, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        cursor, table = self.cursor_ref, self.table_ref
        params: list[Any] = [split.upper] if split.lower is None else [split.lower, split.upper]
        lower = "" if split.lower is None else f"{cursor} > %s AND "
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            row = conn.execute(
                f"UPDATE {table} SET version = version + 1, updated_at = clock_timestamp() WHERE id = ("
                f"SELECT id FROM {table} WHERE {lower}{cursor} <= %s ORDER BY {cursor}, id LIMIT 1) RETURNING id",
                params,
            ).fetchone()
        os.write(marker, str(None if row is None else row[0]).encode())
        os.close(marker)


def updated_ids(record_dir: Path) -> list[int]:
    """The ids the splits updated, in split order."""
    ids = []
    for path in sorted(record_dir.glob("split-*"), key=lambda p: int(p.name.removeprefix("split-"))):
        text = path.read_text()
        if text != "None":
            ids.append(int(text))
    return ids
