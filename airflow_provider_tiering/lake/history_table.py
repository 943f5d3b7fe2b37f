"""The lake's history table, ``<namespace>.lake_tiering_history`` (beside the status table): one row per round of
every table of its catalog (``core/round_history.py``), an Iceberg table any engine reads (``SELECT * FROM
sys.lake_tiering_history``), partitioned by the day its rounds ended.

Rounds append to it from many tasks at once. Every write is committed only onto the snapshot it read: pyiceberg's
own commit retry is off for this table (``commit.retry.num-retries`` 0), so a rewrite can never drop a row appended
meanwhile; a write that loses the race reads again and tries again, a bounded number of times.

Each append leaves a file and a snapshot; :meth:`LakeHistoryTable.tidy` rewrites a day of more than
:data:`COMPACT_AFTER_FILES` files into one file (exactly the files it read replaced, whole files out), deletes the
days past the retention whole, expires old snapshots and removes the files only they held, as for the status table.
A DAG run's summary tidies once per catalog (``hooks/history_table.py``), not each round: tidied in every append, a
thousand tables' rounds spent most of their CPU rewriting the day's files, racing each other to do it. Snapshots are
kept a minute, as every commit copies the table's metadata, theirs included, several times. An append whose commit
is the table's n-th, n a multiple of :data:`TIDY_EVERY_COMMITS`, tidies itself, for rounds that run without a
summary and for long runs. What tidies up is best effort, left to a later tidy when it fails.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.round_history import HISTORY_TABLE, HistoryRow
from airflow_provider_tiering.lake.catalog import CatalogHandle, load_or_create_table

if TYPE_CHECKING:
    from pyiceberg.table import FileScanTask, Table

log = logging.getLogger(__name__)

_TIME = pa.timestamp("us", tz="UTC")
_FIELDS: list[pa.Field[Any]] = [
    pa.field("database_name", pa.string(), nullable=False),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("tiered_table", pa.string(), nullable=False),
    pa.field("airflow_dag_id", pa.string()),
    pa.field("airflow_run_id", pa.string()),
    pa.field("tiering_epoch", pa.int64(), nullable=False),
    pa.field("started_at", _TIME, nullable=False),
    pa.field("ended_at", _TIME, nullable=False),
    pa.field("outcome", pa.string(), nullable=False),
    pa.field("rows_in", pa.int64()),
    pa.field("rows_inserted", pa.int64()),
    pa.field("rows_updated", pa.int64()),
    pa.field("rows_deleted", pa.int64()),
    pa.field("bytes_written", pa.int64()),
    pa.field("snapshot_id", pa.int64()),
    pa.field("data_age_before_seconds", pa.float64()),
    pa.field("data_age_after_seconds", pa.float64()),
    pa.field("error", pa.string()),
]
HISTORY_SCHEMA = pa.schema(_FIELDS)
#: Files of one day past which a tidy rewrites the day into one file.
COMPACT_AFTER_FILES = 32
#: An append whose commit is the table's n-th, n a multiple of this, tidies up itself (rounds without a summary).
TIDY_EVERY_COMMITS = 64
#: How often a write that lost the commit race reads again and tries again.
COMMIT_ATTEMPTS = 12
#: Snapshots older than this are expired (the newest few always stay): longer than a read of the table takes. Each
#: snapshot kept is copied several times by every commit (pyiceberg copies the table's metadata whole).
EXPIRE_AFTER = timedelta(minutes=1)
KEEP_SNAPSHOTS = 5
#: Unreferenced files older than this are removed: longer than any append takes between writing its file and
#: committing it.
KEEP_FOR = timedelta(minutes=10)
_NO_RETRY = {"commit.retry.num-retries": "0"}


class LakeHistoryTable:
    """The history table of one catalog (see the module's description); ``retention``: how long rows are kept
    (None: for ever)."""

    def __init__(self, catalog: CatalogHandle, namespace: str = "sys", retention: timedelta | None = None) -> None:
        self.catalog = catalog
        self.identifier = (namespace, HISTORY_TABLE)
        self.retention = retention

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def append(self, rows: Sequence[HistoryRow], *, now: datetime | None = None) -> None:
        """Append ``rows`` (and, every :data:`TIDY_EVERY_COMMITS` commits of the table, :meth:`tidy`).

        Raises:
            LakeError: the commit race was lost :data:`COMMIT_ATTEMPTS` times in a row.
            Exception: the catalog's or the storage's own errors (unreachable, refused).
        """
        if not rows:
            return
        mine = pa.Table.from_pylist([{n: getattr(row, n) for n in HISTORY_SCHEMA.names} for row in rows],
                                    schema=HISTORY_SCHEMA)  # fmt: skip
        table = self._committed(lambda table: table.append(mine), "append")
        snapshot = table.current_snapshot()
        if snapshot is not None and snapshot.sequence_number and snapshot.sequence_number % TIDY_EVERY_COMMITS == 0:
            self.tidy(now)  # one append of so many: numbered by the catalog, no two appends tidy at once

    def tidy(self, now: datetime | None = None) -> None:
        """Best effort: delete the days past the retention, compact each day of many files, expire old snapshots
        (an error is logged, and left to a later tidy)."""
        now = now or datetime.now(UTC)
        retention = self.retention
        steps = [
            *([("retention", lambda: self._delete_before(now - retention))] if retention is not None else []),
            ("compaction", self._compact),
            ("snapshot expiry", lambda: self._expire(now)),
        ]
        for step, run in steps:  # each on its own: a compaction that lost its race still lets the expiry run
            try:
                run()
            except Exception as exc:  # the rows are appended; tidying up is for a later tidy
                log.info("history table %s: %s left to a later tidy: %s", self.name, step, exc)

    def rows(self) -> pa.Table:
        """The table's rows (empty before its first append)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.get().load_table(self.identifier).scan().to_arrow()
        except NoSuchTableError:
            return HISTORY_SCHEMA.empty_table()

    def rounds_of(self, tiered_table: str, since: datetime, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` rounds of one table that ended at ``since`` or later, oldest first (the day
        partitions before ``since`` are not read)."""
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual

        try:
            table = self.catalog.get().load_table(self.identifier)
        except NoSuchTableError:
            return []
        where = And(
            EqualTo(term="tiered_table", value=tiered_table),
            GreaterThanOrEqual(term="ended_at", value=since.isoformat()),
        )
        found = table.scan(row_filter=where).to_arrow().sort_by("ended_at").to_pylist()
        return found[-limit:]

    def _committed(self, write: Any, what: str, attempts: int = COMMIT_ATTEMPTS) -> Table:
        """``write`` on the table as it is now, committed only onto the snapshot it read; again on a lost race. The
        table as the write left it."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(attempts):
            try:
                table = self._table()
                write(table)
                return table
            except CommitFailedException:
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # another writer committed first: again
        raise LakeError(f"history table {self.name}: {what} lost the commit race {attempts} times in a row")

    def _table(self) -> Table:
        """The table, created on the first append (partitioned by the day its rounds ended, its own commit retry
        off), its schema brought up to this version's columns."""
        from pyiceberg.transforms import DayTransform

        catalog = self.catalog.get()
        table = load_or_create_table(catalog, self.identifier, HISTORY_SCHEMA, {**_NO_RETRY, "format-version": "2"})
        if not table.spec().fields:
            with table.update_spec() as update:
                update.add_field("ended_at", DayTransform(), "ended_day")
            table = catalog.load_table(self.identifier)
        if set(HISTORY_SCHEMA.names) - {f.name for f in table.schema().fields}:
            with table.update_schema() as update:
                update.union_by_name(HISTORY_SCHEMA)
            table = catalog.load_table(self.identifier)
        return table

    def _delete_before(self, cutoff: datetime) -> None:
        """The rows of the days before the cutoff's (whole days: whole files out, none rewritten)."""
        from pyiceberg.expressions import LessThan

        before = LessThan(term="ended_at", value=datetime.combine(cutoff.date(), datetime.min.time(), UTC).isoformat())
        table = self._table()
        if any(True for _ in table.scan(row_filter=before).plan_files()):
            self._committed(lambda t: t.delete(delete_filter=before), "delete past the retention", attempts=3)

    def _compact(self) -> None:
        """Each day of more than :data:`COMPACT_AFTER_FILES` files rewritten into one file."""
        table = self._table()
        days: dict[date, list[FileScanTask]] = defaultdict(list)
        for task in table.scan().plan_files():
            day = _day_of(task.file.partition)
            if day is not None:
                days[day].append(task)
        for day, tasks in days.items():
            if len(tasks) > COMPACT_AFTER_FILES:
                self._rewrite(table, day, tasks)

    def _rewrite(self, table: Table, day: date, tasks: list[FileScanTask]) -> None:
        """``tasks``' files replaced by one file of their rows: read and written once, then committed file for file
        onto whatever snapshot is current, as long as only appends were committed since it read them (so every file
        it replaces is still live; told from the snapshots' lineage, not by listing the files again). Appends add
        files of their own, which the rewrite leaves alone, so they no longer make it start over."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.expressions import AlwaysTrue

        # _dataframe_to_data_files: pyiceberg writes a table's data files (partitioned, with their statistics) only
        # inside its own append, through this function.
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

        from airflow_provider_tiering.lake.fenced_commit import replace_data_files

        base = table.current_snapshot()
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
        added = list(_dataframe_to_data_files(table_metadata=table.metadata, df=rows, io=table.io))
        for attempt in range(COMMIT_ATTEMPTS):
            if base is None or not _only_appends_since(table, base.snapshot_id):
                # Another tidy (or a delete) committed meanwhile: the next tidy reads again. Ours is an orphan file.
                log.info("history table %s: %s changed by more than appends meanwhile", self.name, day)
                return
            try:
                with table.transaction() as tx:
                    replace_data_files(tx, table, [task.file for task in tasks], added, {})
                log.info("history table %s: %d files of %s compacted", self.name, len(tasks), day)
                return
            except CommitFailedException:
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # an append committed first: onto it, again
                table = self._table()
        raise LakeError(f"history table {self.name}: compaction of {day} lost the commit race {COMMIT_ATTEMPTS} times")

    def _expire(self, now: datetime) -> None:
        from airflow_provider_tiering.lake.iceberg import IcebergLake
        from airflow_provider_tiering.lake.orphan_files import remove_orphan_files

        table = self._table()
        cutoff = (now - EXPIRE_AFTER).timestamp() * 1000
        newest = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[:KEEP_SNAPSHOTS]
        keep = {s.snapshot_id for s in newest}
        doomed = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff and s.snapshot_id not in keep]
        if doomed:
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
            remove_orphan_files(IcebergLake(self.catalog, *self.identifier), min_age=KEEP_FOR)


def _only_appends_since(table: Table, base_id: int) -> bool:
    """Whether every snapshot from the current one back to ``base_id`` (excluded) is an append; False when the
    lineage cannot be followed that far (a snapshot expired meanwhile)."""
    from pyiceberg.table.snapshots import Operation

    snapshot = table.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != base_id:
        if snapshot.summary is None or snapshot.summary.operation != Operation.APPEND:
            return False
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return snapshot is not None


def _day_of(partition: Any) -> date | None:
    """The day a data file's partition (``ended_day``: days since 1970-01-01) stands for."""
    try:
        days = partition[0]
    except (IndexError, TypeError):
        return None
    return None if days is None else date(1970, 1, 1) + timedelta(days=int(days))
