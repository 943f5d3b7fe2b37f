"""The lake's status table, ``<namespace>.lake_tiering_status`` (namespace ``sys`` by default): one row per tiered
table of its catalog (``core/status_rows.py``), an Iceberg table any engine reads (``SELECT * FROM
sys.lake_tiering_status``).

Many writers refresh it at once (each DAG run's summary, a reset or a trigger from the CLI, the REST API or the
page), each with the rows of its own tables. A refresh reads the table (a row per table), replaces its own rows,
keeps everybody else's, and writes the whole table again in one overwrite, committed only onto the snapshot it read:
pyiceberg's own commit retry is off for this table (``commit.retry.num-retries`` 0), since a retried overwrite would
delete rows another writer committed meanwhile. A refresh that loses the race reads again and tries again, a bounded
number of times, so no writer loses another's rows. Its old snapshots are expired, and the files only they held
removed once older than any refresh takes, so the table stays a few files.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.status_rows import STATUS_TABLE, StatusRow
from airflow_provider_tiering.lake.catalog import CatalogHandle, load_or_create_table

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

_TIME = pa.timestamp("us", tz="UTC")
_FIELDS: list[pa.Field[Any]] = [
    pa.field("database_name", pa.string(), nullable=False),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("tiering_epoch", pa.int64(), nullable=False),
    pa.field("last_tiered_time", _TIME),
    pa.field("last_error", pa.string()),
    pa.field("last_error_time", _TIME),
    pa.field("airflow_asset", pa.string()),
    pa.field("airflow_dag_id", pa.string()),
    pa.field("tiered_table", pa.string()),
    pa.field("quarantined", pa.bool_()),
    pa.field("consecutive_failures", pa.int64()),
    pa.field("next_retry_at", _TIME),
    pa.field("last_round_rows", pa.int64()),
    pa.field("last_round_duration_seconds", pa.float64()),
    pa.field("snapshot_id", pa.int64()),
    pa.field("data_age_seconds", pa.float64()),
    pa.field("backlog_rows", pa.int64()),
    pa.field("backlog_wal_bytes", pa.int64()),
    pa.field("retained_wal_bytes", pa.int64()),
    pa.field("log_position", pa.string()),
    pa.field("log_backlog_bytes", pa.int64()),
    pa.field("log_needed_bytes", pa.int64()),
    pa.field("recent_error", pa.string()),
    pa.field("recent_error_time", _TIME),
    pa.field("as_of", _TIME, nullable=False),
    pa.field("stream_group", pa.string()),
    pa.field("log_backlog_changes", pa.int64()),
    pa.field("stream_reader_status", pa.string()),
    pa.field("stream_reader_error", pa.string()),
    pa.field("stream_reader_lag_seconds", pa.float64()),
]
STATUS_SCHEMA = pa.schema(_FIELDS)
#: How often a refresh that lost the commit race reads again and tries again.
COMMIT_ATTEMPTS = 12
#: Snapshots older than this are expired (the newest few always stay), and unreferenced files older than this
#: removed: longer than any refresh takes between writing its file and committing it.
KEEP_FOR = timedelta(minutes=10)
KEEP_SNAPSHOTS = 5


class LakeStatusTable:
    """The status table of one catalog (see the module's description)."""

    def __init__(self, catalog: CatalogHandle, namespace: str = "sys") -> None:
        self.catalog = catalog
        self.identifier = (namespace, STATUS_TABLE)

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def refresh(self, rows: Sequence[StatusRow], *, attempts: int = COMMIT_ATTEMPTS) -> int:
        """Replace the rows of ``rows``' tables (by database and table name), keep the others; returns the table's
        row count after the refresh.

        Raises:
            LakeError: the commit race was lost ``attempts`` times in a row.
            Exception: the catalog's or the storage's own errors (unreachable, refused).
        """
        from pyiceberg.exceptions import CommitFailedException

        mine = pa.Table.from_pylist([row.to_dict() for row in rows], schema=STATUS_SCHEMA)
        keys = {row.key for row in rows}
        for attempt in range(attempts):
            table = self._table()
            current = table.scan().to_arrow()
            kept = [
                r for r in current.to_pylist() if (r["database_name"], r["table_name"]) not in keys
            ]  # a row per table: small
            merged = pa.concat_tables([pa.Table.from_pylist(kept, schema=STATUS_SCHEMA), mine])
            try:
                if table.current_snapshot() is None:
                    table.append(merged)  # the first rows: nothing to overwrite (committed only onto no snapshot)
                else:
                    table.overwrite(merged)
            except CommitFailedException:
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # another writer committed first: again
                continue
            self._expire(table)
            return merged.num_rows
        raise LakeError(f"status table {self.name}: lost the commit race {attempts} times in a row")

    def rows(self) -> pa.Table:
        """The table's rows (empty before its first refresh)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.get().load_table(self.identifier).scan().to_arrow()
        except NoSuchTableError:
            return STATUS_SCHEMA.empty_table()

    def _table(self) -> Table:
        """The table, created on the first refresh (with its own commit retry off), its schema brought up to this
        version's columns."""

        catalog = self.catalog.get()
        properties = {"commit.retry.num-retries": "0", "format-version": "2"}
        table = load_or_create_table(catalog, self.identifier, STATUS_SCHEMA, properties)
        if table.properties.get("commit.retry.num-retries") != "0" or set(STATUS_SCHEMA.names) - {
            f.name for f in table.schema().fields
        }:
            with table.transaction() as transaction:
                transaction.set_properties({"commit.retry.num-retries": "0"})
                with transaction.update_schema() as update:
                    update.union_by_name(STATUS_SCHEMA)
            table = catalog.load_table(self.identifier)
        return table

    def _expire(self, table: Table) -> None:
        """Best effort: expire the snapshots older than ``KEEP_FOR`` but the newest few, then remove the files only
        they held. A race lost to another writer leaves it to the next refresh."""
        from airflow_provider_tiering.lake.iceberg import IcebergLake
        from airflow_provider_tiering.lake.orphan_files import remove_orphan_files

        try:
            table = self.catalog.get().load_table(self.identifier)
            cutoff = (datetime.now(UTC) - KEEP_FOR).timestamp() * 1000
            newest = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[:KEEP_SNAPSHOTS]
            keep = {s.snapshot_id for s in newest}
            doomed = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff and s.snapshot_id not in keep]
            if doomed:
                table.maintenance.expire_snapshots().by_ids(doomed).commit()
                remove_orphan_files(IcebergLake(self.catalog, *self.identifier), min_age=KEEP_FOR)
        except Exception as exc:  # the rows are committed; tidying up is for the next refresh
            log.info("status table %s: expiring old snapshots left to the next refresh: %s", self.name, exc)
