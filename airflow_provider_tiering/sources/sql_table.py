"""A table of a SQL database as the package reads it, without a cursor: connections, quoting and bound values, the
tiered columns, the table's identity and shape checks, a consistent read of every row, and the deletes eviction
makes. The cursor-read source (``sql.py``) and the table behind a change stream (``postgres/streamed_table.py``,
``mysql/streamed_table.py``) build on it; a dialect (``postgres/table.py``, ``sqlite.py``, ``mysql/table.py``)
supplies its connections, placeholders, type mapping, row ids and consistent read. Identifiers are validated by the
spec and quoted here; values are bound as parameters.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self

from airflow_provider_tiering.core.errors import ShapeChangedDuringRound, SourceError, UnsupportedColumnType
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.shape import AddedValues, AddedValuesKind, HotIdentity
from airflow_provider_tiering.sources.held_connection import HeldConnection

if TYPE_CHECKING:  # pyarrow is imported where used: probing for new rows needs none of it
    import pyarrow as pa

#: A query's rows, or a statement's placeholders' values.
Rows = list[tuple[Any, ...]]
#: Runs a query (with bound parameters) in an open transaction, as Arrow batches of the given schema.
RunInTransaction = Callable[[str, Sequence[Any], "pa.Schema"], Iterator["pa.RecordBatch"]]


def quote_identifier(name: str, quote: str = '"') -> str:
    """Quote an SQL identifier (names are also validated by the spec; quoting is the second guard)."""
    if "\x00" in name:
        raise SourceError("identifier contains a NUL character")
    return quote + name.replace(quote, quote * 2) + quote


def quote_string(value: str) -> str:
    """An SQL string literal, for the few places a value cannot be bound (a split's cursor bounds, a snapshot id)."""
    if "\x00" in value:
        raise SourceError("literal contains a NUL character")
    return "'" + value.replace("'", "''") + "'"


@dataclass
class Bindings:
    """The values bound to one statement's placeholders, in order; ``bind(value)`` returns the placeholder."""

    placeholder: Callable[[int], str]
    cast_cursor: Callable[[str], str] = str
    values: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        self.values.append(value)
        return self.placeholder(len(self.values))

    def bind_cursor(self, value: Any) -> str:
        """A cursor value, cast to the cursor column's type where the dialect needs it."""
        return self.cast_cursor(self.bind(value))


def first_value(batches: Sequence[pa.RecordBatch], field: pa.Field[Any]) -> Any:
    """The first value of ``field`` among ``batches``, as the lake types it (None: no row)."""
    import pyarrow as pa

    from airflow_provider_tiering.sources.conform import conform_batch

    target = pa.schema([field])
    for batch in batches:
        if batch.num_rows:
            return conform_batch(batch, target).column(0)[0].as_py()
    return None


class TableNaming(Protocol):
    """What a SQL table reader needs of its spec: which table, and which of its columns are tiered (None: all)."""

    @property
    def table(self) -> str: ...
    @property
    def db_schema(self) -> str | None: ...
    @property
    def columns(self) -> tuple[str, ...] | None: ...


class SqlTable(ABC):
    """A table of a SQL database, read without a cursor (see the module's description)."""

    #: Human-readable name for messages (never contains credentials).
    display_name: str

    def __init__(self, spec: TableNaming) -> None:
        self.spec = spec
        self._schema: pa.Schema | None = None
        self._evict_conn: Any = None
        #: The table's identity as the round first read it (``check_shape_unchanged`` compares its column ids).
        self._round_identity: HotIdentity | None = None
        #: The connection ``connected()`` keeps (opened by the first query in it).
        self._connections = HeldConnection()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # The round's connections stay in the round's process (not pickled to Spark).
        state.update(_evict_conn=None, _connections=HeldConnection())
        return state

    def for_round(self) -> Self:
        """This table for one round (``Source.for_round``): a copy without this object's connections, in which what
        a round reads once and keeps (the columns, the identity) starts empty."""
        session = copy.copy(self)  # copy's protocol goes through ``__getstate__``: the connections it drops stay behind
        session._begin_round()
        return session

    def _begin_round(self) -> None:
        """Called on a round's fresh copy (:meth:`for_round`): reset what a round reads once and keeps."""
        self._schema = self._round_identity = None

    # -- connections -----------------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any:
        """A new autocommit connection to the hot store (DB-API); SourceError when it cannot connect."""

    def connected(self) -> AbstractContextManager[None]:
        """Keep one connection for the small queries made inside (see ``Source.connected``): a round on PostgreSQL
        otherwise opens about nine, and each costs a server process and authentication."""
        return self._connections.held()

    def _query_connection(self) -> AbstractContextManager[Any]:
        """A connection for one small query: inside ``connected()`` the kept one, else one of its own, closed after."""
        return self._connections.connection(self._connect)

    # -- dialect hooks -------------------------------------------------------------------------
    @abstractmethod
    def _placeholder(self, position: int) -> str:
        """The placeholder of the ``position``-th (1-based) bound value."""

    @abstractmethod
    def _load_schema(self) -> pa.Schema:
        """Arrow schema of the table's columns to read (``_columns_to_read``), in table order; SourceError if the
        table is missing."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Run a small query with bound ``params`` and return all its rows."""

    @abstractmethod
    def _execute_arrow(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Stream the result of a query (without parameters) as Arrow batches."""

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[RunInTransaction]:
        """A read-only transaction whose snapshot of the database is fixed on entry; yields a function that runs
        a query (with bound parameters) in it as Arrow batches."""

    def _columns_to_read(self) -> tuple[str, ...] | None:
        """The columns ``_load_schema`` reads (None: every column): the tiered ones."""
        return self.spec.columns

    # -- shared --------------------------------------------------------------------------------
    def bindings(self) -> Bindings:
        return Bindings(self._placeholder)

    @property
    def table_ref(self) -> str:
        table = quote_identifier(self.spec.table)
        return f"{quote_identifier(self.spec.db_schema)}.{table}" if self.spec.db_schema else table

    def quote(self, name: str) -> str:
        return quote_identifier(name)

    def schema(self) -> pa.Schema:
        """The tiered columns, in the spec's order (every column, in table order, when it names none)."""
        if self._schema is None:
            import pyarrow as pa

            full = self._load_schema()
            wanted = self.spec.columns or tuple(full.names)
            missing = [c for c in (*wanted, *self._required_columns()) if c not in full.names]
            if missing:
                raise SourceError(f"{self.display_name}: column(s) {', '.join(missing)} not found")
            self._check_columns(full)
            self._schema = pa.schema([full.field(c) for c in wanted])
        return self._schema

    def _required_columns(self) -> tuple[str, ...]:
        """Columns the table must have beside the tiered ones."""
        return ()

    def _check_columns(self, full: pa.Schema) -> None:
        """Raise SourceError if a column cannot serve as it must (a cursor's type)."""
        return None

    def select_expression(self, field: pa.Field[Any]) -> str:
        """How a column is selected for reading; dialects may cast to a cheaper wire type."""
        return self.quote(field.name)

    def conformed(self, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Batches conformed to exactly ``schema`` (``sources/conform.py``); an unsupported value's error names the
        table."""
        from airflow_provider_tiering.sources.conform import conform_batch

        for batch in batches:
            try:
                conformed = conform_batch(batch, schema)
            except UnsupportedColumnType as exc:
                raise UnsupportedColumnType(f"{self.display_name}: {exc}") from exc
            yield conformed

    def _rows_upto(self, tiered: Offsets | None, bindings: Bindings) -> str:
        """A predicate of the rows at or below ``tiered``: every row for None, the only offsets a table read
        without a cursor is asked about."""
        if tiered is not None:
            raise SourceError(f"{self.display_name}: rows are told apart by a cursor only")
        return "1 = 1"

    # -- the hot table's shape (``core/follow_shape.py``) ------------------------------------------
    def identity(self) -> HotIdentity:
        found = self._read_identity()
        if self._round_identity is None:  # what check_shape_unchanged compares with
            self._round_identity = found
        return found

    def _read_identity(self) -> HotIdentity:
        """The dialect's identity of the table and its columns (none by default)."""
        return HotIdentity()

    def _as_text(self, expression: str) -> str:
        """A value of any type as text, to tell whether rows hold one same value (the dialect's cast)."""
        return f"CAST({expression} AS TEXT)"

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        """What the rows at or below ``tiered`` (None: every row) hold in ``column`` now: one scan of them, counting
        its values and comparing the smallest and greatest as text; a value every row shares is read as the lake
        types it."""
        bindings = self.bindings()
        predicate = self._rows_upto(tiered, bindings)
        ref = self.quote(column)
        ((rows, values, low, high),) = self._query(
            f"SELECT count(*), count({ref}), min({self._as_text(ref)}), max({self._as_text(ref)}) "
            f"FROM {self.table_ref} WHERE {predicate}",
            bindings.values,
        )
        if not values:
            return AddedValues(AddedValuesKind.NULL, how=f"it is NULL in the {rows} tiered rows")
        if values < rows or low != high:
            return AddedValues(
                AddedValuesKind.PER_ROW,
                how=f"{values} of the {rows} tiered rows hold a value, from {low!r} to {high!r}",
            )
        import pyarrow as pa

        field = self.schema().field(column)
        one = f"SELECT {self.select_expression(field)} FROM {self.table_ref} WHERE {predicate} AND {ref} IS NOT NULL"
        with self._snapshot() as run:
            batches = list(run(f"{one} LIMIT 1", bindings.values, pa.schema([field])))
        value = first_value(batches, field)
        return AddedValues(AddedValuesKind.CONSTANT, value, how=f"every one of the {rows} tiered rows holds {low!r}")

    def check_shape_unchanged(self) -> None:
        """Read the hot table's columns again and compare them with those the round read."""
        if self._schema is None:
            return
        before = self._schema
        self._schema = None
        with self.connected():
            try:
                now = self.schema()
            finally:
                self._schema = before
            planned = self._round_identity
            changed = not now.equals(before) or (
                planned is not None and self._read_identity().columns != planned.columns
            )
        if changed:
            raise ShapeChangedDuringRound(
                f"{self.display_name}: its columns changed while the round read it (an ALTER TABLE committed "
                "meanwhile): what was read may lack a column's values, so nothing was committed; the next round "
                "follows the new columns"
            )

    # -- eviction's deletes ----------------------------------------------------------------------------
    @abstractmethod
    def _age_before(self, column: str, field: pa.Field[Any], cutoff: datetime, bindings: Bindings) -> str:
        """SQL predicate: the (quoted) date/time ``column`` is before ``cutoff`` (an aware UTC datetime)."""

    @abstractmethod
    def _row_id_sql(self) -> str:
        """The select expression of a row's id, named ``__row_id``: what the delete of an evicted batch matches."""

    def _eviction_connection(self) -> Any | None:
        """A connection kept open for every batch of one eviction (a connection costs ~0.1 s); None: a dialect that
        opens its own for each batch."""
        return None

    @contextmanager
    def evicting(self) -> Iterator[None]:
        self._evict_conn = self._eviction_connection()
        try:
            yield
        finally:
            conn, self._evict_conn = self._evict_conn, None
            if conn is not None:
                conn.close()

    def _age_field(self, name: str) -> pa.Field[Any]:
        import pyarrow as pa

        schema = self.schema()
        if name not in schema.names:
            raise SourceError(f"{self.display_name}: eviction age column {name!r} is not a tiered column")
        field = schema.field(name)
        if not (pa.types.is_timestamp(field.type) or pa.types.is_date(field.type)):
            raise SourceError(
                f"{self.display_name}: eviction needs a date or timestamp age column; {name!r} is {field.type} "
                "(set eviction.age_column)"
            )
        return field

    # -- a consistent read (read across tiers) ------------------------------------------------------
    def _rows_after(self, offsets: Offsets | None, bindings: Bindings) -> str:
        """A predicate of the rows beyond ``offsets``: every row for None, the only offsets a table read without a
        cursor is asked about."""
        if offsets is not None:
            raise SourceError(f"{self.display_name}: rows are told apart by a cursor only")
        return "1 = 1"

    @contextmanager
    def rows_after_reader(self) -> Iterator[Callable[[Offsets | None], pa.Table]]:
        """Fix a snapshot of the hot table now; inside the block, ``read(offsets)`` returns its rows beyond
        ``offsets`` as of that moment, whatever is inserted or deleted meanwhile (``None``: every row)."""
        import pyarrow as pa

        schema = self.schema()
        columns = ", ".join(self.select_expression(field) for field in schema)
        with self._snapshot() as run:

            def read(offsets: Offsets | None) -> pa.Table:
                bindings = self.bindings()
                sql = f"SELECT {columns} FROM {self.table_ref} WHERE {self._rows_after(offsets, bindings)}"
                batches = list(self.conformed(run(sql, bindings.values, schema), schema))
                return pa.Table.from_batches(batches, schema=schema)

            yield read
