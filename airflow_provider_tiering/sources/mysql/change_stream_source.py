"""A MariaDB (or MySQL) table tiered from the server's row binlog; the stream's machinery is the kernel's
(``sources/change_stream/``), this module the binlog's part of it.

The offsets are the binlog position the lake has applied (``{"binlog_file": "binlog.000042", "binlog_pos": 1234,
"gtid": "0-1-77"}``): every transaction whose group ends at or before it is in the lake. Each round reads the binlog
from there to where it ended when the round began (``binlog.py``), whole transactions only, and commits the end of
the last one it applied. The server keeps its binlog by its own rules, not for the lake (there is no slot): a round
that finds the lake's file purged fails the table loudly, asking for a new load; an idle table's rounds move its
position along now and then (``ChangePlan.advance``), so that purging files it no longer needs never fails it.

The first load reads the table as it stood at one binlog position, in splits that each take a consistent snapshot
of their own and roll it back to that position with the binlog (``first_load.py``). Changes are placed by the column
names their table maps carry (``binlog_row_metadata = FULL``), a name the lake knew by another (a declared rename)
mapped by the lake's former names; their values are decoded from the row images (``row_images.py``) and typed as the
cursor source reads them (``binlog_values.py``). Eviction's transactions write the table's row in a marker table
first (``streamed_table.py``): the stream skips them, the server's replicas apply them.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import replace
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import BinlogOffsets, Offsets, SafeEnd, binlog_offsets
from airflow_provider_tiering.core.ports import KeyedEvictionSource, SafeWatermark
from airflow_provider_tiering.core.shape import AddedValues, AddedValuesKind, HotIdentity
from airflow_provider_tiering.core.source_specs import MySqlCdcSourceSpec
from airflow_provider_tiering.sources.change_stream.messages import Message, Relation, Value
from airflow_provider_tiering.sources.change_stream.plans import ChangePlan, ChangeSplit
from airflow_provider_tiering.sources.change_stream.reduce import Key, RelationColumns, RowVersion, versions_before
from airflow_provider_tiering.sources.change_stream.source import ChangeStreamSource, closing_messages
from airflow_provider_tiering.sources.change_stream.typed_changes import with_change_columns
from airflow_provider_tiering.sources.mysql import first_load
from airflow_provider_tiering.sources.mysql.binlog import (
    EVICTION_ORIGIN,
    BinlogSettings,
    altering_statements,
    binlog_messages,
)
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, describe, log_bytes, pack, unpack
from airflow_provider_tiering.sources.mysql.binlog_server import BinlogEnd, BinlogServer
from airflow_provider_tiering.sources.mysql.binlog_statements import names_column
from airflow_provider_tiering.sources.mysql.binlog_values import as_stored, column_array, sql_literal
from airflow_provider_tiering.sources.mysql.streamed_table import MySqlStreamedTable

log = logging.getLogger(__name__)

#: Keys per query when changed rows are read again by key.
READ_AGAIN_BATCH = 1_000


class MySqlCdcSource(ChangeStreamSource):
    """A MariaDB or MySQL table read through its server's binlog (see the module's docstring)."""

    key_carried_by = "the binlog must carry whole rows (binlog_row_image = FULL)"

    def __init__(self, spec: MySqlCdcSourceSpec, connection: ConnectionInfo) -> None:
        table = MySqlStreamedTable(spec, connection)
        super().__init__(spec, connection, table, table.display_name)
        self.spec = spec
        self.table: MySqlStreamedTable = table
        self.settings = BinlogSettings(
            connection.host or "localhost", connection.port or 3306, connection.login, connection.password,
            spec.server_id, table.database, spec.table, spec.eviction_marker_table, self.display_name,
        )  # fmt: skip
        self.server = BinlogServer(self.display_name, table.database, spec.table, spec.server_id)
        #: How the server names its binlog files, and where the binlog ended and which files it held when last read.
        self._files: BinlogFiles | None = None
        self._end: BinlogEnd | None = None
        #: The lake's position as this round knows it (for the status).
        self._lake_at: int | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._end, self._lake_at = None, None

    # -- positions: a binlog file and offset -----------------------------------------------------------------
    def _position(self, offsets: SafeEnd) -> int:
        found = binlog_offsets(offsets)
        self._files = self._files or BinlogFiles.of(found["binlog_file"])
        return pack(found["binlog_file"], int(found["binlog_pos"]))

    def _offsets(self, position: int) -> Offsets:
        number, offset = unpack(position)
        file = self._names().name(number)
        with closing(self.table._connect()) as conn:
            gtid = self.server.gtid_at(conn, file, offset)
        found: BinlogOffsets = {"binlog_file": file, "binlog_pos": offset, "gtid": gtid}
        return found

    def _names(self) -> BinlogFiles:
        if self._files is None:
            raise SourceError(f"{self.display_name}: the binlog's file names are not known yet")
        return self._files

    def describe_position(self, position: int) -> str:
        return f"binlog {describe(position, self._files)}"

    def _log_bytes(self, start: int, end: int) -> int:
        return log_bytes(start, end, self._end.sizes if self._end is not None else {})

    # -- the binlog ------------------------------------------------------------------------------------------
    def _log_session(self) -> AbstractContextManager[Any]:
        return closing(self.table._connect())

    def _messages(
        self, session: Any, start: int, end: int | None, budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        # A round needs an update's or a delete's old key only (the binlog carries its whole old row).
        return closing_messages(binlog_messages(self.settings, start, end, self._names(), old_key=self.merge_key))

    def _read_end(self, session: Any) -> BinlogEnd:
        self._end = self.server.end(session)
        self._files = self._end.files
        return self._end

    def _log_end(self, session: Any) -> int:
        return self._read_end(session).position

    def _stream_position(self, session: Any, committed: Offsets) -> int:
        position = self._position(committed)
        end = self._read_end(session)
        self.server.held_from(end, position, describe(position, end.files))
        self._lake_at = position
        return position

    def _skipped_origins(self) -> frozenset[str]:
        return frozenset({EVICTION_ORIGIN})

    # -- the table's identity: rebuilt without a change each ---------------------------------------------------
    def identity(self) -> HotIdentity:
        """The table's identity (``table.py``), with the binlog's end as its horizon: what the next rounds compare a
        change of storage against. The server and the user are checked first (its settings, privileges), on every
        round and every due table's probe."""
        with closing(self.table._connect()) as conn:
            self.server.check(conn, self.table.table_ref)  # first: a table the user may not see is no other table
            end = self.server.end(conn)
        return replace(self.table.identity(), horizon=describe(end.position, end.files))

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        """What the rows the lake holds hold in a column added since: MariaDB's ADD COLUMN gives every row it finds
        the column's default (instantly, or by a rebuild), so a constant default is their value, and the rows changed
        later come with the stream. Where that cannot be relied on (the table was rebuilt since, its default is an
        expression, a NOT NULL column has none, or another ALTER since names the column: a changed default), every
        row is looked at instead (``table.py``)."""
        default, nullable = self.table.column_default(column)
        constant = default is None or default == "NULL" or default[:1] in ("'", "-") or default[:1].isdigit()
        if rewritten or not constant or (default is None and not nullable) or tiered is None:
            return self.table.added_column_values(column, None, rewritten)
        with closing(self.table._connect()) as conn:
            self._stream_position(conn, tiered)
        statements = altering_statements(self.settings, self._position(tiered), self._names())
        if sum(names_column(statement, column) for statement in statements) != 1:
            return self.table.added_column_values(column, None, rewritten)
        if default is None or default == "NULL":
            return AddedValues(AddedValuesKind.NULL, how="added without a default")
        value = self.table.default_value(column)
        return AddedValues(AddedValuesKind.CONSTANT, value, how=f"added with the constant default {default}")

    def _key_value(self, value: object, kind: pa.DataType) -> Hashable:
        return as_stored(value, kind)

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None:
        """A table whose storage changed (a rebuild: OPTIMIZE, a type changed by ALTER TABLE) may hold values the
        binlog carries no change of (a narrower VARCHAR or DATETIME cuts its values): MariaDB keeps no write time per
        row to tell, so the rows are taken for rewritten, compared with the lake's, and those that differ read again
        by key with the round's changes."""
        return True

    def _current_rows(self, keys: list[Key], schema: pa.Schema) -> tuple[pa.RecordBatch, set[Key]]:
        """The table's current rows of ``keys`` (as the binlog decodes them), read as a bulk read reads them, and the
        keys it no longer has. Read now, they may be newer than the round's end: the next round applies the changes
        after it again, each a whole row or a delete, so the lake converges on the table."""
        key = self.merge_key
        fields = [schema.field(c) for c in key]
        batches: list[pa.RecordBatch] = []
        select = ", ".join(self.table.select_expression(f) for f in schema)
        columns = ", ".join(self.table.quote(c) for c in key)
        for begin in range(0, len(keys), READ_AGAIN_BATCH):
            chunk = keys[begin : begin + READ_AGAIN_BATCH]
            wanted = ", ".join(
                "(" + ", ".join(sql_literal(v, f.type) for v, f in zip(row_key, fields, strict=True)) + ")"
                for row_key in chunk
            )
            sql = f"SELECT {select} FROM {self.table.table_ref} WHERE ({columns}) IN ({wanted})"
            batches.extend(self.table.conformed(self.table._execute_arrow(sql, schema), schema))
        found = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        held = {
            tuple(as_stored(v, f.type) for v, f in zip(values, fields, strict=True))
            for values in zip(*(found.column(c).to_pylist() for c in key), strict=True)
        }
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        rows = found.cast(nullable).combine_chunks().to_batches()
        log.info("%s: %d changed rows read again by key (%d gone)", self.display_name, len(keys), len(keys) - len(held))
        return (rows[0] if rows else pa.RecordBatch.from_pylist([], schema=nullable)), set(keys) - held

    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """Every transaction in the binlog is committed: the round may read up to where it ends now. The table's key
        is checked first (the server and the user were with its identity), and the lake's position must still be on
        the server."""
        self.server.check_key(self.table.table_ref, self.merge_key, self.table.unique_keys())
        with closing(self.table._connect()) as conn:
            end = self._read_end(conn)
            if committed is not None and self._stream_position(conn, committed) >= end.position:
                return SafeWatermark(end=committed, observed=committed)
        number, offset = unpack(end.position)
        found: BinlogOffsets = {"binlog_file": end.files.name(number), "binlog_pos": offset}
        return SafeWatermark(end=found, observed=found)

    def _placement(self) -> Callable[[Relation], RelationColumns]:
        """By name: a table map names the columns as they were when the change was made; a name the table no longer
        has is one the lake knew by it (a declared rename), else a column dropped since (its values no longer count)
        or one the stream cannot place (refused)."""
        current: set[str] = set()

        def names(relation: Relation) -> RelationColumns:
            if not current:
                current.update(self.table.identity().types)
            return RelationColumns(self._current_names(relation, current))

        return names

    def typed(self, rows: dict[Key, RowVersion | None], schema: pa.Schema, chunk: int) -> Iterator[pa.RecordBatch]:
        again = [k for k, v in rows.items() if v is not None and v.read_again]
        if again:
            found, gone = self._current_rows(again, schema)
            yield with_change_columns(found, None, None, chunk)
            rows = {k: None if k in gone else v for k, v in rows.items() if k in gone or not (v and v.read_again)}
        if not rows:
            return
        versions = [None if version is None else version.values for version in rows.values()]
        deleted = [values is None for values in versions]
        columns = self._columns(list(rows), versions, schema)
        arrays = [
            column_array(column, field, self.table.data_type(field.name), self.display_name)
            for column, field in zip(columns, schema, strict=True)
        ]
        nullable = pa.schema([f.with_nullable(True) for f in schema])
        yield with_change_columns(pa.RecordBatch.from_arrays(arrays, schema=nullable), deleted, None, chunk)

    def _columns(
        self, keys: list[Key], versions: list[dict[str, Value] | None], schema: pa.Schema
    ) -> list[Sequence[object]]:
        """The values of each of ``schema``'s columns, a key's row after another: a deleted key's (None) holds its key
        only, a column added since a change was made holds its default."""
        names = schema.names
        at = {column: number for number, column in enumerate(self.merge_key)}
        if len(names) > 1:
            # Every row at once, taken by one C call each and turned into columns by zip: a loop per value was a
            # third of typing. A row without a column (added since) raises KeyError: then a column at a time.
            take = operator.itemgetter(*names)
            places = [(at[name], number) for number, name in enumerate(names) if name in at]
            try:
                return list(
                    zip(*(take(values) if values is not None else _key_row(key, places, len(names))
                          for key, values in zip(keys, versions, strict=True)))
                )  # fmt: skip
            except KeyError:
                pass
        columns: list[Sequence[object]] = []
        for field in schema:
            name = field.name
            if name in at:
                number = at[name]
                columns.append([key[number] for key in keys])
            else:
                default = as_stored(self._history.defaults.get(name), field.type)
                columns.append([None if values is None else values.get(name, default) for values in versions])
        return columns

    # -- the first load --------------------------------------------------------------------------------------
    def _plan_first_load(self) -> ChangePlan:
        """A consistent snapshot's binlog position, where the load stands and the stream starts; the table's
        estimated rows (what its splits are cut by)."""
        self.server.check_key(self.table.table_ref, self.merge_key, self.table.unique_keys())
        with closing(self.table._connect()) as conn:
            with conn.cursor() as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                file, offset = self.server.snapshot_position(conn)
                cur.execute("COMMIT")
                cur.execute(
                    "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (self.table.database, self.spec.table),
                )
                found = cur.fetchone()
            self._read_end(conn)
        estimate = int(found[0] or 0) if found else 0
        position = pack(file, offset)
        return ChangePlan(position, None, max(estimate, 1), load=first_load.SnapshotLoad(position))

    def _cut_first_load(self, plan: ChangePlan, target_rows_per_split: int, parallelism: int) -> list[ChangeSplit]:
        load = plan.load
        if not isinstance(load, first_load.SnapshotLoad):
            raise SourceError(f"{self.display_name}: a first load without its snapshot")
        # With a server id of its own, one reader at a time: two with one id would disconnect each other.
        count = 1 if self.spec.server_id else first_load.split_count(plan.changes, target_rows_per_split, parallelism)
        column, bounds = first_load.key_bounds(self.table, self.merge_key, plan.changes, count)
        return first_load.cut(first_load.SnapshotLoad(load.position, column, bounds), plan.end)

    def _read_first_load(self, split: ChangeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        part = split.load
        if not isinstance(part, first_load.KeyRange):
            raise SourceError(f"{self.display_name}: a split of the first load without its key range")
        for batch in first_load.read_range(self.table, part, schema, self._rolled_back(schema)):
            yield with_change_columns(batch, deleted=None, fill=None)

    def _first_load_keys(self, plan: ChangePlan, splits: Sequence[ChangeSplit]) -> pa.Table:
        load = plan.load
        if not isinstance(load, first_load.SnapshotLoad):
            raise SourceError(f"{self.display_name}: a first load without its snapshot")
        schema = self.schema()
        key_schema = pa.schema([schema.field(c) for c in self.merge_key])
        part = first_load.KeyRange(load.position)
        batches = list(first_load.read_range(self.table, part, key_schema, self._rolled_back(key_schema)))
        return pa.Table.from_batches(batches, schema=key_schema)

    def _rolled_back(self, schema: pa.Schema) -> first_load.RollBack:
        """How a split's rows are rolled back from its snapshot's position to the load's: each key its range holds
        that the binlog changed in between, and the versions it had before (``reduce.versions_before``)."""

        def roll_back(start: int, snapshot: int, part: first_load.KeyRange) -> tuple[pa.Table, pa.Table]:
            key = self.merge_key
            with closing_messages(binlog_messages(self.settings, start, snapshot, self._names())) as messages:
                before = versions_before(messages, self._window(start, snapshot))
            ranged = part.key_column
            inside = {k: v for k, v in before.items() if ranged is None or part.holds(k[key.index(ranged)])}
            log.info(
                "%s: a split's snapshot stood at %s, past the load's %s: %d of its keys rolled back",
                self.display_name, self.describe_position(snapshot), self.describe_position(start), len(inside),
            )  # fmt: skip
            key_schema = pa.schema([schema.field(c).with_nullable(True) for c in key])
            gone = [b.select(key_schema.names) for b in self.typed(dict.fromkeys(inside), schema, 0)]
            present = {k: RowVersion(v) for k, v in inside.items() if v is not None}
            rows = [b.select(schema.names) for b in self.typed(dict(present), schema, 0)]
            return (
                pa.Table.from_batches(gone, schema=key_schema) if gone else key_schema.empty_table(),
                pa.Table.from_batches(rows) if rows else schema.empty_table(),
            )

        return roll_back

    # -- status, eviction ------------------------------------------------------------------------------------
    def stream_status(self) -> JsonObject:
        """The lake's binlog position, and the binlog it still needs (from there to the end, on the server), its
        backlog (what a capped round left), and how long the server keeps its files."""
        found: JsonObject = {"server_id": self.spec.server_id}
        end, lake = self._end, self._lake_at
        if end is not None:
            number, offset = unpack(end.position)
            oldest = min(end.sizes, default=None)
            found.update(
                binlog_end=f"{end.files.name(number)}:{offset}",
                oldest_binlog_file=None if oldest is None else end.files.name(oldest),
                binlog_files=len(end.sizes),
            )
            try:
                with closing(self.table._connect()) as conn:
                    found.update(self.server.expiry(conn))
            except SourceError as exc:
                log.warning("%s: reading the binlog's expiry failed: %s", self.display_name, exc)
        if lake is not None:
            found["position"] = describe(lake, end.files if end is not None else self._files)
            if end is not None:
                found["log_needed_bytes"] = log_bytes(lake, end.position, end.sizes)
        if self._backlog_bytes is not None:
            found["log_backlog_bytes"] = self._backlog_bytes
        return found

    def after_commit(self, committed: Offsets) -> int:
        self._lake_at = self._position(committed)  # the server keeps its binlog by its own rules: nothing to move
        return 0

    def keyed_evictor(self) -> KeyedEvictionSource:
        return self

    @contextmanager
    def evicting(self) -> Iterator[None]:
        self.table.ensure_marker_table()
        with self.table.evicting():
            yield


def _key_row(key: Key, places: list[tuple[int, int]], width: int) -> tuple[object, ...]:
    """A deleted key's row: its key's values in their columns, None in the others."""
    row: list[object] = [None] * width
    for in_key, in_row in places:
        row[in_row] = key[in_key]
    return tuple(row)
