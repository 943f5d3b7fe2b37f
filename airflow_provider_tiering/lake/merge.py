"""Merge a round's rows into a primary-key table, copy-on-write, in one fenced snapshot.

A merge table's round writes every row version it read, as an append round does. Before the commit, in the
process that commits (the task process), this module:

1. reads those files back and keeps, per key, the version with the greatest cursor (ties: the one read last);
   a kept version whose soft-delete column is set is dropped, its key still counts as changed;
2. finds the live data files that may hold any changed key (scan planning prunes by partition and column
   statistics), reads them and rewrites each one that does without those keys;
   A reconciling round (``MergeKey.reconcile``) also brought every key of the hot table, read in the snapshot
   its rows were read in: the lake's keys that are neither among them nor among the round's rows are removed
   the same way (hard deletes, the old key of a row whose key changed);
3. commits one ``overwrite`` snapshot that removes the rewritten files and adds their rewrites and the kept
   versions, with the tiering properties of an append and its fence, plus a check that every file it removes is
   still live (a compaction may have replaced it meanwhile: then it plans again).

Copy-on-write writes no delete files, so every reader (pyiceberg 0.12 cannot read equality deletes) sees the
merged rows, and compaction keeps working. Rewrites are staged under the attempt's directory like its other files:
a crash before the commit leaves nothing visible, and the next committed round's cleanup deletes them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_tiering.core.errors import CommitConflict, LakeError, NotRetryable
from airflow_provider_tiering.core.ports import (
    CHANGE_DELETED,
    CHANGE_FILL,
    MergeKey,
    MergeResult,
    RowPartitioner,
    WrittenFile,
)
from airflow_provider_tiering.lake.add_files import data_file, set_name_mapping
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction
from airflow_provider_tiering.lake.live_files import has_live_delete_files, live_data_files
from airflow_provider_tiering.lake.parquet_writer import write_data_files
from airflow_provider_tiering.lake.warehouse import LOCAL_STORAGE, LakeStorage

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Up to this many changed keys, file pruning asks for exactly them (``In``); beyond, for their range per column
#: (pyiceberg's statistics evaluator does not prune an ``In`` of more than 200 values).
IN_FILTER_KEYS = 200
_POSITION = "__merge_position"


@dataclass(frozen=True)
class RoundChanges:
    """The round's rows, reduced to what the lake must hold."""

    #: Each changed key once (the key columns only).
    keys: pa.Table
    #: The round's files as they may be committed: those holding only kept versions as written, the others
    #: rewritten with their kept versions (none when nothing of theirs is kept).
    files: tuple[WrittenFile, ...]
    kept_rows: int
    deleted_keys: int
    #: Kept versions of a change stream that still need values from the lake's stored rows (``CHANGE_FILL``).
    to_fill: pa.Table | None = None
    #: The keys whose latest version is a delete (the key columns only).
    deleted: pa.Table | None = None


def _read_parquet(uri: str, storage: LakeStorage) -> pa.Table:
    filesystem, path = storage.filesystem_and_path(uri)
    return pq.read_table(path, filesystem=filesystem)


def is_soft_deleted(column: pa.ChunkedArray[Any]) -> Any:
    """Soft-deleted: a value is set, and for a boolean column it is true."""
    if pa.types.is_boolean(column.type):
        return pc.fill_null(column, pa.scalar(False))
    return pc.is_valid(column)


def _count(mask: Any) -> int:
    """How many values of a boolean array are true."""
    return int(pc.sum(mask).as_py() or 0)


def _read_columns(schema: pa.Schema, key: MergeKey) -> tuple[list[str], list[str]]:
    """The columns to read from the round's files: the lake's, and those only the round's files have."""
    extra = [CHANGE_DELETED, CHANGE_FILL] if key.from_change_stream else []
    return list(schema.names), extra


