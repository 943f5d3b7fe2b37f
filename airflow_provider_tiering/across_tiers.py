"""Read a tiered table across both tiers: the lake's current snapshot plus the hot rows beyond its committed offsets.

Every row once, whatever has been tiered (or evicted from the hot store) so far, as of one moment:

1. a read-only transaction on the hot store fixes its snapshot first;
2. then the lake's current snapshot is loaded, with the end offsets of its latest tiering commit;
3. then, in the hot snapshot, the rows beyond those offsets are read.

A round committing between 1 and 2 only moves the offsets forward: its rows are in the lake snapshot and excluded
from the hot part. Rows a round (or eviction) handles after 1 are still in the hot snapshot, and beyond the lake's
offsets unless that round committed before 2. A row is in the lake part exactly when its cursor is within the
committed offsets (the safe watermark guarantees it) - so no row is missing or counted twice.

Only SQL hot stores (a cursor column), and change-stream tables. The lake part keeps the lake's schema: hot columns
the lake does not have yet (a schema change the next round will apply) are left out, lake columns the hot table
lost read as nulls.

**Merge tables** (a lake table with identifier fields, ``TableSpec.merge``) give the latest version per key: a lake
row whose key is among the hot rows beyond the offsets is replaced by the hot version (several rows of one key
cannot be there: the hot table holds one per key), and a hot row whose soft-delete column is set hides its key.
Hard deletes and the old key of a row whose key changed since the lake's last round are not known to the view
(it reads only the hot rows beyond the offsets, not every hot key): such rows still show from the lake until a
reconciling round (``merge.reconcile_keys_every_seconds``) removes them.

**Change-stream tables** (``postgres_cdc``) without eviction: the hot table holds every live row, so the view is
the whole hot table in one snapshot, and nothing from the lake (``TiersReader.holds_every_row``). With eviction the
hot table no longer does, and a deleted key cannot be told from an evicted one: ``read_table_across_tiers``
refuses such a table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.errors import InvalidTableSpec, LakeError, SourceError
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.lake.positions import row_positions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.lake.iceberg import IcebergLake


@dataclass(frozen=True)
class AcrossTiers:
    """One consistent read of both tiers; ``lake_files`` are the data files of ``snapshot_id`` (for engines that
    read them themselves, e.g. Spark), ``hot`` the hot rows beyond ``committed_offsets``."""

    snapshot_id: int | None
    committed_offsets: Offsets | None
    schema: pa.Schema
    lake_files: tuple[str, ...]
    hot: pa.Table
    lake_has_delete_files: bool
    _table: Table | None  # the pyiceberg table as loaded
    #: A merge table's key (the lake table's identifier fields); () for an append-only table.
    merge_key: tuple[str, ...] = ()
    #: A merge table's soft-delete column: a hot row with it set hides its key.
    soft_delete_column: str | None = None
    #: The snapshot's position-delete files (merge-on-read rounds'): rows of ``lake_files`` they name are not there.
    lake_delete_files: tuple[str, ...] = ()

    def lake(self) -> pa.Table:
        """The lake part, read with pyiceberg; for a merge table, without the keys the hot part has a newer
        version of (or has deleted)."""
        if self.snapshot_id is None or self._table is None:
            return self.schema.empty_table()
        rows = self._table.scan(snapshot_id=self.snapshot_id).to_arrow().cast(self.schema)
        if not self.merge_key or self.hot.num_rows == 0:
            return rows
        import pyarrow.compute as pc

        # Positions of the rows whose key the hot part has (a join of the key columns only: any column type).
        keys = list(self.merge_key)
        positions = row_positions(rows.num_rows)
        own = rows.select(keys).append_column("__position", positions)
        hits = own.join(self.hot.select(keys), keys=keys, join_type="inner").column("__position")
        return rows.filter(pc.invert(pc.is_in(positions, value_set=hits.combine_chunks())))

    def hot_rows(self) -> pa.Table:
        """The hot part as the view shows it: without rows whose soft-delete column is set."""
        if self.soft_delete_column is None or self.soft_delete_column not in self.hot.schema.names:
            return self.hot
        import pyarrow.compute as pc

        from airflow_provider_tiering.lake.merge_reduce import is_soft_deleted

        return self.hot.filter(pc.invert(is_soft_deleted(self.hot.column(self.soft_delete_column))))

    def to_arrow(self) -> pa.Table:
        """Both parts as one Arrow table (query it with DuckDB, Polars, pandas …); one row per key for a merge
        table (see the module's description)."""
        import pyarrow as pa

        return pa.concat_tables([self.lake(), self.hot_rows()])

    def to_spark(self, spark: Any) -> Any:
        """Both parts as one Spark DataFrame: Spark reads the lake snapshot's data files itself; the hot part (rows
        not yet tiered, at most a freshness interval of them) is handed over from Arrow."""
        from pyspark.sql import functions
        from pyspark.sql.pandas.types import from_arrow_schema

        if self.lake_has_delete_files and not self.lake_delete_files:
            raise LakeError("the lake snapshot has equality-delete files (another engine's): read it with .to_arrow()")
        spark_schema = from_arrow_schema(self.schema)
        hot = spark.createDataFrame(self.hot_rows(), schema=spark_schema)
        if not self.lake_files:
            return hot
        lake = spark.read.schema(spark_schema).parquet(*self.lake_files)
        if self.lake_delete_files:  # position deletes: by the file (scheme aside) and the row's index in it

            def bare(column: Any) -> Any:
                return functions.regexp_replace(column, "^[a-z0-9]+:/+", "/")

            lake = lake.select("*", bare(functions.col("_metadata.file_path")).alias("__file"),
                               functions.col("_metadata.row_index").alias("__pos"))  # fmt: skip
            deleted = spark.read.parquet(*self.lake_delete_files).select(
                bare(functions.col("file_path")).alias("__file"), functions.col("pos").alias("__pos")
            )
            lake = lake.join(deleted, on=["__file", "__pos"], how="left_anti").drop("__file", "__pos")
        if self.merge_key and self.hot.num_rows:
            keys = list(self.merge_key)
            hot_keys = spark.createDataFrame(
                self.hot.select(keys), schema=from_arrow_schema(self.hot.select(keys).schema)
            )
            lake = lake.join(hot_keys, on=keys, how="left_anti")
        return lake.unionByName(hot)


def read_across_tiers(source: AnySource, lake: IcebergLake, *, soft_delete_column: str | None = None) -> AcrossTiers:
    """Both tiers as of now (see the module's description). A merge table's key is the lake table's identifier
    fields; ``soft_delete_column`` is its ``merge.soft_delete_column``.

    Raises:
        SourceError: the source has no cursor to read beyond (a landing zone), or cannot be read.
    """
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from airflow_provider_tiering.lake.live_files import has_live_delete_files, live_data_files, live_delete_files
    from airflow_provider_tiering.lake.tiering_commits import latest_tiering_commit
    from airflow_provider_tiering.sources.conform import conform_batch

    reader = source.tiers_reader()
    if reader is None:
        raise SourceError(f"{source.display_name}: reading across tiers needs a SQL hot store (a cursor column)")
    with reader.rows_after_reader() as rows_after:
        table = lake.load_table()
        if table is None:  # never tiered: everything is hot
            hot = rows_after(None)
            return AcrossTiers(None, None, hot.schema, (), hot, False, None, soft_delete_column=soft_delete_column)
        snapshot = table.current_snapshot()
        commit = latest_tiering_commit(table)
        offsets = None if commit is None else commit.end_offsets
        hot_rows = rows_after(None if reader.holds_every_row else offsets)
    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    batches = [conform_batch(batch, schema) for batch in hot_rows.to_batches()]
    hot = pa.Table.from_batches(batches, schema=schema)
    snapshot_id = None if snapshot is None else snapshot.snapshot_id
    if reader.holds_every_row:  # the hot snapshot is the whole table: nothing comes from the lake
        return AcrossTiers(snapshot_id, offsets, schema, (), hot, False, None)
    files = () if snapshot is None else tuple(f.file_path for f in live_data_files(table))
    ids = set(table.schema().identifier_field_ids)
    key = tuple(f.name for f in table.schema().fields if f.field_id in ids)  # in column order
    return AcrossTiers(
        snapshot_id,
        offsets,
        schema,
        files,
        hot,
        has_live_delete_files(table),
        table,
        merge_key=key,
        soft_delete_column=soft_delete_column if key else None,
        lake_delete_files=_position_delete_paths(live_delete_files(table)),
    )


def _position_delete_paths(delete_files: Any) -> tuple[str, ...]:
    """The paths of the position-delete files; none when any delete file is an equality delete (no reader here
    applies those)."""
    if any(d.content != 1 for d in delete_files):  # DataFileContent.POSITION_DELETES
        return ()
    return tuple(d.file_path for d in delete_files)


def read_table_across_tiers(table: TableSpec | dict[str, Any]) -> AcrossTiers:
    """:func:`read_across_tiers` for a table spec, through its Airflow connections (hot store and catalog)."""
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.hooks.tiering import TieringHook

    spec = TableSpec.parse(table)
    if spec.source.cursor() is None and not spec.source.streams_changes:
        raise InvalidTableSpec(
            f"table {spec.name!r}: reading across tiers needs a SQL hot store (a cursor column) or a change stream"
        )
    if spec.source.streams_changes and spec.eviction.enabled:
        # The hot table is the whole table only without eviction; with it, the lake alone holds the evicted rows,
        # and the hot table cannot tell an evicted key from a deleted one.
        raise InvalidTableSpec(
            f"table {spec.name!r}: reading across tiers is not supported for a change-stream table with eviction "
            "(the hot table no longer holds every row, and a deleted key cannot be told from an evicted one): read "
            "the lake table itself"
        )
    soft_delete = None if spec.merge is None else spec.merge.soft_delete_column
    with TieringHook(spec).build_round() as parts:
        return read_across_tiers(parts.source, parts.lake, soft_delete_column=soft_delete)
