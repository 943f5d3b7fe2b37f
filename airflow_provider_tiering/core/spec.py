"""The declarative, validated description of one tiered table.

A spec is plain data: it names connections (never credentials), the hot table and its cursor,
the Iceberg target and the knobs of a round. It is validated where it is built, so an invalid
spec fails when the DAG file is parsed, with the table and the field named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.partitions import PartitionField, parse_partition_field

# Plain identifiers only: they are also quoted when used, this keeps names portable and readable.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Airflow task ids and asset names are derived from the table name.
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$")


def _check_identifier(value: str) -> str:
    if not _IDENTIFIER.match(value):
        raise ValueError(
            f"{value!r} is not a plain identifier (letters, digits, underscore; "
            "starts with a letter or underscore; at most 63 characters)"
        )
    return value


#: A table, schema or column name: validated here, and still quoted wherever it is used.
Identifier = Annotated[str, AfterValidator(_check_identifier)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SqlSourceSpec(_Strict):
    """A table in a SQL hot store (PostgreSQL, SQLite), read incrementally by a cursor column."""

    kind: Literal["sql"] = "sql"
    conn_id: str = Field(min_length=1, description="Airflow connection of the hot database")
    table: Identifier
    db_schema: Identifier | None = Field(default=None, description="schema of the table (PostgreSQL)")
    cursor_column: Identifier = Field(description="monotonic column (integer or timestamp) that orders new rows")
    columns: tuple[Identifier, ...] | None = Field(default=None, description="columns to tier; all when unset")
    settle_lag_seconds: float = Field(
        default=0.0,
        ge=0,
        description="only tier rows whose cursor is this old (engines without a transaction view)",
    )
    max_watermark_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="how long a round waits for in-flight transactions before tiering up to the last safe point",
    )

    @field_validator("columns")
    @classmethod
    def _columns_not_empty_nor_repeated(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("columns must not be empty; leave it unset to tier every column")
        if len(set(value)) != len(value):
            raise ValueError("columns must not repeat")
        return value

    def column_names(self) -> tuple[str, ...] | None:
        """The tiered columns when declared; None means every column of the hot table."""
        return self.columns

    @model_validator(mode="after")
    def _cursor_is_tiered(self) -> SqlSourceSpec:
        if self.columns is not None and self.cursor_column not in self.columns:
            raise ValueError(f"cursor_column {self.cursor_column!r} must be one of columns")
        return self


class LakeSpec(_Strict):
    """The Iceberg table a hot table is tiered into."""

    catalog_conn_id: str = Field(default="iceberg_default", min_length=1)
    namespace: Identifier
    table: Identifier
    partition_by: tuple[str, ...] = Field(
        default=(),
        description='Iceberg partition fields as in Spark DDL: "region", "day(ts)", "bucket(16, id)", "truncate(4, a)"',
    )

    rejects_table: Identifier | None = Field(
        default=None,
        description='side table of bad records (on_bad_record="side_table"); default "<table>_rejects"',
    )

    @property
    def rejects_table_name(self) -> str:
        return self.rejects_table or f"{self.table}_rejects"

    @field_validator("partition_by")
    @classmethod
    def _partition_fields(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        fields = [parse_partition_field(text) for text in value]
        names = [f.name for f in fields]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"partition field(s) {', '.join(repeated)} declared more than once")
        return tuple(str(f) for f in fields)

    @property
    def partition_fields(self) -> tuple[PartitionField, ...]:
        return tuple(parse_partition_field(text) for text in self.partition_by)


class SparkSpec(_Strict):
    """Where the round's Spark job runs: the Spark provider's connection, plus extra Spark conf."""

    conn_id: str = Field(default="spark_default", min_length=1)
    conf: Mapping[str, str] = Field(default_factory=dict)


class TableSpec(_Strict):
    """One hot table mapped to one Iceberg table, with the options of its rounds."""

    name: str = Field(description="unique name of the tiered table; the Airflow task id")
    source: SqlSourceSpec
    lake: LakeSpec
    spark: SparkSpec = Field(default_factory=SparkSpec)
    freshness_seconds: float = Field(default=300.0, gt=0, description="how stale the lake may get")
    max_rows_per_round: int = Field(default=20_000_000, gt=0)
    target_rows_per_split: int = Field(default=1_000_000, gt=0)
    target_file_size_mb: int = Field(default=128, gt=0, le=2048)
    retries: int = Field(default=2, ge=0, le=100)
    retry_delay_seconds: float = Field(default=30.0, ge=0)
    retry_exponential_backoff: float = Field(
        default=2.0, ge=0, description="Airflow back-off multiplier; 0 turns it off"
    )
    max_retry_delay_seconds: float = Field(default=900.0, ge=0)
    max_consecutive_failures: int = Field(default=5, gt=0, description="then the table is quarantined")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _TABLE_NAME.match(value):
            raise ValueError(
                f"name {value!r} must be letters, digits, '_', '.', '-' (at most 200), "
                "since it becomes the Airflow task id"
            )
        return value

    @model_validator(mode="after")
    def _partition_columns_are_tiered(self) -> TableSpec:
        columns = self.source.column_names()
        if columns is not None:
            missing = [f.column for f in self.lake.partition_fields if f.column not in columns]
            if missing:
                raise ValueError(f"lake.partition_by {missing} are not in source.columns")
        return self

    @property
    def asset_name(self) -> str:
        return f"tiering/{self.lake.namespace}/{self.lake.table}"

    @classmethod
    def parse(cls, data: TableSpec | Mapping[str, Any]) -> TableSpec:
        """Build a spec from a mapping (YAML, JSON, Python), raising InvalidTableSpec that names the field."""
        if isinstance(data, TableSpec):
            return data
        name = data.get("name", "<unnamed>") if isinstance(data, Mapping) else "<not a mapping>"
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"field '{'.'.join(str(p) for p in err['loc']) or '<root>'}': {err['msg']}" for err in exc.errors()
            )
            raise InvalidTableSpec(f"table {name!r}: {problems}") from None


def parse_table_specs(tables: Iterable[TableSpec | Mapping[str, Any]]) -> list[TableSpec]:
    """Validate a list of table specs: each one, and that names and lake tables are unique."""
    specs = [TableSpec.parse(t) for t in tables]
    seen_names: set[str] = set()
    seen_targets: dict[tuple[str, str, str], str] = {}
    for spec in specs:
        if spec.name in seen_names:
            raise InvalidTableSpec(f"table {spec.name!r}: field 'name': declared more than once")
        seen_names.add(spec.name)
        target = (spec.lake.catalog_conn_id, spec.lake.namespace, spec.lake.table)
        if target in seen_targets:
            raise InvalidTableSpec(
                f"table {spec.name!r}: field 'lake': {spec.lake.namespace}.{spec.lake.table} "
                f"is already the target of table {seen_targets[target]!r}"
            )
        seen_targets[target] = spec.name
    return specs


def load_table_specs(path: str | Path) -> list[TableSpec]:
    """Read and validate a YAML file of tables: a list, or a mapping with a ``tables`` list."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidTableSpec(f"{path}: cannot read the table list: {exc}") from None
    tables = data.get("tables") if isinstance(data, Mapping) else data
    if not isinstance(tables, list):
        raise InvalidTableSpec(f"{path}: expected a list of tables (or a mapping with a 'tables' list)")
    try:
        return parse_table_specs(tables)
    except InvalidTableSpec as exc:
        raise InvalidTableSpec(f"{path}: {exc}") from None
