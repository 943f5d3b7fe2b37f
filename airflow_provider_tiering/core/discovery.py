"""Which tables of a declared database are tiered, and how: the hot store's listing of its tables (one query per
connection, ``sources/*/table_listing.py``) matched against the declaration's rules (``core/database_spec.py``).

A table the rules cannot tier (no key or cursor it can use, a spec that does not validate) is listed with the reason,
never silently left out. Airflow-free: the Airflow layer only hands the result to the tables' tasks.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_provider_tiering.core.database_spec import DatabaseSpec, TableMode, TableOverride
from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec import TableSpec


class ColumnKind(enum.StrEnum):
    """What a column can serve as: a cursor orders rows (an integer, a date or a timestamp); other columns cannot."""

    INTEGER = "integer"
    TEMPORAL = "temporal"
    OTHER = "other"


@dataclass(frozen=True)
class HotColumn:
    name: str
    kind: ColumnKind
    not_null: bool


@dataclass(frozen=True)
class HotTable:
    """One table as the hot store lists it, with its fingerprint: a value that changes whenever anything in the table
    may have changed (rows, identity, shape); None when the store cannot tell (every probe then says "maybe")."""

    schema: str | None
    table: str
    columns: tuple[HotColumn, ...]
    primary_key: tuple[str, ...] = ()
    fingerprint: str | None = None
    #: Why the connection cannot read the table (None: it can): it is listed as skipped with this reason.
    unreadable: str | None = None

    @property
    def qualified(self) -> str:
        """The table's name in the declaration and in Airflow: ``schema.table``, or ``table`` without a schema."""
        return self.table if self.schema is None else f"{self.schema}.{self.table}"

    def column(self, name: str) -> HotColumn | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class Listing:
    """A database's tables in one look, and why the look cannot tell idle tables apart (None: it can)."""

    tables: tuple[HotTable, ...]
    #: Why every table is "maybe" in this look (statistics off, a standby, a store without counters).
    blind: str | None = None
    #: How long the look's query took.
    seconds: float = 0.0
    #: The source kind of the database's change stream (``postgres_cdc``); None: it has none the product reads.
    stream_kind: str | None = None


class TableLister(Protocol):
    """Lists a declared database's tables (``sources/registry.py`` finds the implementation of a connection's type).

    ``list_tables`` runs one query (SQLite, which has no server, may run one per table) and raises the driver's error
    when the database cannot be read: the database's discovery task fails with it, its tables' state untouched."""

    def list_tables(self, schemas: Sequence[str] | None) -> Listing: ...


@dataclass(frozen=True)
class Discovered:
    """The outcome of matching a listing against a declaration."""

    #: Each table to tier: its validated spec, by its name.
    specs: dict[str, TableSpec] = field(default_factory=dict)
    #: Each table listed but not tiered, with the reason, by its name.
    skipped: dict[str, str] = field(default_factory=dict)
    #: The listing's fingerprints, by table name (tiered and skipped).
    fingerprints: dict[str, str | None] = field(default_factory=dict)


def _matches(globs: Sequence[str], table: HotTable) -> str | None:
    names = (table.table, table.qualified)
    return next((g for g in globs if any(fnmatch.fnmatchcase(n, g) for n in names)), None)


def _override(spec: DatabaseSpec, table: HotTable) -> TableOverride:
    return spec.tables.get(table.qualified) or spec.tables.get(table.table) or TableOverride()


def _lake_table(spec: DatabaseSpec, table: HotTable, several_schemas: bool) -> str:
    base = f"{table.schema}_{table.table}" if several_schemas and table.schema else table.table
    return f"{spec.lake.table_prefix}{base}"


class _Skip(Exception):
    """A table the rules cannot tier, and why."""


def _cursor(table: HotTable, named: str | None, candidates: Sequence[str], what: str, override_at: str) -> str | None:
    """The table's cursor column: the one named (which must order rows) or the first candidate it has."""
    if named is not None:
        column = table.column(named)
        if column is None:
            raise _Skip(f"{override_at}.cursor_column {named!r} is not a column of the table")
        if column.kind is ColumnKind.OTHER:
            raise _Skip(f"{override_at}.cursor_column {named!r} is neither an integer, a date nor a timestamp")
        return named
    for name in candidates:
        column = table.column(name)
        if column is not None and column.kind is not ColumnKind.OTHER:
            return name
    return None


