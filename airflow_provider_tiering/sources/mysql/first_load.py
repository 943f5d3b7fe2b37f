"""A MariaDB table's first load: the table as it stood at one binlog position, read in splits that each take a
snapshot of their own, without a lock.

MariaDB gives a transaction started ``WITH CONSISTENT SNAPSHOT`` the binlog position its snapshot stands at
(``binlog_snapshot_file`` and ``_position``), but no way to share that snapshot with another connection (PostgreSQL
exports one). So the plan takes a snapshot only to learn a position P (the load's end offsets, where the stream
starts), and each split, on Spark or in the task process, opens its own: connectorx runs ``START TRANSACTION WITH
CONSISTENT SNAPSHOT`` before the split's query, and the query returns the snapshot's position P' >= P with the rows
(a range found empty takes a snapshot of its own on PyMySQL to learn one).
The split then rolls its rows back from P' to P with the binlog: each key of its range that a transaction committed
in (P, P'] changed takes its version from before its first such change (its whole old row; absent where that change
inserted it: ``change_stream/reduce.py: versions_before``). Every split thus reads the table as it stood at P: no
change committed while the load runs is missed (the stream starts at P) or applied twice (no split holds one).

Splits are ranges of a single-column integer key, cut at quantiles of a sample of its values (even in rows, whatever
the key's gaps); any other key loads in one split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.sources.change_stream.plans import ChangeSplit
from airflow_provider_tiering.sources.conform import conform_batch
from airflow_provider_tiering.sources.mysql.binlog_positions import pack
from airflow_provider_tiering.sources.mysql.table import MySqlTable, rows_batch

#: Above this many rows, the key's quantiles come from a random sample of about this many.
SAMPLE_ROWS = 200_000
_FILE, _POSITION = "__tiering_snapshot_file", "__tiering_snapshot_position"
#: What a split's session runs before its query: its own consistent snapshot, and that snapshot's binlog position.
SNAPSHOT_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "START TRANSACTION WITH CONSISTENT SNAPSHOT",
    "SELECT VARIABLE_VALUE INTO @__tiering_file FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE'",
    "SELECT VARIABLE_VALUE INTO @__tiering_position FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION'",
)


@dataclass(frozen=True)
class SnapshotLoad:
    """A first load: the table as it stood at binlog ``position``, cut at ``bounds`` of ``key_column`` (ascending;
    none: one split)."""

    position: int
    key_column: str | None = None
    bounds: tuple[int, ...] = ()


@dataclass(frozen=True)
class KeyRange:
    """A split of the first load: the rows whose key lies in ``[low, high)`` (None: open), as they stood at binlog
    ``position``."""

    position: int
    key_column: str | None = None
    low: int | None = None
    high: int | None = None

    def holds(self, value: Any) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)


def key_bounds(table: MySqlTable, key: Sequence[str], rows: int, splits: int) -> tuple[str | None, tuple[int, ...]]:
    """The column and the values the first load's ranges are cut at: quantiles of a single-column integer key, from
    a random sample above ``SAMPLE_ROWS`` rows (a split is of about equal rows, whatever the key's gaps); ``(None,
    ())`` for one split or any other key."""
    if splits <= 1 or len(key) != 1 or not pa.types.is_integer(table.schema().field(key[0]).type):
        return None, ()
    column = table.quote(key[0])
    fraction = min(1.0, SAMPLE_ROWS / max(1, rows))
    where = "" if fraction >= 1 else f" WHERE RAND() < {fraction:.9f}"
    found = table._query(f"SELECT {column} FROM {table.table_ref}{where} ORDER BY {column}")
    values = [int(row[0]) for row in found]
    if len(values) < splits:
        return None, ()
    bounds = sorted({values[len(values) * i // splits] for i in range(1, splits)})
    return key[0], tuple(bounds)


def split_count(estimated_rows: int, target_rows_per_split: int, parallelism: int) -> int:
    """As many splits as the rows ask for, a multiple of the writer's parallelism (as for cursor ranges)."""
    slots = max(1, parallelism)
    return max(1, slots * math.ceil(estimated_rows / (target_rows_per_split * slots)))


def cut(load: SnapshotLoad, end: int) -> list[ChangeSplit]:
    edges: list[int | None] = [None, *load.bounds, None]
    return [
        ChangeSplit(i, end, None, KeyRange(load.position, load.key_column, edges[i], edges[i + 1]))
        for i in range(len(edges) - 1)
    ]


