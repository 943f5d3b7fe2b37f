"""A stream group's change log: an Iceberg table, partitioned by table, that the group's reader appends each of its
tables' changes to, in commit order, and from which each table's task applies its own.

One row per change: the hot table it belongs to (``source_table``), the position its transaction ends at (``position``,
an integer that orders like the database's log; ``log_position`` the same as the database writes it), where its
commit lies (``commit_at``), its transaction's id (``xid``) and commit time, its order in the transaction (``seq``), its
operation, and its key, new row and old key or row as JSON objects of the values as the log carried them
(``sources/change_stream/change_log_rows.py``), with the table's columns as the change was made (``relation``).

The reader's commits are tiering commits (``tiering_commits.py``): each carries the reader's epoch and the log
positions it read from and to, and is fenced like a round's, so a reader that lost its run to another commits
nothing. The tables the log reads (:class:`~airflow_provider_tiering.core.ports.StreamMember`) are a table property
set in the same swap. Rows a table's lake has applied are expired by the reader (whole files of its partition out,
pyiceberg rewriting a file that holds some still needed), and old snapshots with them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import FencedError, LakeError
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import ChangeLogState, StreamMember
from airflow_provider_tiering.lake.catalog import CatalogHandle, load_or_create_table
from airflow_provider_tiering.lake.fenced_commit import committed_snapshot_id, fenced_commit
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction
from airflow_provider_tiering.lake.tiering_commits import (
    check_fence,
    commit_properties,
    last_commit_property,
    latest_tiering_commit,
)

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table
    from pyiceberg.types import NestedField

log = logging.getLogger(__name__)

_TIME = pa.timestamp("us", tz="UTC")
_FIELDS: list[pa.Field[Any]] = [
    pa.field("source_table", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
    pa.field("log_position", pa.string(), nullable=False),
    pa.field("commit_at", pa.int64(), nullable=False),
    pa.field("xid", pa.int64()),
    pa.field("commit_time", _TIME),
    pa.field("seq", pa.int32(), nullable=False),
    pa.field("op", pa.string(), nullable=False),
    pa.field("key", pa.string()),
    pa.field("row", pa.string()),
    pa.field("old", pa.string()),
    pa.field("old_is_row", pa.bool_()),
    pa.field("relation", pa.string()),
    pa.field("note", pa.string()),
]
CHANGE_LOG_SCHEMA = pa.schema(_FIELDS)
#: The tables the log reads (a table property, set by every reader commit).
MEMBERS_PROPERTY = "tiering.stream-members"
#: Table properties of a change log: manifests merged as appends pile up (one per reader run), old metadata files
#: deleted, zstd Parquet.
_PROPERTIES = {
    "format-version": "2",
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "write.parquet.compression-codec": "zstd",
}
#: Snapshots older than this are expired (the newest few always stay), and unreferenced files older than this
#: removed: longer than a member's round reads a snapshot it loaded.
KEEP_SNAPSHOTS_FOR = timedelta(minutes=30)
KEEP_SNAPSHOTS = 5
#: Tries of a reader's commit that lost the catalog's swap to an unrelated commit.
COMMIT_TRIES = 5


class IcebergChangeLog:
    """One stream group's change log (see the module's description)."""

    def __init__(self, catalog: CatalogHandle, namespace: str, table: str) -> None:
        self.catalog = catalog
        self.identifier = (namespace, table)
        #: The table as :meth:`state` last loaded it: :meth:`changes` reads that snapshot.
        self._loaded: Table | None = None

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def load_table(self) -> Table | None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.get().load_table(self.identifier)
        except NoSuchTableError:
            return None

    def ensure(self) -> None:
        """Create the log (partitioned by table) when it does not exist."""
        from pyiceberg.transforms import IdentityTransform

        table = load_or_create_table(self.catalog.get(), self.identifier, CHANGE_LOG_SCHEMA, dict(_PROPERTIES))
        if not table.spec().fields:
            with table.update_spec() as update:
                update.add_field("source_table", IdentityTransform(), "source_table")

    # -- what the log holds --------------------------------------------------------------------------------
    def state(self) -> ChangeLogState | None:
        table = self.load_table()
        self._loaded = table
        if table is None:
            return None
        return _state_of(table)

    def changes(self, table: str, after: int, upto: int | None) -> Iterator[pa.RecordBatch]:
        from pyiceberg.io.pyarrow import ArrowScan

        loaded = self._loaded or self.load_table()
        if loaded is None or loaded.current_snapshot() is None:
            return
        where = _rows_of(table, after, upto)
        tasks = list(loaded.scan(row_filter=where).plan_files())
        # A file is one reader commit's rows of the table, written in commit order: files in the order of their
        # first position, each one's rows in order, make the table's changes in commit order.
        position = loaded.schema().find_field("position")
        tasks.sort(key=lambda task: _bounds(position, task.file)[0])
        scan = ArrowScan(loaded.metadata, loaded.io, loaded.schema(), where)
        for task in tasks:
            rows = scan.to_table([task])
            if rows.num_rows:
                yield from rows.sort_by([("position", "ascending"), ("seq", "ascending")]).to_batches()

    def changes_after(self, table: str, after: int) -> int:
        loaded = self.load_table()  # as it is now: a backlog counted after a commit counts what it added
        if loaded is None or loaded.current_snapshot() is None:
            return 0
        return loaded.scan(row_filter=_rows_of(table, after, None), selected_fields=("position",)).to_arrow().num_rows

    def backlogs(self, after: Mapping[str, int]) -> dict[str, int]:
        """Each table's changes past its position in ``after`` (see ``ChangeLogWriter``): one scan of the log's
        tables and positions, counted per table."""
        import pyarrow.compute as pc
        from pyiceberg.expressions import In

        found = dict.fromkeys(after, 0)
        loaded = self.load_table()  # as it is now, like changes_after
        if not after or loaded is None or loaded.current_snapshot() is None:
            return found
        names = list(after)
        where = In(term="source_table", literals=names)
        rows = loaded.scan(row_filter=where, selected_fields=("source_table", "position")).to_arrow()
        each = pc.index_in(rows["source_table"], pa.array(names))
        thresholds = pc.take(pa.array([after[t] for t in names], pa.int64()), each)
        past = rows.filter(pc.greater(rows["position"], thresholds))
        counted = past.group_by("source_table").aggregate([("position", "count")])
        tables, counts = counted["source_table"].to_pylist(), counted["position_count"].to_pylist()
        for table, waiting in zip(tables, counts, strict=True):
            found[str(table)] = int(waiting or 0)
        return found

    # -- the reader's writes -------------------------------------------------------------------------------
    def append(
        self,
        rows: pa.Table,
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        members: Mapping[str, StreamMember],
        group: str,
        attempt: str,
    ) -> int:
        """Append ``rows`` (the log's schema) in one snapshot carrying ``epoch`` and the positions read from and to,
        with the tables the log reads now; returns the snapshot id.

        Raises:
            FencedError: the log is not at ``start``, or holds an epoch at or above ``epoch``: another reader run
                committed since this one read the log. Nothing was committed.
            CommitConflict: the catalog's swap was lost too often to unrelated commits. Nothing was committed.
        """
        properties = commit_properties(epoch, start, end, group, attempt)
        table_properties = {**last_commit_property(epoch, end, attempt), MEMBERS_PROPERTY: _members_json(members)}

        def fence(table: Table) -> None:
            check_fence(table, epoch=epoch, start=start)

        def commit_once(table: Table, try_number: int) -> int:
            fence(table)
            tx = fenced_transaction(table, fence)
            tx.append(rows.cast(CHANGE_LOG_SCHEMA), snapshot_properties=properties)
            tx.set_properties(table_properties)
            committed = tx.commit_transaction()
            return committed_snapshot_id(committed, name=self.name, what=f"reader commit of epoch {epoch}")

        snapshot_id, _ = fenced_commit(
            self.load_table, commit_once, name=self.name, what=f"reader commit of epoch {epoch}", max_tries=COMMIT_TRIES
        )
        return snapshot_id

    def expire(self, epoch: int, applied: Mapping[str, int], members: Mapping[str, StreamMember], *,
               left: Sequence[str] = (), before: datetime | None = None) -> int:  # fmt: skip
        """Delete each member's rows up to the position its lake applied (``applied``; only those committed before
        ``before`` when given) and every row of the tables that ``left``, recording ``members`` (their
        ``expired_upto``) in the same swap; only while the log's latest reader commit is ``epoch``'s. Returns how many
        rows went. Then expire old snapshots and remove the files only they held."""
        loaded = self.load_table()
        if loaded is None:
            return 0

        def fence(table: Table) -> None:
            lake = latest_tiering_commit(table)
            if lake is None or lake.epoch != epoch:
                raise FencedError(f"change log {self.name}: another reader run committed; expiry left to it")

        fence(loaded)
        doomed, expression = self._doomed(loaded, applied, left, before)
        tx = fenced_transaction(loaded, fence)
        if doomed:
            assert expression is not None
            tx.delete(delete_filter=expression)
        tx.set_properties({MEMBERS_PROPERTY: _members_json(members)})
        tx.commit_transaction()
        self._expire_snapshots()
        return doomed

    def _doomed(
        self, loaded: Table, applied: Mapping[str, int], left: Sequence[str], before: datetime | None
    ) -> tuple[int, BooleanExpression | None]:
        """How many rows expiry deletes, and the filter that deletes them (over the tables that hold such rows
        only). Counted from each file's statistics (a file holds one table's rows): whole files by their row count,
        only the files that straddle a table's applied position read. A filter over a hundred tables, evaluated on
        every file of a log a reader appends to twice a second, took a minute; this takes the files' listing."""
        from pyiceberg.expressions import And, EqualTo, LessThan, LessThanOrEqual, Or

        def where_of(table: str) -> BooleanExpression:
            if table in left:
                return EqualTo(term="source_table", value=table)
            found: BooleanExpression = And(
                EqualTo(term="source_table", value=table), LessThanOrEqual(term="position", value=applied[table])
            )
            if before is not None:
                found = And(found, LessThan(term="commit_time", value=before.isoformat()))
            return found

        if loaded.current_snapshot() is None:
            return 0, None
        cutoff = None if before is None else int(before.timestamp() * 1_000_000)
        schema = loaded.schema()
        position, commit_time = schema.find_field("position"), schema.find_field("commit_time")
        doomed, tables, straddling = 0, set(), []
        for task in loaded.scan().plan_files():
            table = str(task.file.partition[0])
            if table in left:
                doomed += task.file.record_count
                tables.add(table)
                continue
            if table not in applied:
                continue
            low, high = _bounds(position, task.file)
            times = _bounds(commit_time, task.file)
            if low > applied[table] or (cutoff is not None and times[0] >= cutoff):
                continue
            tables.add(table)
            untimed = cutoff is not None and (task.file.null_value_counts or {}).get(commit_time.field_id)
            if high <= applied[table] and (cutoff is None or (times[1] < cutoff and not untimed)):
                doomed += task.file.record_count
            else:
                straddling.append(task)
        if not tables:
            return 0, None
        expression = Or(*map(where_of, sorted(tables))) if len(tables) > 1 else where_of(next(iter(tables)))
        if straddling:
            from pyiceberg.io.pyarrow import ArrowScan

            scan = ArrowScan(loaded.metadata, loaded.io, loaded.schema(), expression)
            doomed += scan.to_table(straddling).num_rows
        return doomed, expression

    def _expire_snapshots(self, now: datetime | None = None) -> None:
        """Snapshots older than :data:`KEEP_SNAPSHOTS_FOR` beyond the newest few, and the files only they held
        (best effort: left to a later run when it fails)."""
        from airflow_provider_tiering.lake.iceberg import IcebergLake
        from airflow_provider_tiering.lake.orphan_files import remove_orphan_files

        try:
            table = self.load_table()
            if table is None:
                return
            cutoff = ((now or datetime.now(UTC)) - KEEP_SNAPSHOTS_FOR).timestamp() * 1000
            newest = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[:KEEP_SNAPSHOTS]
            keep = {s.snapshot_id for s in newest}
            doomed = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff and s.snapshot_id not in keep]
            if doomed:
                table.maintenance.expire_snapshots().by_ids(doomed).commit()
                remove_orphan_files(IcebergLake(self.catalog, *self.identifier), min_age=KEEP_SNAPSHOTS_FOR)
        except Exception as exc:  # tidying up: a later run does it
            log.info("change log %s: expiring snapshots left to a later run: %s", self.name, exc)


