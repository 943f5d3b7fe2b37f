"""``IcebergLake``: the :class:`~airflow_provider_tiering.core.ports.Lake` of one tiered table, an Iceberg table.

It composes the lake's parts: ``table.py`` (create, schema and partitioning), ``tiering_commits.py`` (what the
lake holds, the fence), ``add_files.py`` (the commit), ``staging.py`` (where attempts write, and their cleanup) and
``range_reads.py`` (eviction's reads). The table is loaded fresh from the catalog wherever freshness matters.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.offsets import CursorValue, Offsets
from airflow_provider_tiering.core.partitions import PartitionField, parse_partition_field
from airflow_provider_tiering.core.ports import (
    CHANGE_CHUNK,
    CHANGE_DELETED,
    CHANGE_FILL,
    LakeCommit,
    MergeKey,
    MergeResult,
    SplitWriter,
    TieringCommit,
    WriteTarget,
    WrittenFile,
)
from airflow_provider_tiering.core.shape import (
    DeclaredColumnChanges,
    HotIdentity,
    LakeShape,
    ShapeChanges,
    ShapeDecision,
)
from airflow_provider_tiering.lake.add_files import append_files
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.fenced_commit import committed_snapshot_id, fenced_commit
from airflow_provider_tiering.lake.hot_table_record import identity_property, lake_shape, reload_property
from airflow_provider_tiering.lake.partitioner import Partitioner
from airflow_provider_tiering.lake.range_reads import CursorRangeReader
from airflow_provider_tiering.lake.schema import write_schema
from airflow_provider_tiering.lake.staging import attempt_uri, clean_attempt, clean_epochs
from airflow_provider_tiering.lake.table import check_key, check_partitioning, create_table, follow_shape
from airflow_provider_tiering.lake.tiering_commits import (
    check_fence,
    commit_properties,
    last_commit_property,
    latest_tiering_commit,
    tiering_commits,
)
from airflow_provider_tiering.lake.warehouse import LakeStorage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


class IcebergLake:
    """One Iceberg table that a tiered table writes into."""

    def __init__(self, catalog: CatalogHandle, namespace: str, table: str, partition_by: Sequence[str] = ()) -> None:
        self.catalog = catalog
        self.identifier = (namespace, table)
        self.partition_fields: tuple[PartitionField, ...] = tuple(parse_partition_field(t) for t in partition_by)
        self._table: Table | None = None
        self._ranges = CursorRangeReader()

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    # -- table ---------------------------------------------------------------------------------
    def load_table(self) -> Table | None:
        """The table fresh from the catalog; None when it does not exist (yet)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self._table = self.catalog.get().load_table(self.identifier)
        except NoSuchTableError:
            self._table = None
        return self._table

    @property
    def table(self) -> Table:
        """The table as last loaded (loaded now if never).

        Raises:
            LakeError: it does not exist.
        """
        if self._table is None and self.load_table() is None:
            raise LakeError(f"Iceberg table {self.name} does not exist")
        assert self._table is not None
        return self._table

    def ensure_table(self, schema: pa.Schema, key: Sequence[str] = (), identity: HotIdentity | None = None) -> str:
        table = self._table or self.load_table()
        if table is None:
            table = create_table(self.catalog.get(), self.identifier, schema, self.partition_fields, key, identity)
        if check_partitioning(table, self.partition_fields):
            table = self._reload()
        if check_key(table, key):
            table = self._reload()
        self._table = table
        return self._table.location()

    def shape(self) -> LakeShape | None:
        table = self._table or self.load_table()  # as the round's committed() or follow_shape() just loaded it
        return None if table is None else lake_shape(table)

    def follow_shape(
        self,
        schema: pa.Schema,
        identity: HotIdentity,
        declared: DeclaredColumnChanges,
        decide: Callable[[ShapeChanges], ShapeDecision],
        *,
        key: Sequence[str] = (),
        by_name: bool = False,
        partial: bool = False,
    ) -> ShapeChanges:
        changes, committed = follow_shape(
            self.table, schema, identity, declared, decide, self._reload, by_name=by_name, partial=partial
        )
        table = self._reload() if committed else self.table
        if check_key(table, key):
            table = self._reload()
        self._table = table
        return changes

    def record_hot_table(self, identity: HotIdentity, *, reloaded: bool = False) -> None:
        properties = identity_property(identity)
        if reloaded:
            properties.update(reload_property(None))
        with self.table.transaction() as tx:
            tx.set_properties(properties)
        self._reload()

    def backfill(self, writer: SplitWriter, *, target_file_bytes: int, table_name: str) -> int:
        from airflow_provider_tiering.lake.backfill import backfill_defaults

        rewritten = backfill_defaults(
            self.load_table, writer, name=self.name, target_file_bytes=target_file_bytes, table_name=table_name
        )
        self._reload()
        return rewritten

    def total_rows(self) -> int:
        from airflow_provider_tiering.lake.live_files import live_row_count

        table = self.load_table()
        snapshot = None if table is None else table.current_snapshot()
        summary = None if snapshot is None else snapshot.summary
        if summary is None:
            return 0
        if int(summary.get("total-delete-files") or 0):  # rows its position deletes hide are not rows
            assert table is not None
            return live_row_count(table)
        return int(summary.get("total-records") or 0)

    def rows_not_held(
        self,
        rows: pa.Table,
        *,
        cursor: tuple[str, CursorValue] | None = None,
        lake_names: Mapping[str, str] | None = None,
    ) -> int:
        from airflow_provider_tiering.lake.row_compare import missing_rows

        if cursor is not None:
            column, value = cursor
            held = self.rows_in_cursor_range(column, value, value, rows)
        else:
            held = self._held_like(rows, lake_names)
        return missing_rows(rows, held)

    def keys_not_held(
        self, rows: pa.Table, key: Sequence[str], *, lake_names: Mapping[str, str | None] | None = None
    ) -> pa.Table:
        from airflow_provider_tiering.lake.row_compare import keys_of_missing_rows

        return keys_of_missing_rows(rows, self._held_like(rows, lake_names), list(key))

    def _held_like(self, rows: pa.Table, lake_names: Mapping[str, str | None] | None) -> pa.Table:
        """The current snapshot's rows in ``rows``' columns (each read from the lake's column ``lake_names`` names;
        None: NULL), typed as ``rows`` types them."""
        import pyarrow as pa

        names = {name: (lake_names or {}).get(name, name) for name in rows.schema.names}
        table = self.load_table()
        if table is None or table.current_snapshot() is None:
            return rows.schema.empty_table()
        found = table.scan(selected_fields=tuple(dict.fromkeys(n for n in names.values() if n is not None))).to_arrow()
        return pa.Table.from_arrays(
            [
                pa.nulls(found.num_rows, field.type) if lake is None else found.column(lake).cast(field.type)
                for field, lake in zip(rows.schema, names.values(), strict=True)
            ],
            schema=rows.schema,
        )

    def _reload(self) -> Table:
        table = self.load_table()
        if table is None:
            raise LakeError(f"Iceberg table {self.name} disappeared")
        return table

    def write_target(
        self, epoch: int, attempt: str, target_file_bytes: int, *, change_stream: bool = False
    ) -> WriteTarget:
        table = self.table
        schema = write_schema(table.schema())
        if change_stream:  # a deleted key's row has its key only: every column nullable in the staged files
            import pyarrow as pa

            schema = pa.schema([f.with_nullable(True) for f in schema]).append(pa.field(CHANGE_DELETED, pa.bool_()))
            schema = schema.append(pa.field(CHANGE_FILL, pa.string())).append(pa.field(CHANGE_CHUNK, pa.int32()))
        return WriteTarget(
            directory_uri=attempt_uri(table.location(), epoch, attempt),
            schema=schema,
            partitioner=self.partitioner(),
            target_file_bytes=target_file_bytes,
            storage=self.storage(),
        )

    def storage(self) -> Mapping[str, str]:
        """The storage part of the table's FileIO properties (the catalog's, and any the catalog vends with the
        table; the catalog's alone before the table exists): what every file this table's rounds write, read or
        delete outside pyiceberg is opened with."""
        return self.lake_storage().properties

    def lake_storage(self) -> LakeStorage:
        table = self._table or self.load_table()
        return LakeStorage.of(self.catalog.get().properties if table is None else table.io.properties)

    def write_schema(self) -> pa.Schema:
        """The Arrow schema data files are written in (the lake's, after evolution)."""
        return write_schema(self.table.schema())

    def partitioner(self) -> Partitioner:
        return Partitioner.of(self.table)

    def location(self) -> str:
        return self.table.location()

    # -- committed offsets ---------------------------------------------------------------------
    def committed(self) -> LakeCommit | None:
        """The lake's latest tiering commit (fresh from the catalog), or None before the first round."""
        table = self.load_table()
        return None if table is None else latest_tiering_commit(table)

    def tiering_commits(self, after_epoch: int) -> list[TieringCommit]:
        """The tiering commits above ``after_epoch`` in the current snapshot's ancestry, oldest first."""
        table = self.load_table()
        return [] if table is None else tiering_commits(table, after_epoch)

    # -- commit --------------------------------------------------------------------------------
    def commit(
        self,
        files: Sequence[WrittenFile],
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        table_name: str,
        attempt: str,
        identity: HotIdentity | None = None,
        reloaded: bool = False,
        max_conflict_retries: int = 5,
    ) -> int:
        """Add all files of a round in one snapshot, fenced by offsets and epoch; returns the snapshot id.

        Before each try the lake's committed offsets must equal ``start`` and its epoch be lower than
        ``epoch``; otherwise another attempt has committed since this one planned and
        :class:`FencedError` is raised with nothing committed. Losing the catalog's atomic swap to
        an unrelated change (e.g. a maintenance job's commit) re-validates and retries: pyiceberg's own retries
        (table property ``commit.retry.num-retries``) re-check the fence first, and when they are exhausted this
        starts over at most ``max_conflict_retries`` times, then raises :class:`CommitConflict`.
        """
        properties = commit_properties(epoch, start, end, table_name, attempt)
        table_properties = _commit_table_properties(epoch, end, attempt, identity, reloaded)

        def fence(table: Table) -> None:
            check_fence(table, epoch=epoch, start=start)

        def commit_once(table: Table, try_number: int) -> int:
            fence(table)
            append_files(table, files, properties, fence=fence, table_properties=table_properties)
            self._table = table
            return committed_snapshot_id(table, name=self.name, what=f"commit of epoch {epoch}")

        snapshot_id, _ = fenced_commit(
            self.load_table,
            commit_once,
            name=self.name,
            what=f"commit of epoch {epoch}",
            max_tries=max_conflict_retries + 1,
        )
        return snapshot_id

    def merge(
        self,
        files: Sequence[WrittenFile],
        key: MergeKey,
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        table_name: str,
        attempt: str,
        hot_keys: pa.Table | None = None,
        identity: HotIdentity | None = None,
        reloaded: bool = False,
        target_file_bytes: int = 128 * 1024 * 1024,
        copy_on_write_fraction: float = 0.5,
        writer: SplitWriter,
        max_conflict_retries: int = 5,
    ) -> MergeResult:
        """Merge a round's rows into this primary-key table (``lake/merge.py``: position deletes, or copy-on-write for
        files that lose most of their rows), in one snapshot fenced like :meth:`commit`; rewritten files and delete
        files are staged under the attempt's directory."""
        from airflow_provider_tiering.lake.merge import MergeTarget, merge_files  # pyarrow's compute: merges only

        def fence(table: Table) -> None:
            check_fence(table, epoch=epoch, start=start)

        target = MergeTarget(
            name=self.name,
            load_table=self.load_table,
            schema=self.write_schema(),
            partitioner=self.partitioner(),
            storage=self.lake_storage(),
            directory_uri=attempt_uri(self.table.location(), epoch, attempt),
            target_file_bytes=target_file_bytes,
            copy_on_write_fraction=copy_on_write_fraction,
        )
        result = merge_files(
            target,
            files,
            key,
            writer,
            properties=commit_properties(epoch, start, end, table_name, attempt),
            table_properties=_commit_table_properties(epoch, end, attempt, identity, reloaded),
            fence=fence,
            max_conflict_retries=max_conflict_retries,
            hot_keys=hot_keys,
        )
        table = self.load_table()
        snapshot = None if table is None else table.current_snapshot()
        summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary
        return dataclasses.replace(
            result,
            lake_delete_files=int(summary.get("total-delete-files") or 0),
            lake_deleted_rows=int(summary.get("total-position-deletes") or 0),
        )

    def keys_not_in(self, hot_keys: pa.Table, key: MergeKey) -> int:
        from airflow_provider_tiering.lake.merge_reduce import keys_absent

        table = self.load_table()
        return 0 if table is None else keys_absent(table, hot_keys, None, key.columns).num_rows

    # -- eviction's reads ----------------------------------------------------------------------
    def rows_in_cursor_range(self, column: str, lower: object, upper: object, like: pa.Table) -> pa.Table:
        return self._ranges.rows(self.load_table(), column, lower, upper, like)

    def rows_with_keys(self, key: Sequence[str], like: pa.Table) -> pa.Table:
        return self._ranges.rows_with_keys(self.load_table(), key, like)

    # -- cleanup -------------------------------------------------------------------------------
    def clean(self, committed_epoch: int, since_epoch: int = 0) -> int:
        return clean_epochs(self.table, committed_epoch, since_epoch)

    def clean_attempt(self, epoch: int, attempt: str, keep: Sequence[str]) -> int:
        return clean_attempt(attempt_uri(self.table.location(), epoch, attempt), keep, self.lake_storage())


def _commit_table_properties(
    epoch: int, end: Offsets, attempt: str, identity: HotIdentity | None, reloaded: bool
) -> dict[str, str]:
    """The table properties a tiering commit sets in its swap: the last commit, the hot table's identity the round
    planned with, and, for the round that read the whole hot table again, the pending reload cleared."""
    found = last_commit_property(epoch, end, attempt)
    if identity is not None:
        found.update(identity_property(identity))
    if reloaded:
        found.update(reload_property(None))
    return found
