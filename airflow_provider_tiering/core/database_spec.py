"""A whole hot database declared once: which of its tables are tiered, how, and where to.

The declaration names a connection, schemas, include and exclude globs, the rules that pick each table's mode and
cursor, defaults for every table's spec and overrides per table. It is validated where it is built (when the DAG file
is parsed, with the field named) and never reads the hot store: its tables are found when a DAG runs
(``core/discovery.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.spec_types import Identifier, StrictModel, check_column_list, dotted, validated
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec

#: Fields of a table's spec that the database declaration sets itself, never its defaults or overrides.
_DERIVED_FIELDS = frozenset({"name", "source", "merge"})
#: Fields of a table's ``lake`` the declaration sets (the rest, such as ``partition_by``, may be given).
_DERIVED_LAKE_FIELDS = frozenset({"catalog_conn_id", "namespace", "table"})


class TableMode(enum.StrEnum):
    """How a discovered table is tiered."""

    #: Merge by key when the table has a primary key and a merge cursor column; else append when it has an append
    #: cursor column; else the table is skipped, with the reason.
    AUTO = "auto"
    APPEND = "append"
    MERGE = "merge"
    #: Every insert, update and delete from the database's one change stream (a stream group named after the
    #: database: one slot and publication), merged by key.
    CHANGE_STREAM = "change_stream"


class AppendRule(StrictModel):
    """How an append table's cursor is found."""

    cursor_columns: tuple[Identifier, ...] = Field(
        default=("id",),
        description="the first of these columns a table has (an integer, date or timestamp) is its cursor",
    )

    @field_validator("cursor_columns")
    @classmethod
    def _not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_column_list(value, "cursor_columns", "name at least one column") or ()


class MergeRule(StrictModel):
    """How a merge table's cursor (an update time or version every change advances) and deletes are found."""

    cursor_columns: tuple[Identifier, ...] = Field(
        default=("updated_at",),
        description="the first of these columns a table has (an integer, date or timestamp) is its merge cursor",
    )
    soft_delete_column: Identifier | None = Field(
        default=None, description="a column which, where a table has it, marks deleted rows (merge.soft_delete_column)"
    )
    reconcile_keys_every_seconds: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="merge.reconcile_keys_every_seconds of every merge table"
    )

    @field_validator("cursor_columns")
    @classmethod
    def _not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_column_list(value, "cursor_columns", "name at least one column") or ()


class ChangeStreamRule(StrictModel):
    """The database's one change stream, for its tables in mode ``change_stream`` (PostgreSQL)."""

    stream: Mapping[str, Any] = Field(
        default_factory=dict,
        description="fields of the stream group named after the database (slot_name, publication_name, keep_days, "
        "max_retained_wal_mb, retries, ...); its connection and change log (in the lake's namespace) are the "
        "database's",
    )

    @field_validator("stream")
    @classmethod
    def _stream(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        derived = sorted({"name", "conn_id", "change_log", "read_every_seconds"} & set(value))
        if derived:
            raise ValueError(f"{', '.join(derived)} are set by the database declaration")
        StreamGroupSpec.parse({**dict(value), "name": "sample", "conn_id": "sample", "change_log": {"namespace": "s"}})
        return value


class TableOverride(StrictModel):
    """What one table of the database does differently (``tables.<name>``, the name as discovered)."""

    skip: bool = Field(default=False, description="never tier this table (listed as skipped, with this reason)")
    mode: TableMode | None = Field(
        default=None, description="append, merge or change_stream; unset: the database's mode"
    )
    cursor_column: Identifier | None = Field(default=None, description="the cursor column; unset: found by the rule")
    primary_key: tuple[Identifier, ...] | None = Field(
        default=None, description="the merge key; unset: the table's own primary key"
    )
    lake_table: Identifier | None = Field(default=None, description="the lake table's name; unset: derived")
    spec: Mapping[str, Any] = Field(
        default_factory=dict,
        description="fields of the table's spec (freshness_seconds, retries, lake.partition_by...) over the "
        "database's table_defaults",
    )

    @field_validator("primary_key")
    @classmethod
    def _key(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return check_column_list(value, "primary_key", "leave it unset for the table's own primary key")


class DatabaseLakeSpec(StrictModel):
    """Where a declared database's tables land."""

    catalog_conn_id: str = Field(default="iceberg_default", min_length=1, description="the Iceberg catalog connection")
    namespace: Identifier = Field(description="the Iceberg namespace of every table of the database")
    table_prefix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_]{0,20}$",
        description="put before each lake table's name (<prefix><table>, or <prefix><schema>_<table> when the "
        "declaration has several schemas)",
    )


