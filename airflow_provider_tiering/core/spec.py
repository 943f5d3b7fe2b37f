"""The declarative, validated description of one tiered table.

A spec is plain data: it names connections (never credentials), the hot table and its cursor,
the Iceberg target and the knobs of a round. It is validated where it is built, so an invalid
spec fails when the DAG file is parsed, with the table and the field named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.partitions import PartitionField, parse_partition_field
from airflow_provider_tiering.core.source_specs import SOURCE_SPEC_KINDS, SourceSpec
from airflow_provider_tiering.core.spec_types import Identifier, StrictModel, check_column_list, dotted, validated
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec, parse_streams, resolve_streams

# Airflow task ids and asset names are derived from the table name.
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$")


class LakeSpec(StrictModel):
    """The Iceberg table a hot table is tiered into."""

    catalog_conn_id: str = Field(
        default="iceberg_default",
        min_length=1,
        description="Airflow connection (type iceberg, Airflow's Iceberg provider's) of the Iceberg catalog",
    )
    namespace: Identifier = Field(description="Iceberg namespace of the lake table (created if missing)")
    table: Identifier = Field(description="name of the lake table in its namespace (created by the first round)")
    partition_by: tuple[str, ...] = Field(
        default=(),
        description='Iceberg partition fields as in Spark DDL: "region", "day(ts)", "bucket(16, id)", "truncate(4, a)"',
    )

    backfill_added_columns: bool = Field(
        default=False,
        description="a column added to the hot table with a default also gets that value written into the lake's "
        "files (rewritten on Spark), not only as its Iceberg initial default: for readers that ignore initial defaults",
    )
    rejects_table: Identifier | None = Field(
        default=None,
        description='side table of bad records (on_bad_record="side_table"); default "<table>_rejects"',
    )
    copy_on_write_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="a merge or change-stream round rewrites a lake file that loses at least this fraction of its "
        "live rows (copy-on-write); the rows other files lose are deleted by position-delete files (merge-on-read). "
        "0: every file rewritten (no delete files, for readers that apply none)",
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


class SparkSpec(StrictModel):
    """Where the round's Spark job runs: the Spark provider's connection, plus extra Spark conf."""

    conn_id: str = Field(
        default="spark_default",
        min_length=1,
        description="Airflow connection of Spark: type spark (host = master URL; none: local[*]) or spark_connect",
    )
    conf: Mapping[str, str] = Field(default_factory=dict, description="extra Spark conf of the round's session")
    local_single_split: bool = Field(
        default=True,
        description="a round that fits one split is written by the task process itself, without starting Spark",
    )
    class_data_sharing: bool = Field(
        default=True,
        description="a local driver JVM maps an archive of Spark's classes, recorded by the machine's first session",
    )


class MaintenanceSpec(StrictModel):
    """Lake maintenance of the table (compaction, snapshot expiry, orphan removal): a task after its tiering task.

    The defaults follow Iceberg's own (snapshots kept 5 days, orphan files removed after 3 days).
    """

    enabled: bool = Field(default=True, description="add the table's maintenance task to the tiering DAG")
    interval_seconds: float = Field(
        default=3600.0, ge=0, allow_inf_nan=False, description="run at most this often; the task skips when run sooner"
    )
    small_file_mb: float = Field(
        default=32.0, gt=0, allow_inf_nan=False, description="data files smaller than this count as small"
    )
    max_small_files: int = Field(
        default=50,
        ge=1,
        description="compact when the current snapshot has more small files than this",
    )
    deleted_fraction: float = Field(
        default=0.2,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="compact a data file once position deletes hide at least this fraction of its rows (merge-on-read "
        "rounds write them), applying them",
    )
    max_delete_files: int = Field(
        default=10, ge=1, description="compact a data file once this many position-delete files apply to it"
    )
    snapshot_retention_seconds: float = Field(
        default=5 * 86400.0,
        gt=0,
        allow_inf_nan=False,
        description="expire snapshots older than this (never the current one nor the latest tiering snapshot)",
    )
    min_snapshots_to_keep: int = Field(default=1, ge=1, description="the newest snapshots always kept")
    orphan_min_age_seconds: float = Field(
        default=3 * 86400.0,
        ge=3600,
        allow_inf_nan=False,
        description="unreferenced files are removed once this old: longer than any round or compaction takes",
    )


class EvictionSpec(StrictModel):
    """Deleting tiered rows from the hot store (SQL tables only): after a round's commit, rows the lake holds (cursor
    within the lake's committed offsets, or for a change stream's table the lake's row of the same key, each one
    checked in the lake) and older than ``retention_seconds``."""

    enabled: bool = Field(default=False, description="delete tiered rows from the hot store after each round")
    retention_seconds: float = Field(
        default=86400.0, ge=0, allow_inf_nan=False, description="rows younger than this stay in the hot store"
    )
    age_column: Identifier | None = Field(
        default=None,
        description="timestamp column that dates a row; by default the cursor column (required without one)",
    )
    batch_rows: int = Field(default=5000, gt=0, le=100_000, description="rows deleted per hot-store transaction")
    max_rows_per_round: int = Field(default=1_000_000, gt=0, description="rows evicted by one round at most")


class MergeSpec(StrictModel):
    """Rows of the hot table change (updates, soft deletes): the lake holds the latest version of each key.

    Each round reads the rows whose cursor (an update time or version, which every change must advance) lies past
    the committed offsets, as for appends, and replaces the lake's rows of the same keys with them, copy-on-write
    (dlt calls this ``write_disposition="merge"``; pyiceberg ``upsert``). The key becomes the Iceberg table's
    identifier fields.
    """

    primary_key: tuple[Identifier, ...] | None = Field(
        default=None,
        description="columns that identify a row (NOT NULL in the hot table; never the cursor); "
        "unset: the hot table's own primary key",
    )
    soft_delete_column: Identifier | None = Field(
        default=None,
        description="a row whose value here is set (not NULL, and not false) is deleted: its key leaves the lake; "
        "unset: rows are never deleted from the lake",
    )
    reconcile_keys_every_seconds: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="read every key of the hot table this often (in the round's own snapshot) and remove from the "
        "lake the keys it no longer has: hard deletes and the old key of a row whose key changed (a reconciling "
        "round reads every key: one index scan of the hot table); 0: every round; unset: never",
    )

    @field_validator("primary_key")
    @classmethod
    def _key_not_empty_nor_repeated(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return check_column_list(value, "primary_key", "leave it unset for the hot table's primary key")

    @model_validator(mode="after")
    def _soft_delete_not_in_key(self) -> MergeSpec:
        if self.soft_delete_column is not None and self.soft_delete_column in (self.primary_key or ()):
            raise ValueError(f"soft_delete_column {self.soft_delete_column!r} must not be part of primary_key")
        return self


class TableSpec(StrictModel):
    """One hot table mapped to one Iceberg table, with the options of its rounds."""

    name: str = Field(description="unique name of the tiered table; the Airflow task id")
    source: SourceSpec = Field(description='the hot store: a SQL table (kind "sql", the default) or a landing zone')
    lake: LakeSpec = Field(description="the Iceberg table it is tiered into")
    spark: SparkSpec = Field(default_factory=SparkSpec, description="where a round's Spark job runs")
    freshness_seconds: float = Field(default=300.0, gt=0, allow_inf_nan=False, description="how stale the lake may get")
    max_rows_per_round: int = Field(
        default=20_000_000, gt=0, description="rows one round tiers at most; the rest waits for the next round"
    )
    target_rows_per_split: int = Field(
        default=1_000_000, gt=0, description="rows per split (one Spark task); a round of one split skips Spark"
    )
    target_file_size_mb: int = Field(default=128, gt=0, le=2048, description="size at which data files are cut")
    retries: int = Field(default=2, ge=0, le=100, description="Airflow retries of the table's task")
    retry_delay_seconds: float = Field(default=30.0, ge=0, description="Airflow's retry_delay of the task")
    retry_exponential_backoff: float = Field(
        default=2.0, ge=0, description="Airflow back-off multiplier; 0 turns it off"
    )
    max_retry_delay_seconds: float = Field(
        default=900.0, ge=0, description="Airflow's max_retry_delay: the longest back-off between retries"
    )
    max_consecutive_failures: int = Field(default=5, gt=0, description="then the table is quarantined")
    staleness_alert_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="fail the table's task (and the run's summary) when the lake has not caught up with the hot "
        "store for this long; unset: three times freshness_seconds, at least an hour",
    )
    round_timeout_seconds: float | None = Field(
        default=3600.0,
        gt=0,
        allow_inf_nan=False,
        description="a round still running after this long fails (Airflow's execution_timeout); None: no limit",
    )
    maintenance: MaintenanceSpec = Field(
        default_factory=MaintenanceSpec, description="compaction, snapshot expiry and orphan removal of the lake table"
    )
    eviction: EvictionSpec = Field(
        default_factory=EvictionSpec, description="deleting tiered rows from the hot store (opt-in, SQL tables)"
    )
    merge: MergeSpec | None = Field(
        default=None,
        description="rows of the hot table change: keep the latest version of each key in the lake; unset: "
        "rows are only appended",
    )

    @property
    def target_file_bytes(self) -> int:
        """``target_file_size_mb`` in bytes: where a round's, a merge's and a rewrite's writers cut files."""
        return self.target_file_size_mb * 1024 * 1024

    @property
    def staleness_bound_seconds(self) -> float:
        """After this long without catching up, the table is stale (see ``core/staleness.py``)."""
        if self.staleness_alert_seconds is not None:
            return self.staleness_alert_seconds
        return max(3600.0, 3 * self.freshness_seconds)

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

    @model_validator(mode="after")
    def _eviction_needs_a_sql_table(self) -> TableSpec:
        if self.eviction.enabled and not self.source.supports_eviction:
            raise ValueError(
                f"eviction deletes tiered rows from a SQL hot table; a {self.source.kind!r} source cannot "
                "(a landing zone has after_commit)"
            )
        columns = self.source.column_names()
        age = self.eviction.age_column
        if self.eviction.enabled and age is None and self.source.cursor() is None:
            raise ValueError(
                "eviction.age_column is required for a table without a cursor (a change stream's): name the date "
                "or timestamp column that dates a row"
            )
        if self.eviction.enabled and age is not None and columns is not None and age not in columns:
            raise ValueError(f"eviction.age_column {age!r} is not in source.columns")
        return self

    @model_validator(mode="after")
    def _merge_fits_the_source(self) -> TableSpec:
        merge = self.merge
        if merge is None:
            return self
        if not self.source.supports_merge:
            raise ValueError(f"merge needs a SQL table read by a cursor; a {self.source.kind!r} source cannot merge")
        if self.source.streams_changes and merge.soft_delete_column is not None:
            raise ValueError("merge.soft_delete_column is for merge by cursor; a change stream delivers deletes itself")
        if self.source.streams_changes and merge.reconcile_keys_every_seconds is not None:
            raise ValueError(
                "merge.reconcile_keys_every_seconds is for merge by cursor; a change stream delivers deletes and key "
                "changes itself"
            )
        cursor, columns = self.source.cursor(), self.source.column_names()
        if cursor is not None and cursor in (merge.primary_key or ()):
            raise ValueError(
                f"merge.primary_key must not hold the cursor column {cursor!r}: the cursor changes with every "
                "version of a row, the key never does"
            )
        if merge.soft_delete_column is not None and merge.soft_delete_column == cursor:
            raise ValueError(f"merge.soft_delete_column must not be the cursor column {cursor!r}")
        if columns is not None:
            missing = [c for c in merge.primary_key or () if c not in columns]
            if missing:
                raise ValueError(f"merge.primary_key {missing} are not in source.columns")
            if merge.soft_delete_column is not None and merge.soft_delete_column not in columns:
                raise ValueError(f"merge.soft_delete_column {merge.soft_delete_column!r} is not in source.columns")
        if self.eviction.enabled and not self.source.streams_changes:
            raise ValueError(
                "eviction is not supported with merge by cursor yet: a row evicted from the hot store and updated in "
                "the lake afterwards cannot be told apart; disable one of them"
            )
        return self

    @model_validator(mode="after")
    def _stream_group_fits(self) -> TableSpec:
        group = self.source.stream_group()
        if group is None:
            return self
        if group.change_log.catalog_conn_id != self.lake.catalog_conn_id:
            raise ValueError(
                f"source.stream: group {group.name!r} keeps its change log in catalog "
                f"{group.change_log.catalog_conn_id!r}, not this table's {self.lake.catalog_conn_id!r}: a group's "
                "tables and its change log share one catalog"
            )
        if self.eviction.enabled:
            raise ValueError(
                "eviction is not supported for a table of a stream group yet: read it through a change stream of "
                "its own (no source.stream), or disable eviction"
            )
        return self

    @property
    def asset_name(self) -> str:
        return f"tiering/{self.lake.namespace}/{self.lake.table}"

    @classmethod
    def parse(cls, data: TableSpec | Mapping[str, Any]) -> TableSpec:
        """Build a spec from a mapping (YAML, JSON, Python), raising InvalidTableSpec that names the field."""
        return validated(cls, data, "table", _error_location)


