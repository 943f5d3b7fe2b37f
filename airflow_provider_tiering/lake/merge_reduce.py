"""A merge round's first step, on the driver: which of the round's row versions the lake must hold.

Only the columns that decide it are read (the key, the cursor, the soft-delete or change-stream markers), so the
driver's memory grows with the round's keys, not with its rows; the rows themselves are read again, file by file,
by the tasks that write what survives (``lake/merge_rewrite.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_tiering.core.ports import CHANGE_CHUNK, CHANGE_DELETED, CHANGE_FILL, MergeKey, WrittenFile
from airflow_provider_tiering.lake.positions import row_positions
from airflow_provider_tiering.lake.warehouse import LOCAL_STORAGE, LakeStorage

if TYPE_CHECKING:
    from pyiceberg.table import Table

_POSITION = "__merge_position"
#: The change columns of a change stream's staged files.
CHANGE_TYPES: dict[str, pa.Field[Any]] = {
    CHANGE_DELETED: pa.field(CHANGE_DELETED, pa.bool_()),
    CHANGE_FILL: pa.field(CHANGE_FILL, pa.string()),
    CHANGE_CHUNK: pa.field(CHANGE_CHUNK, pa.int32()),
}


@dataclass(frozen=True)
class KeptRows:
    """The rows of one of the round's files that survive: their positions in the file, in file order (None: all of
    them, the file is written again only without its change columns)."""

    file: WrittenFile
    positions: pa.Array[Any] | None = None  # int64

    def read(self, storage: LakeStorage) -> pa.Table:
        rows = read_round_file(self.file, storage)
        return rows if self.positions is None else rows.take(self.positions)


@dataclass(frozen=True)
class RoundChanges:
    """The round's rows, reduced to what the lake must hold."""

    #: Each changed key once (the key columns only).
    keys: pa.Table
    #: The round's files that hold only kept versions in the lake's columns: committed as written.
    as_written: tuple[WrittenFile, ...]
    #: The round's other files with any kept versions: written again with only those, in the lake's columns.
    to_filter: tuple[KeptRows, ...]
    kept_rows: int
    deleted_keys: int
    #: Kept versions of a change stream that still need values from the lake's stored rows (``CHANGE_FILL``).
    to_fill: pa.Table | None = None
    #: The keys whose latest version is a delete (the key columns only).
    deleted: pa.Table | None = None
    #: Every file the round staged.
    round_files: tuple[WrittenFile, ...] = ()


def is_soft_deleted(column: pa.ChunkedArray[Any]) -> Any:
    """Soft-deleted: a value is set, and for a boolean column it is true."""
    if pa.types.is_boolean(column.type):
        return pc.fill_null(column, pa.scalar(False))
    return pc.is_valid(column)


def count_true(mask: Any) -> int:
    """How many values of a boolean array are true."""
    return int(pc.sum(mask).as_py() or 0)


def read_round_file(written: WrittenFile, storage: LakeStorage, columns: Sequence[str] | None = None) -> pa.Table:
    """One of the round's staged files (``columns`` of it)."""
    filesystem, path = storage.filesystem_and_path(written.path)
    return pq.read_table(path, filesystem=filesystem, columns=None if columns is None else list(columns))


def _deciding_columns(written: WrittenFile, storage: LakeStorage, deciding: pa.Schema) -> tuple[pa.Table, bool]:
    """The deciding columns of one of the round's files, and whether it has change columns: a change stream's load
    from a snapshot is written without them (no deletes, no fills, chunk 0)."""
    filesystem, path = storage.filesystem_and_path(written.path)
    present = set(pq.read_schema(path, filesystem=filesystem).names)
    with_changes = CHANGE_DELETED in present
    rows = read_round_file(written, storage, [name for name in deciding.names if name in present])
    for field in deciding:
        if field.name not in present:
            column = pa.nulls(rows.num_rows, field.type)
            if field.name == CHANGE_DELETED:
                column = pc.fill_null(column, pa.scalar(False))
            elif field.name == CHANGE_CHUNK:
                column = pc.fill_null(column, pa.scalar(0, field.type))
            rows = rows.append_column(field, column)
    return rows.select(deciding.names).cast(deciding), with_changes