class DatabaseSpec(StrictModel):
    """A hot database whose tables are discovered when the DAG runs (see the module's description)."""

    name: Identifier = Field(description="the database's name in Airflow: its DAG's tasks and asset are named by it")
    conn_id: str = Field(min_length=1, description="Airflow connection of the hot database (postgres, mysql, sqlite)")
    schemas: tuple[Identifier, ...] | None = Field(
        default=None,
        description="schemas to discover (PostgreSQL; MariaDB: databases); unset: the connection's own (public)",
    )
    include: tuple[str, ...] = Field(
        default=("*",), description="globs of table names (or schema.table) to tier; the others are not listed"
    )
    exclude: tuple[str, ...] = Field(default=(), description="globs of table names (or schema.table) never tiered")
    lake: DatabaseLakeSpec = Field(description="where the tables land")
    mode: TableMode = Field(
        default=TableMode.AUTO, description="auto, append, merge or change_stream: each table's mode"
    )
    append: AppendRule = Field(default_factory=AppendRule, description="how an append table's cursor is found")
    merge: MergeRule = Field(default_factory=MergeRule, description="how a merge table's cursor and deletes are found")
    change_stream: ChangeStreamRule = Field(
        default_factory=ChangeStreamRule, description="the database's one change stream (tables in change_stream mode)"
    )
    table_defaults: Mapping[str, Any] = Field(
        default_factory=dict,
        description="fields of every table's spec (freshness_seconds, retries, spark, maintenance, ...)",
    )
    tables: Mapping[str, TableOverride] = Field(
        default_factory=dict, description="overrides per table, by its name as discovered (table or schema.table)"
    )
    probe_every_seconds: float = Field(
        default=60.0,
        ge=5,
        allow_inf_nan=False,
        description="how often the database is probed (its DAG's schedule): one query lists its tables and what "
        "changed; a table with changes runs when due (freshness_seconds since its last round)",
    )

    @field_validator("include")
    @classmethod
    def _include(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("include must name at least one glob ('*': every table)")
        return value

    @field_validator("table_defaults")
    @classmethod
    def _defaults(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        _check_spec_fields(value, "table_defaults")
        return value

    @model_validator(mode="after")
    def _overrides(self) -> DatabaseSpec:
        for table, override in self.tables.items():
            _check_spec_fields(override.spec, f"tables.{table}.spec", self.table_defaults)
        return self

    @property
    def asset_name(self) -> str:
        return f"tiering_database/{self.name}"

    def stream_group(self) -> StreamGroupSpec:
        """The stream group of its tables in mode ``change_stream``: named after the database, on its connection,
        its change log in the lake's namespace, read once in every run of the database's DAG."""
        return StreamGroupSpec.parse(
            {
                **dict(self.change_stream.stream), "name": self.name, "conn_id": self.conn_id,
                "change_log": {"catalog_conn_id": self.lake.catalog_conn_id, "namespace": self.lake.namespace},
                "read_every_seconds": self.probe_every_seconds,
            }
        )  # fmt: skip

    def may_stream(self) -> bool:
        """Whether any of its tables may be in mode ``change_stream`` (the DAG then has the stream's reader)."""
        return self.mode is TableMode.CHANGE_STREAM or any(
            o.mode is TableMode.CHANGE_STREAM for o in self.tables.values()
        )

    @classmethod
    def parse(cls, data: DatabaseSpec | Mapping[str, Any]) -> DatabaseSpec:
        """Build a declaration from a mapping (YAML, JSON, Python), raising InvalidTableSpec that names the field."""
        return validated(cls, data, "database", dotted)


def _check_spec_fields(fields: Mapping[str, Any], where: str, under: Mapping[str, Any] | None = None) -> None:
    """Validate table spec fields as a table's spec would take them, naming the field (``where``) that fails."""
    lake = fields.get("lake") or {}
    derived = sorted(_DERIVED_FIELDS & set(fields)) + [f"lake.{f}" for f in sorted(_DERIVED_LAKE_FIELDS & set(lake))]
    if derived:
        raise ValueError(f"{where}: {', '.join(derived)} are set by the database declaration (lake, rules, overrides)")
    merged = {**dict(under or {}), **dict(fields)}
    sample = {
        **merged,
        "name": "sample",
        "source": {"conn_id": "sample", "table": "sample", "cursor_column": "id"},
        "lake": {**dict(merged.get("lake") or {}), "namespace": "sample", "table": "sample"},
    }
    try:
        TableSpec.parse(sample)
    except InvalidTableSpec as exc:
        raise ValueError(f"{where}: {str(exc).split(': ', 1)[-1]}") from exc