def _state_of(table: Table) -> ChangeLogState:
    commit = latest_tiering_commit(table)
    text = table.properties.get(MEMBERS_PROPERTY)
    try:
        found = json.loads(text) if text else {}
        members = {name: StreamMember.from_json(name, doc) for name, doc in found.items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise LakeError(f"change log {'.'.join(table.name())}: its {MEMBERS_PROPERTY} is not readable: {exc}") from exc
    snapshot = table.current_snapshot()
    return ChangeLogState(
        epoch=0 if commit is None else commit.epoch,
        end=None if commit is None else commit.end_offsets,
        members=members,
        snapshot_id=None if snapshot is None else snapshot.snapshot_id,
        committed_at=None if commit is None else commit.committed_at,
    )


def _members_json(members: Mapping[str, StreamMember]) -> str:
    return json.dumps({table: member.to_json() for table, member in sorted(members.items())}, sort_keys=True)


def _rows_of(table: str, after: int, upto: int | None) -> BooleanExpression:
    from pyiceberg.expressions import And, EqualTo, GreaterThan, LessThanOrEqual

    where: BooleanExpression = And(EqualTo(term="source_table", value=table), GreaterThan(term="position", value=after))
    return where if upto is None else And(where, LessThanOrEqual(term="position", value=upto))


def _bounds(field: NestedField, data_file: Any) -> tuple[int, int]:
    """The least and greatest value of an integer or timestamp column (``field``, looked up once by the caller for
    all its files) in a data file, from its statistics (the widest range when it has none)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import PrimitiveType

    assert isinstance(field.field_type, PrimitiveType)
    low, high = (data_file.lower_bounds or {}).get(field.field_id), (data_file.upper_bounds or {}).get(field.field_id)
    return (
        -(2**63) if low is None else int(from_bytes(field.field_type, low)),
        2**63 - 1 if high is None else int(from_bytes(field.field_type, high)),
    )