def reduce_round(
    files: Sequence[WrittenFile], key: MergeKey, schema: pa.Schema, storage: LakeStorage = LOCAL_STORAGE
) -> RoundChanges:
    """Keep, per key, the version with the greatest cursor among the round's ``files`` (ties: the one read last; a
    change stream's: the one of the latest chunk); a kept version whose soft-delete column (a change stream: its
    delete marker) is set is dropped, its key still counts as changed. ``schema`` is the lake's (Arrow)."""
    change_stream = key.from_change_stream
    marker = CHANGE_DELETED if change_stream else key.soft_delete_column
    # A change stream's versions are in commit order by chunk, and a key is in a chunk once.
    order = [CHANGE_CHUNK] if change_stream else [] if key.cursor is None else [key.cursor]
    deciding = list(dict.fromkeys([*key.columns, *order, *([marker] if marker else [])]))
    if change_stream:
        deciding.append(CHANGE_FILL)
    # A change stream's deleted keys carry their key only: its columns are read nullable.
    types = {f.name: (f.with_nullable(True) if change_stream else f) for f in schema}
    types.update(CHANGE_TYPES)
    deciding_schema = pa.schema([types[name] for name in deciding])
    parts = [_deciding_columns(f, storage, deciding_schema) for f in files]
    rows = pa.concat_tables([part for part, _ in parts]) if parts else deciding_schema.empty_table()
    positions = row_positions(rows.num_rows)
    ordering = rows.select([*key.columns, *order]).append_column(_POSITION, positions)
    ordering = ordering.sort_by([*((c, "ascending") for c in order), (_POSITION, "ascending")])
    # Hash aggregation keeps input order without threads: "last" is the greatest cursor, the latest read on a tie.
    latest = ordering.group_by(list(key.columns), use_threads=False).aggregate([(_POSITION, "last")])
    keep = pc.is_in(positions, value_set=latest.column(f"{_POSITION}_last").combine_chunks())
    deleted_keys = 0
    deleted_rows = None
    if marker is not None:
        deleted = is_soft_deleted(rows.column(marker))
        deleted_latest = pc.and_(keep, deleted)
        deleted_keys = count_true(deleted_latest)
        deleted_rows = rows.select(list(key.columns)).filter(deleted_latest)
        keep = pc.and_(keep, pc.invert(deleted))
    filling = pc.and_(keep, pc.is_valid(rows.column(CHANGE_FILL))) if change_stream else None
    as_written: list[WrittenFile] = []
    to_filter: list[KeptRows] = []
    to_fill: list[pa.Table] = []
    offset = 0
    for written, (part, with_changes) in zip(files, parts, strict=True):
        size = part.num_rows
        mask = keep.slice(offset, size)
        if filling is not None and with_changes:  # written again without its change columns, less rows to fill
            fill_mask = filling.slice(offset, size)
            if count_true(fill_mask):
                fill_positions = pc.indices_nonzero(fill_mask)
                to_fill.append(read_round_file(written, storage).take(fill_positions))
                mask = pc.and_(mask, pc.invert(fill_mask))
        offset += size
        survivors = count_true(mask)
        if survivors == size and not with_changes:
            as_written.append(written)
        elif survivors == size:
            to_filter.append(KeptRows(written))
        elif survivors:
            to_filter.append(KeptRows(written, pc.indices_nonzero(mask).cast(pa.int64())))
    fill_schema = pa.schema([*(f.with_nullable(True) for f in schema), *CHANGE_TYPES.values()])
    return RoundChanges(
        latest.select(list(key.columns)),
        tuple(as_written),
        tuple(to_filter),
        count_true(keep),
        deleted_keys,
        pa.concat_tables([t.select(fill_schema.names).cast(fill_schema) for t in to_fill]) if to_fill else None,
        deleted_rows,
        tuple(files),
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