def _error_location(loc: tuple[int | str, ...]) -> str:
    # The source union adds its tag to the location: source.files.columns reads as source.columns.
    if len(loc) >= 2 and loc[0] == "source" and loc[1] in SOURCE_SPEC_KINDS:
        loc = (loc[0], *loc[2:])
    return dotted(loc)


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
    _check_stream_groups(specs)
    return specs


def _check_stream_groups(specs: Iterable[TableSpec]) -> None:
    """The tables of one stream group name one group, of one kind of change stream."""
    first: dict[str, TableSpec] = {}
    for spec in specs:
        group = spec.source.stream_group()
        if group is None:
            continue
        other = first.setdefault(group.name, spec)
        if other.source.stream_group() != group:
            raise InvalidTableSpec(
                f"table {spec.name!r}: field 'source.stream': group {group.name!r} is declared differently by "
                f"table {other.name!r}"
            )
        if type(other.source) is not type(spec.source):
            raise InvalidTableSpec(
                f"table {spec.name!r}: field 'source.kind': group {group.name!r} reads {other.source.kind} tables "
                f"(table {other.name!r}); one group is one database's log"
            )


@dataclass(frozen=True)
class Declaration:
    """Tables, with the stream groups they read through (those declared, and those the tables name)."""

    tables: list[TableSpec]
    streams: dict[str, StreamGroupSpec] = field(default_factory=dict)