#: Rolls a split back from its snapshot's position to the load's: ``(load position, snapshot position, split)`` ->
#: the keys whose rows to drop (as the merge key's columns, typed), and the rows to put in their place.
RollBack = Callable[[int, int, KeyRange], tuple[pa.Table, pa.Table]]


def read_range(table: MySqlTable, part: KeyRange, schema: pa.Schema, roll_back: RollBack) -> Iterator[pa.RecordBatch]:
    """The rows of ``part`` as they stood at its position: read in a consistent snapshot of the split's own, then
    rolled back from that snapshot's position with ``roll_back``. The snapshot's position comes with every row; a
    range its snapshot finds empty takes another snapshot, on PyMySQL, that tells it (and reads the rows that range
    holds then, few when any)."""
    where = _range(table, part)
    columns = ", ".join(table.select_expression(f) for f in schema)
    sql = (
        f"SELECT CAST(@__tiering_file AS CHAR) AS {_FILE}, CAST(@__tiering_position AS UNSIGNED) AS {_POSITION}, "
        f"{columns} FROM {table.table_ref} WHERE {where}"
    )
    batches = table._execute_arrow(sql, schema, SNAPSHOT_SETUP)
    first = next(batches, None)
    if first is None or first.num_rows == 0:
        at, first = _empty_range(table, where, schema)
        batches = iter(())
    else:
        at = _position(table, first.column(_FILE)[0].as_py(), first.column(_POSITION)[0].as_py())
    if at < part.position:
        raise SourceError(f"{table.display_name}: a split's snapshot stands before the first load's position")
    gone, restored = roll_back(part.position, at, part) if at > part.position else (None, None)
    for batch in _chain(first, batches):
        rows = conform_batch(batch.select(schema.names), schema)
        if gone is not None and gone.num_rows and rows.num_rows:
            rows = rows.filter(pc.invert(_holds_keys(rows, gone)))
        if rows.num_rows:
            yield rows
    if restored is not None and restored.num_rows:
        yield from (conform_batch(b, schema) for b in restored.to_batches())


def _range(table: MySqlTable, part: KeyRange) -> str:
    bounds = []
    if part.key_column is not None and part.low is not None:
        bounds.append(f"{table.quote(part.key_column)} >= {int(part.low)}")
    if part.key_column is not None and part.high is not None:
        bounds.append(f"{table.quote(part.key_column)} < {int(part.high)}")
    return " AND ".join(bounds) or "1 = 1"


def _position(table: MySqlTable, file: object, position: object) -> int:
    if file is None or position is None:
        raise SourceError(
            f"{table.display_name}: the server told no binlog position of the first load's snapshot (MariaDB's "
            "binlog_snapshot_file and binlog_snapshot_position)"
        )
    return pack(file.decode() if isinstance(file, bytes) else str(file), int(str(position)))


def _empty_range(table: MySqlTable, where: str, schema: pa.Schema) -> tuple[int, pa.RecordBatch]:
    """A range a snapshot found empty: the position of a snapshot of its own, and the range's rows in it."""
    import pymysql

    conn = table._connect()
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            found = {str(name).lower(): value for name, value in cur.fetchall()}
            at = _position(table, found.get("binlog_snapshot_file"), found.get("binlog_snapshot_position"))
            select = ", ".join(table.select_expression(f) for f in schema)
            cur.execute(f"SELECT {select} FROM {table.table_ref} WHERE {where}")
            rows = rows_batch(list(cur.fetchall()), schema)
            cur.execute("COMMIT")
    except pymysql.MySQLError as exc:
        raise SourceError(f"{table.display_name}: reading the first load failed: {exc}") from exc
    finally:
        conn.close()
    return at, rows


def _holds_keys(rows: pa.RecordBatch, keys: pa.Table) -> pa.Array[Any]:
    """Which of ``rows`` have one of ``keys`` (the merge key's columns)."""
    names = keys.schema.names
    if len(names) == 1:
        column = rows.column(names[0])
        return pc.is_in(column, value_set=keys.column(0).cast(column.type))
    wanted = set(zip(*(keys.column(n).to_pylist() for n in names), strict=True))
    found = zip(*(rows.column(n).to_pylist() for n in names), strict=True)
    return pa.array([k in wanted for k in found], pa.bool_())


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