def reduce_round(
    files: Sequence[WrittenFile],
    key: MergeKey,
    schema: pa.Schema,
    write: Callable[[pa.Table, str], list[WrittenFile]],
    storage: LakeStorage = LOCAL_STORAGE,
) -> RoundChanges:
    """Keep the latest version of each key among the round's ``files`` (see the module's step 1); ``write(rows,
    prefix)`` stages rows that must be written again."""
    names, extra = _read_columns(schema, key)
    # A change stream's deleted keys carry their key only: its rows are read nullable, and cast when kept.
    read_schema = pa.schema([f.with_nullable(True) for f in schema]) if extra else schema
    parts = []
    for f in files:
        part = _read_parquet(f.path, storage)
        lake_part = part.select(names).cast(read_schema)
        parts.append(
            lake_part.append_column(CHANGE_DELETED, part.column(CHANGE_DELETED)).append_column(
                CHANGE_FILL, part.column(CHANGE_FILL)
            )
            if extra
            else lake_part
        )
    sizes = [p.num_rows for p in parts]
    if parts:
        rows = pa.concat_tables(parts)
    else:  # a round of nothing but skipped transactions (eviction's) moves the offsets only
        empty = read_schema.empty_table()
        rows = (
            empty.append_column(CHANGE_DELETED, pa.array([], pa.bool_())).append_column(
                CHANGE_FILL, pa.array([], pa.string())
            )
            if extra
            else empty
        )
    positions = pa.array(range(rows.num_rows), pa.int64())
    order = [] if key.cursor is None else [key.cursor]
    ordering = rows.select([*key.columns, *order]).append_column(_POSITION, positions)
    ordering = ordering.sort_by([*((c, "ascending") for c in order), (_POSITION, "ascending")])
    # Hash aggregation keeps input order without threads: "last" is the greatest cursor, the latest read on a tie.
    latest = ordering.group_by(list(key.columns), use_threads=False).aggregate([(_POSITION, "last")])
    keep = pc.is_in(positions, value_set=latest.column(f"{_POSITION}_last").combine_chunks())
    deleted_keys = 0
    deleted_rows = None
    marker = CHANGE_DELETED if key.from_change_stream else key.soft_delete_column
    if marker is not None:
        deleted = is_soft_deleted(rows.column(marker))
        deleted_latest = pc.and_(keep, deleted)
        deleted_keys = _count(deleted_latest)
        deleted_rows = rows.select(list(key.columns)).filter(deleted_latest)
        keep = pc.and_(keep, pc.invert(deleted))
    kept: list[WrittenFile] = []
    to_fill: list[pa.Table] = []
    offset = 0
    for written, part, size in zip(files, parts, sizes, strict=True):
        mask = keep.slice(offset, size)
        offset += size
        survivors = _count(mask)
        if survivors == size and not extra:
            kept.append(written)
        elif survivors:
            rows_kept = part.filter(mask)
            if extra:  # staged with the change columns: rewritten without them, less those waiting for a fill
                filling = pc.is_valid(rows_kept.column(CHANGE_FILL))
                if _count(filling):
                    to_fill.append(rows_kept.filter(filling))
                    rows_kept = rows_kept.filter(pc.invert(filling))
                rows_kept = rows_kept.select(names).cast(schema)
            if rows_kept.num_rows:
                kept.extend(write(rows_kept, f"merged-{written.split_index:05d}"))
    return RoundChanges(
        latest.select(list(key.columns)),
        tuple(kept),
        _count(keep),
        deleted_keys,
        pa.concat_tables(to_fill) if to_fill else None,
        deleted_rows,
    )


def keys_absent(table: Table, hot_keys: pa.Table, round_keys: pa.Table | None, columns: Sequence[str]) -> pa.Table:
    """The keys the table's current snapshot holds that are neither in ``hot_keys`` (every key of the hot table,
    in the round's snapshot) nor in ``round_keys`` (the round's own rows: never removed by a reconciliation, even
    if a hot read at another moment had missed them), typed as ``round_keys`` (or the lake)."""
    if table.current_snapshot() is None:
        return hot_keys.schema.empty_table()
    stored = table.scan(selected_fields=tuple(columns)).to_arrow().select(list(columns))
    target = round_keys.schema if round_keys is not None else stored.schema
    stored = stored.cast(target)
    present = [hot_keys.select(list(columns)).cast(target)]
    if round_keys is not None:
        present.append(round_keys.select(list(columns)).cast(target))
    return stored.join(pa.concat_tables(present), keys=list(columns), join_type="left anti").cast(target)


def with_keys_removed(changes: RoundChanges, gone: pa.Table) -> RoundChanges:
    """``changes`` plus the removal of ``gone`` (keys the round has no row of)."""
    if gone.num_rows == 0:
        return changes
    gone = gone.cast(changes.keys.schema)
    deleted = gone if changes.deleted is None else pa.concat_tables([changes.deleted.cast(gone.schema), gone])
    return replace(changes, keys=pa.concat_tables([changes.keys, gone]), deleted=deleted)