def declare(
    tables: Iterable[TableSpec | Mapping[str, Any]] | str | Path,
    streams: Iterable[StreamGroupSpec | Mapping[str, Any]] = (),
) -> Declaration:
    """Validate tables (a list, or the path of a YAML file) and the stream groups they name (``streams``, and a YAML
    file's own ``streams`` list): each table's ``source.stream`` that names a group gets the group's spec. A declared
    group with no table still has a reader, which takes the tables it read out of its log."""
    declared = list(streams)
    if isinstance(tables, (str, Path)):
        found, in_file = _read_declaration(Path(tables))
        declared += in_file
        try:
            return _declared(found, declared)
        except InvalidTableSpec as exc:
            raise InvalidTableSpec(f"{tables}: {exc}") from exc
    return _declared(list(tables), declared)


def _declared(tables: list[Any], streams: Iterable[StreamGroupSpec | Mapping[str, Any]]) -> Declaration:
    groups = parse_streams(streams)
    specs = parse_table_specs(resolve_streams(tables, groups))
    for spec in specs:
        group = spec.source.stream_group()
        if group is not None and groups.setdefault(group.name, group) != group:
            raise InvalidTableSpec(
                f"table {spec.name!r}: field 'source.stream': group {group.name!r} is declared differently in streams"
            )
    clash = sorted({s.name for s in specs} & set(groups))
    if clash:
        raise InvalidTableSpec(f"stream {clash[0]!r}: field 'name': a table of that name is declared too")
    return Declaration(specs, groups)


def load_table_specs(path: str | Path) -> list[TableSpec]:
    """Read and validate a YAML file of tables: a list, or a mapping with a ``tables`` list (and a ``streams`` list
    of the stream groups its tables name)."""
    return declare(path).tables


def _read_declaration(path: Path) -> tuple[list[Any], list[Any]]:
    """A YAML file's tables and streams."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        hint = ""
        if not path.is_absolute() and not path.exists():
            hint = (
                f" (a relative path is read from the working directory, {Path.cwd()}, which differs between Airflow's "
                "processes: give it relative to the DAG file, Path(__file__).parent / 'tables.yaml')"
            )
        raise InvalidTableSpec(f"{path}: cannot read the table list: {exc}{hint}") from exc
    tables = data.get("tables") if isinstance(data, Mapping) else data
    if not isinstance(tables, list):
        raise InvalidTableSpec(f"{path}: expected a list of tables (or a mapping with a 'tables' list)")
    streams = data.get("streams") or [] if isinstance(data, Mapping) else []
    if not isinstance(streams, list):
        raise InvalidTableSpec(f"{path}: 'streams' must be a list of stream groups")
    return tables, streams