def _source_and_merge(
    spec: DatabaseSpec, table: HotTable, override: TableOverride, stream_kind: str | None
) -> dict[str, Any]:
    """The table's source and merge fields by the rules (:class:`_Skip` with the reason when none applies)."""
    at = f"tables.{table.qualified}"
    mode = override.mode or spec.mode
    key = override.primary_key or table.primary_key
    source: dict[str, Any] = {"conn_id": spec.conn_id, "table": table.table}
    if table.schema is not None:
        source["db_schema"] = table.schema
    if mode is TableMode.CHANGE_STREAM:
        if not table.primary_key:  # the replica identity: a stream's updates and deletes name their row by it
            raise _Skip(f"a change stream needs a primary key and the table has none: add one, or set {at}.mode")
        if override.primary_key is not None or override.cursor_column is not None:
            raise _Skip(f"{at}: a change stream's key is the table's primary key and it has no cursor")
        if stream_kind is None:
            raise _Skip("this database has no change stream the product reads: set its mode to append or merge")
        group = spec.stream_group().model_dump(mode="json")
        return {"source": {**source, "kind": stream_kind, "stream": group}}
    if mode in (TableMode.AUTO, TableMode.MERGE):
        cursor = _cursor(table, override.cursor_column, spec.merge.cursor_columns, "merge", at)
        if cursor is not None and key and cursor not in key:
            merge: dict[str, Any] = {"primary_key": list(key)}
            soft = spec.merge.soft_delete_column
            if soft is not None and table.column(soft) is not None:
                merge["soft_delete_column"] = soft
            if spec.merge.reconcile_keys_every_seconds is not None:
                merge["reconcile_keys_every_seconds"] = spec.merge.reconcile_keys_every_seconds
            return {"source": {**source, "cursor_column": cursor}, "merge": merge}
        if mode is TableMode.MERGE:
            if not key:
                raise _Skip(f"merge needs a primary key and the table has none: declare {at}.primary_key")
            raise _Skip(
                f"merge needs a cursor column every change advances: the table has none of "
                f"{', '.join(spec.merge.cursor_columns)}; name it in {at}.cursor_column"
            )
    cursor = _cursor(table, override.cursor_column, spec.append.cursor_columns, "append", at)
    if cursor is None:
        wanted = ", ".join(dict.fromkeys([*spec.merge.cursor_columns, *spec.append.cursor_columns]))
        if mode is TableMode.APPEND:
            wanted = ", ".join(spec.append.cursor_columns)
        raise _Skip(
            f"no cursor column: the table has none of {wanted} (an integer, date or timestamp); name its mode and "
            f"cursor_column in {at}, or exclude it"
        )
    return {"source": {**source, "cursor_column": cursor}}


def _table_spec(
    spec: DatabaseSpec, table: HotTable, override: TableOverride, several_schemas: bool, stream_kind: str | None
) -> TableSpec:
    fields: dict[str, Any] = {**dict(spec.table_defaults), **dict(override.spec)}
    fields.update(_source_and_merge(spec, table, override, stream_kind))
    fields["name"] = table.qualified
    fields["lake"] = {
        **dict(fields.get("lake") or {}),
        "catalog_conn_id": spec.lake.catalog_conn_id,
        "namespace": spec.lake.namespace,
        "table": override.lake_table or _lake_table(spec, table, several_schemas),
    }
    try:
        return TableSpec.parse(fields)
    except InvalidTableSpec as exc:
        raise _Skip(f"its spec is not valid: {exc}") from exc


def discover(spec: DatabaseSpec, listing: Listing) -> Discovered:
    """Match the listed tables against the declaration: each table to tier with its spec, each table left out with
    the reason (an excluded table, a table the rules cannot tier). Tables no include glob matches are not listed."""
    several_schemas = len({t.schema for t in listing.tables}) > 1 or len(spec.schemas or ()) > 1
    found = Discovered()
    lake_tables: dict[str, str] = {}
    for table in sorted(listing.tables, key=lambda t: t.qualified):
        if _matches(spec.include, table) is None:
            continue
        name = table.qualified
        found.fingerprints[name] = table.fingerprint
        excluded = _matches(spec.exclude, table)
        override = _override(spec, table)
        if excluded is not None:
            found.skipped[name] = f"excluded by the glob {excluded!r}"
            continue
        if override.skip:
            found.skipped[name] = f"tables.{name}.skip is set"
            continue
        if table.unreadable is not None:
            found.skipped[name] = f"{table.unreadable}: grant it (GRANT SELECT ON {name} TO ...) or exclude the table"
            continue
        try:
            table_spec = _table_spec(spec, table, override, several_schemas, listing.stream_kind)
        except _Skip as exc:
            found.skipped[name] = str(exc)
            continue
        other = lake_tables.setdefault(table_spec.lake.table, name)
        if other != name:
            found.skipped[name] = (
                f"its lake table {spec.lake.namespace}.{table_spec.lake.table} is already table {other!r}'s: set "
                f"tables.{name}.lake_table"
            )
            continue
        found.specs[name] = table_spec
    return found