def _pruning_filter(keys: pa.Table, columns: Sequence[str]) -> BooleanExpression:
    """A row filter every row holding one of ``keys`` matches, for scan planning to prune files with."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual

    if len(columns) == 1 and keys.num_rows <= IN_FILTER_KEYS:
        return In(term=columns[0], literals=set(keys.column(0).to_pylist()))
    bounds: list[BooleanExpression] = []
    for name in columns:
        extremes: Any = pc.min_max(keys.column(name)).as_py()
        bounds += [
            GreaterThanOrEqual(term=name, value=extremes["min"]),
            LessThanOrEqual(term=name, value=extremes["max"]),
        ]
    expression = bounds[0]
    for bound in bounds[1:]:
        expression = And(expression, bound)
    return expression


def candidate_files(table: Table, keys: pa.Table, columns: Sequence[str]) -> list[DataFile]:
    """Live data files that may hold one of ``keys`` (by partition and column statistics)."""
    if keys.num_rows == 0:
        return []
    try:
        return [task.file for task in table.scan(row_filter=_pruning_filter(keys, columns)).plan_files()]
    except (TypeError, ValueError) as exc:  # a key type statistics cannot be compared with: read every file
        log.info("no file pruning for the merge (%s); reading every live file", exc)
        return live_data_files(table)


def rows_without_keys(
    table: Table, entry: DataFile, keys: pa.Table, columns: Sequence[str]
) -> tuple[pa.Table, pa.Table] | None:
    """The rows of a live data file (in the table's current schema) without those holding one of ``keys``, and
    those; None when it holds none of them."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    # The scan's reader of one file, as compaction uses it: files of an older schema come out in the current one.
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table([FileScanTask(entry)])
    positions = pa.array(range(rows.num_rows), pa.int64())
    own = rows.select(list(columns)).append_column(_POSITION, positions)
    wanted = keys.cast(pa.schema([own.schema.field(name) for name in columns]))
    hits = own.join(wanted, keys=list(columns), join_type="inner").column(_POSITION)
    if len(hits) == 0:
        return None
    matched = pc.is_in(positions, value_set=hits.combine_chunks())
    return rows.filter(pc.invert(matched)), rows.filter(matched)


def fill_unchanged(to_fill: pa.Table, stored: Sequence[pa.Table], key: MergeKey, schema: pa.Schema) -> pa.Table:
    """Give the kept versions in ``to_fill`` the values of the columns their update left unchanged (TOAST), from
    the lake's stored rows of the key each names (``CHANGE_FILL``).

    Raises:
        NotRetryable: the lake holds no row for such a key (it diverged from the hot table: only a new snapshot
            can tell the value).
    """
    by_key: dict[tuple[str, ...], dict[str, Any]] = {}
    for part in stored:
        for row in part.select(schema.names).to_pylist():
            by_key[tuple(str(row[c]) for c in key.columns)] = row
    filled: list[dict[str, Any]] = []
    for row in to_fill.to_pylist():
        fill = json.loads(row.pop(CHANGE_FILL))
        row.pop(CHANGE_DELETED, None)
        source_key = tuple(fill["key"]) if fill.get("key") is not None else tuple(str(row[c]) for c in key.columns)
        stored_row = by_key.get(source_key)
        if stored_row is None:
            raise NotRetryable(
                f"an update of key {list(source_key)} left columns {fill['columns']} unchanged (stored out of line) "
                "and the lake holds no row for that key to take them from: the lake and the hot table diverged. "
                "Load the table again (drop the lake table; the next round takes a new snapshot)"
            )
        row.update({column: stored_row.get(column) for column in fill["columns"]})
        filled.append(row)
    return pa.Table.from_pylist(filled, schema=schema)


@dataclass(frozen=True)
class MergePlan:
    """One try's rewrite: the live files it removes and the files it adds."""

    removed: tuple[DataFile, ...]
    added: tuple[WrittenFile, ...]
    #: Changed keys the lake held a row for, and how many of them the round deleted.
    replaced_keys: int = 0
    deleted_stored_keys: int = 0


def plan_rewrites(
    table: Table,
    changes: RoundChanges,
    key: MergeKey,
    schema: pa.Schema,
    write: Callable[[pa.Table, str], list[WrittenFile]],
) -> MergePlan:
    """The live files holding changed keys, and their rewrites without them (staged by ``write``)."""
    removed: list[DataFile] = []
    added: list[WrittenFile] = []
    stored: list[pa.Table] = []
    replaced = deleted_stored = 0
    for entry in candidate_files(table, changes.keys, key.columns):
        found = rows_without_keys(table, entry, changes.keys, key.columns)
        if found is None:
            continue
        rest, matched = found
        removed.append(entry)
        if changes.to_fill is not None:
            stored.append(matched)
        if rest.num_rows:
            added.extend(write(rest.select(schema.names).cast(schema), "rewrite"))
        replaced += matched.num_rows
        if changes.deleted is not None and changes.deleted.num_rows:
            wanted = changes.deleted.cast(pa.schema([matched.schema.field(c) for c in key.columns]))
            deleted_stored += (
                matched.select(list(key.columns)).join(wanted, keys=list(key.columns), join_type="inner").num_rows
            )
    if changes.to_fill is not None:
        added.extend(write(fill_unchanged(changes.to_fill, stored, key, schema), "filled"))
    return MergePlan(tuple(removed), tuple(added), replaced, deleted_stored)


def merge_files(
    load_table: Callable[[], Table | None],
    name: str,
    files: Sequence[WrittenFile],
    key: MergeKey,
    *,
    schema: pa.Schema,
    directory_uri: str,
    partitioner: RowPartitioner,
    target_file_bytes: int,
    storage: LakeStorage,
    properties: dict[str, str],
    table_properties: dict[str, str],
    fence: Callable[[Table], None],
    max_conflict_retries: int = 5,
    hot_keys: pa.Table | None = None,
) -> MergeResult:
    """Merge the round's ``files`` (see the module's docstring) and commit one snapshot; with ``hot_keys``, also
    remove the lake's keys absent from them and from the round's rows.

    Raises:
        FencedError: from ``fence``: nothing was committed.
        CommitConflict: the files to rewrite kept changing, or the catalog's swap kept being lost.
        LakeError: the table disappeared, or holds delete files this merge would not apply.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.snapshots import Operation

    # pyiceberg's public overwrite deletes by row filter, not by file: its file-level producer, as compaction uses.
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    def write(rows: pa.Table, prefix: str) -> list[WrittenFile]:
        return write_data_files(
            rows.to_batches(), schema, directory_uri, prefix, 0, partitioner, target_file_bytes, storage=storage
        )

    def fenced_now() -> Table:
        table = load_table()
        if table is None:
            raise LakeError(f"Iceberg table {name} disappeared before the commit")
        fence(table)
        return table

    # A newer attempt's commit deletes the files of older epochs: a stale attempt must learn it is fenced, not
    # fail on its vanished files.
    fenced_now()
    try:
        changes = reduce_round(files, key, schema, write, storage)
    except FileNotFoundError:
        fenced_now()
        raise
    for attempt_number in range(max_conflict_retries + 1):
        table = fenced_now()
        if has_live_delete_files(table):
            raise LakeError(
                f"Iceberg table {'.'.join(table.name())} has delete files (another engine's merge-on-read deletes); "
                "a copy-on-write merge would not apply them. Compact the table with that engine first"
            )
        merging = changes
        if hot_keys is not None:  # against the snapshot this try commits onto
            merging = with_keys_removed(changes, keys_absent(table, hot_keys, changes.keys, key.columns))
        plan = plan_rewrites(table, merging, key, schema, write)
        removed_paths = {f.file_path for f in plan.removed}

        def fenced(refreshed: Table, removed: set[str] = removed_paths) -> None:
            fence(refreshed)
            if not removed <= {f.file_path for f in live_data_files(refreshed)}:
                raise CommitConflict("files the merge rewrites were replaced meanwhile (a compaction)")

        added = (*changes.files, *plan.added)
        entries = [data_file(table, f) for f in added]
        try:
            with fenced_transaction(table, fenced) as tx:
                set_name_mapping(tx)
                tx.set_properties(dict(table_properties))
                overwrite = _OverwriteFiles(
                    operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties
                )
                with overwrite as producer:
                    for entry in plan.removed:
                        producer.delete_data_file(entry)
                    for entry in entries:
                        producer.append_data_file(entry)
        except (CommitConflict, CommitFailedException) as exc:
            log.warning("merge commit lost (try %d): %s; planning the rewrite again", attempt_number + 1, exc)
            time.sleep(min(2.0, 0.1 * 2**attempt_number))
            continue
        committed = load_table()
        snapshot = None if committed is None else committed.current_snapshot()
        if snapshot is None:
            raise LakeError(f"Iceberg table {name} disappeared after the merge's commit")
        return MergeResult(
            int(snapshot.snapshot_id),
            added,
            len(plan.removed),
            changes.kept_rows,
            changes.deleted_keys,
            0 if changes.to_fill is None else changes.to_fill.num_rows,
            inserted_rows=changes.kept_rows - (plan.replaced_keys - plan.deleted_stored_keys),
            updated_rows=plan.replaced_keys - plan.deleted_stored_keys,
            deleted_rows=plan.deleted_stored_keys,
        )
    raise CommitConflict(
        f"the merge commit lost {max_conflict_retries + 1} times to other commits; nothing was committed"
    )
