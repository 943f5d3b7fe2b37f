"""The hot-store part of a table spec, one model per source kind, and the registry of those kinds.

``TableSpec.source`` is the union of the models in :data:`SOURCE_SPEC_KINDS`, told apart by ``kind`` ("sql"
when unset). Which implementation reads a spec is the business of ``sources/registry.py`` (for "sql", the
Airflow connection's type picks the dialect). A model declares what its kind supports (``supports_eviction``,
``supports_merge``, a ``cursor()`` a reader can wait for, ``rejects_to_side_table``), so no code outside the
registries needs to ask which kind it holds.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeAlias, Union

from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from airflow_provider_tiering.core.shape import DeclaredColumnChanges
from airflow_provider_tiering.core.spec_types import Identifier, StrictModel, check_column_list
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec


class SourceSpecBase(StrictModel):
    """What every source kind's spec offers the rest of the package."""

    #: The spec kind, the discriminator of the source union.
    kind: str
    #: The Airflow connection of the hot store (None: this table needs none).
    conn_id: str | None = None
    #: Eviction (deleting tiered rows from the hot store) works for this kind.
    supports_eviction: ClassVar[bool] = False
    #: Tables of this kind may declare ``merge`` (rows that change, merged by key through the cursor).
    supports_merge: ClassVar[bool] = False
    #: The source delivers every change (insert, update, delete) in commit order: its table is always merged by
    #: key, without a cursor, and deletes come from the stream (CDC).
    streams_changes: ClassVar[bool] = False
    #: A round's columns are those of what it reads (a landing zone's files), not the whole table's: a column absent
    #: from a round is not dropped, and a column new in it is never a renamed one.
    columns_may_be_absent: ClassVar[bool] = False

    def column_names(self) -> tuple[str, ...] | None:
        """The tiered columns when declared; None when they come from the hot store."""
        return None

    def cursor(self) -> str | None:
        """The column whose committed value tells how far the lake is (None: no such column, e.g. files)."""
        return None

    def declared_column_changes(self) -> DeclaredColumnChanges:
        """Renames and drops of the hot table's columns the spec declares (for stores that keep no column ids)."""
        return DeclaredColumnChanges()

    def changed_rows_bound(self) -> int | None:
        """Rows of an append table changed in place between two rounds past which its task alerts (None: never)."""
        return None

    def stream_group(self) -> StreamGroupSpec | None:
        """The stream group whose reader reads this table's changes (None: the table reads its own log, if any)."""
        return None

    @property
    def rejects_to_side_table(self) -> bool:
        """Bad records go to the table's side table instead of failing the round."""
        return False

    def describe(self) -> str:
        """The hot table in a few words, for messages."""
        return self.kind


class DatabaseTableSpec(SourceSpecBase):
    """A table of a database whose tiered columns a spec may list (``columns``; every column when unset)."""

    columns: tuple[Identifier, ...] | None

    @field_validator("columns", check_fields=False)
    @classmethod
    def _columns_not_empty_nor_repeated(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return check_column_list(value, "columns", "leave it unset to tier every column")

    def column_names(self) -> tuple[str, ...] | None:
        """The tiered columns when declared; None means every column of the hot table."""
        return self.columns


class DeclaresColumnChanges(DatabaseTableSpec):
    """A table of a store that keeps no column ids (SQLite, MariaDB, MySQL; PostgreSQL has them): a column gone while
    another is new could be a rename or a drop and an add, and is refused until the spec declares which."""

    renamed_columns: dict[Identifier, Identifier] | None = Field(
        default=None,
        description="former name -> new name of hot columns renamed (SQLite, MariaDB, MySQL: they keep no column ids, "
        "so a column gone while another is new is refused until declared); the lake renames the column, keeping its "
        "values",
    )
    dropped_columns: tuple[Identifier, ...] | None = Field(
        default=None,
        description="former hot columns dropped for good, where a new column appeared at the same time (SQLite, "
        "MariaDB, MySQL): the new column is then new, NULL for rows tiered before; the dropped one stays in the lake",
    )

    def declared_column_changes(self) -> DeclaredColumnChanges:
        return DeclaredColumnChanges(dict(self.renamed_columns or {}), tuple(self.dropped_columns or ()))

    @model_validator(mode="after")
    def _column_changes_consistent(self) -> DeclaresColumnChanges:
        renamed = self.renamed_columns or {}
        same = [old for old, new in renamed.items() if old == new]
        if same:
            raise ValueError(f"renamed_columns: {same} renamed to themselves")
        targets = list(renamed.values())
        repeated = sorted({name for name in targets if targets.count(name) > 1})
        if repeated:
            raise ValueError(f"renamed_columns: several columns renamed to {repeated}")
        both = sorted(set(renamed) & set(self.dropped_columns or ()))
        if both:
            raise ValueError(f"{both} declared both renamed (renamed_columns) and dropped (dropped_columns)")
        return self


class SqlSourceSpec(DeclaresColumnChanges):
    """A table in a SQL hot store (PostgreSQL, SQLite, MariaDB/MySQL: the connection's type says which), read
    incrementally by a cursor column."""

    supports_eviction: ClassVar[bool] = True
    supports_merge: ClassVar[bool] = True

    kind: Literal["sql"] = Field(default="sql", description="a table of a SQL database")
    conn_id: str = Field(
        min_length=1, description="Airflow connection of the hot database: type postgres, mysql, mariadb or sqlite"
    )
    table: Identifier = Field(description="the hot table")
    db_schema: Identifier | None = Field(default=None, description="schema of the table (PostgreSQL)")
    cursor_column: Identifier = Field(description="monotonic column (integer or timestamp) that orders new rows")
    columns: tuple[Identifier, ...] | None = Field(default=None, description="columns to tier; all when unset")
    settle_lag_seconds: float = Field(
        default=0.0,
        ge=0,
        description="only tier rows whose cursor is this old: times an application assigns itself (time cursors)",
    )
    max_watermark_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="how long a round waits for in-flight transactions before tiering up to the last safe point",
    )
    consistent_snapshot: bool = Field(
        default=True,
        description="every split of a round reads one snapshot of the table (PostgreSQL: an exported snapshot; "
        "SQLite, MariaDB: the round is read as one split); turn off only for a table whose tiered rows never change",
    )
    changed_rows_alert: int | None = Field(
        default=None,
        gt=0,
        description="an append table (no merge) whose tiered rows were updated or deleted in place more than this "
        "many times since the last round (PostgreSQL counts them) fails its task with an alert; unset: shown only",
    )

    def cursor(self) -> str | None:
        return self.cursor_column

    def changed_rows_bound(self) -> int | None:
        return self.changed_rows_alert

    def describe(self) -> str:
        return f"table {self.db_schema + '.' if self.db_schema else ''}{self.table}"

    @model_validator(mode="after")
    def _cursor_is_tiered(self) -> SqlSourceSpec:
        if self.columns is not None and self.cursor_column not in self.columns:
            raise ValueError(f"cursor_column {self.cursor_column!r} must be one of columns")
        return self


class ChangeStreamSpec(DatabaseTableSpec):
    """A table tiered from its database's change stream: every committed insert, update and delete reaches the lake in
    commit order, merged by key. The first round loads the table from a snapshot whose log position is known, later
    rounds apply the changes since the lake's position."""

    supports_eviction: ClassVar[bool] = True
    supports_merge: ClassVar[bool] = True
    streams_changes: ClassVar[bool] = True

    conn_id: str
    table: Identifier
    db_schema: Identifier | None = None
    keys_in_memory: int = Field(
        default=100_000,
        ge=100,
        description="changed keys a round holds in memory at once: a round with more (a large transaction) is typed "
        "in chunks of this many as it is read, kept on local disk until written, and the merge keeps each key's "
        "latest version from the files",
    )
    stream: StreamGroupSpec | None = Field(
        default=None,
        description="the stream group whose one log reader reads this table's changes (the name of a group "
        "declared with build_table_dags(..., streams=[...])); unset: the table reads its own log (a slot of its "
        "own, a binlog dump of its own)",
    )

    def stream_group(self) -> StreamGroupSpec | None:
        return self.stream

    @model_validator(mode="after")
    def _stream_on_the_same_database(self) -> ChangeStreamSpec:
        if self.stream is not None and self.stream.conn_id != self.conn_id:
            raise ValueError(
                f"stream: group {self.stream.name!r} reads connection {self.stream.conn_id!r}, not this table's "
                f"{self.conn_id!r}: a group is one hot database"
            )
        return self


class PostgresCdcSourceSpec(ChangeStreamSpec):
    """A PostgreSQL table tiered from its change stream (logical replication, ``pgoutput``): every committed
    insert, update and delete reaches the lake in commit order. The first round loads the table under the snapshot
    its replication slot was created with, later rounds apply the changes since the lake's LSN.

    Needs ``wal_level = logical`` on the server, a role with the REPLICATION attribute that owns the table (to
    create its publication), and a replica identity that holds the key (the primary key, the default)."""

    kind: Literal["postgres_cdc"] = Field(description="a PostgreSQL table read through its change stream (CDC)")
    conn_id: str = Field(min_length=1, description="Airflow connection of the hot database (a postgres one)")
    table: Identifier = Field(description="the hot table")
    db_schema: Identifier | None = Field(default=None, description="schema of the table; public when unset")
    columns: tuple[Identifier, ...] | None = Field(default=None, description="columns to tier; all when unset")
    slot_name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,63}$",
        description="the table's logical replication slot; unset: tiering_<schema>_<table> (shortened to 63 "
        "characters with a hash)",
    )
    publication_name: Identifier | None = Field(
        default=None, description="the table's publication; unset: the slot's name"
    )
    max_retained_wal_mb: float = Field(
        default=1024.0,
        gt=0,
        description="WAL the slot may hold back on the hot server before the table's status and metrics alert",
    )
    max_wal_mb_per_round: float | None = Field(
        default=None,
        gt=0,
        description="a round applies the transactions committed in at most this much WAL after the lake's LSN (and "
        "always the first one, however large); the rest is the next round's. Unset: only max_rows_per_round bounds "
        "a round (in changes)",
    )

    def describe(self) -> str:
        return f"table {self.db_schema or 'public'}.{self.table} (change stream)"

    def slot(self) -> str:
        """The replication slot's name (a slot name allows lower-case letters, digits and underscores)."""
        if self.slot_name is not None:
            return self.slot_name
        name = re.sub(r"[^a-z0-9_]", "_", f"tiering_{self.db_schema or 'public'}_{self.table}".lower())
        if len(name) > 63 or name != f"tiering_{self.db_schema or 'public'}_{self.table}":
            digest = hashlib.sha1(f"{self.db_schema or 'public'}.{self.table}".encode()).hexdigest()[:8]
            name = f"{name[:54]}_{digest}"
        return name

    def publication(self) -> str:
        return self.publication_name or self.slot()


class MySqlCdcSourceSpec(ChangeStreamSpec, DeclaresColumnChanges):
    """A MariaDB or MySQL table tiered from the server's row binlog (read as a replica reads it, through
    PyMySQL). The first round loads the table from consistent snapshots whose binlog positions are
    known, later rounds apply the changes committed since the lake's binlog position.

    Needs on the server ``log_bin``, ``binlog_format = ROW``, ``binlog_row_image = FULL`` and
    ``binlog_row_metadata = FULL``; a user with ``REPLICATION SLAVE``, ``BINLOG MONITOR`` (MySQL: ``REPLICATION
    CLIENT``) and SELECT on the table; and a primary key (or a unique key of NOT NULL columns) on the table."""

    kind: Literal["mysql_cdc"] = Field(description="a MariaDB or MySQL table read through its row binlog (CDC)")
    conn_id: str = Field(min_length=1, description="Airflow connection of the hot database (a mysql or mariadb one)")
    table: Identifier = Field(description="the hot table")
    db_schema: Identifier | None = Field(default=None, description="database of the table; the connection's when unset")
    columns: tuple[Identifier, ...] | None = Field(default=None, description="columns to tier; all when unset")
    server_id: int = Field(
        default=0,
        ge=0,
        le=2**32 - 1,
        description="the server id the binlog is read with. 0 (the default) reads as mysqlbinlog does: never "
        "registered as a replica and never disconnecting one; another id must differ from the server's own and from "
        "every replica's (checked on each round: a replica with the same id would be disconnected)",
    )
    eviction_marker_table: Identifier = Field(
        default="tiering_evictions",
        description="eviction's own table in the table's database: each eviction transaction writes its row there "
        "first, so the binlog carries its deletes to the server's replicas while the stream skips them (created on "
        "the first eviction; needs CREATE, or create it as docs/mutable-tables.md shows)",
    )

    def describe(self) -> str:
        return f"table {self.db_schema + '.' if self.db_schema else ''}{self.table} (binlog)"


#: Arrow type names a file source may declare (spelled as ``str(pyarrow type)``), all of which Iceberg can hold.
FILE_COLUMN_TYPES = frozenset(
    {"int32", "int64", "float", "double", "float32", "float64", "string", "bool", "binary", "date32"}
)
TIMESTAMP_TYPE = re.compile(r"^timestamp\[us(?:, tz=(UTC))?\]$")
DECIMAL_TYPE = re.compile(r"^decimal128\((\d{1,2}), ?(\d{1,2})\)$")
#: Default file-name globs per format.
DEFAULT_FILE_PATTERNS: dict[str, tuple[str, ...]] = {
    "jsonl": ("*.jsonl", "*.json"),
    "csv": ("*.csv",),
    "parquet": ("*.parquet",),
}


def _check_column_type(name: str) -> str:
    """Validate an Arrow type name without importing pyarrow (DAG files are parsed often)."""
    text = name.strip()
    if text in FILE_COLUMN_TYPES or TIMESTAMP_TYPE.match(text):
        return text
    decimal = DECIMAL_TYPE.match(text)
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        if 1 <= precision <= 38 and scale <= precision:
            return text
        raise ValueError(f"{name!r}: a decimal128 needs 1 <= precision <= 38 and scale <= precision")
    raise ValueError(
        f"{name!r} is not a supported Arrow type; use one of {', '.join(sorted(FILE_COLUMN_TYPES))}, "
        "timestamp[us], timestamp[us, tz=UTC] or decimal128(precision, scale) "
        "(Iceberg keeps timestamps in microseconds, with time zone in UTC)"
    )


class FileSourceSpec(SourceSpecBase):
    """A landing zone: files (JSON lines, CSV, Parquet) that arrive in a directory, each tiered once.

    Relative paths (to ``path``) identify files: a file is tiered once when it is complete, and
    a later file with the same relative path is taken for the same file and never tiered again.
    Files and folders whose name starts with ``_`` or ``.`` are ignored (hidden, temporary).
    """

    columns_may_be_absent: ClassVar[bool] = True

    kind: Literal["files"] = Field(description="a landing zone of files")
    path: str = Field(min_length=1, description="directory of the landing zone: a local path or a URI (s3://…)")
    conn_id: str | None = Field(
        default=None,
        min_length=1,
        description="Airflow connection for object-store credentials: its extra holds the filesystem options",
    )
    format: Literal["jsonl", "csv", "parquet"] = Field(description="format of the files")
    pattern: str | tuple[str, ...] | None = Field(
        default=None, description="glob(s) on the file name; by default *.jsonl and *.json, *.csv or *.parquet"
    )
    recursive: bool = Field(default=True, description="also list sub-folders")
    columns: dict[Identifier, Annotated[str, AfterValidator(_check_column_type)]] | None = Field(
        default=None,
        validate_default=True,
        description="column name -> Arrow type name; required for jsonl and csv, "
        "for parquet the union of the files' schemas when unset",
    )
    settle_seconds: float = Field(
        default=30.0, ge=0, description="a file is complete once its mtime is this old (unless marker_suffix is set)"
    )
    marker_suffix: str | None = Field(
        default=None,
        min_length=1,
        description="a file F is complete when F + suffix exists (then settle_seconds is not used); "
        "marker files are never data",
    )
    on_bad_record: Literal["fail", "side_table"] = Field(
        default="fail",
        description="a malformed record fails the round naming file and line, or goes to the side table "
        "<table>_rejects",
    )
    after_commit: Literal["keep", "delete", "archive"] = Field(
        default="keep", description="what happens to a file once it is in the lake"
    )
    archive_path: str | None = Field(
        default=None,
        min_length=1,
        validate_default=True,
        description="where archived files go, on the landing zone's file system",
    )
    csv_delimiter: str = Field(default=",", min_length=1, max_length=1, description="field separator of CSV files")
    csv_header: bool = Field(default=True, description="the first line of each CSV file names its columns")
    max_files_per_round: int = Field(default=100_000, gt=0, description="files one round tiers at most")
    target_bytes_per_split: int = Field(
        default=128 * 1024 * 1024, gt=0, description="bytes of files per split (one Spark task), bin-packed by size"
    )

    @field_validator("columns")
    @classmethod
    def _columns_declared(cls, value: dict[str, str] | None, info: ValidationInfo) -> dict[str, str] | None:
        file_format = info.data.get("format")
        if value is None and file_format in ("jsonl", "csv"):
            raise ValueError(f"columns are required for format {file_format!r} (column name -> Arrow type)")
        if value is not None and not value:
            raise ValueError("columns must not be empty")
        return value

    @field_validator("pattern")
    @classmethod
    def _patterns_not_empty(cls, value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        if value is not None and (not value or any(not p for p in (value if isinstance(value, tuple) else (value,)))):
            raise ValueError("pattern must not be empty; leave it unset for the format's default")
        return value

    @field_validator("archive_path")
    @classmethod
    def _archive_path_iff_archive(cls, value: str | None, info: ValidationInfo) -> str | None:
        after_commit = info.data.get("after_commit")
        if after_commit == "archive" and value is None:
            raise ValueError("archive_path is required when after_commit is 'archive'")
        if after_commit != "archive" and value is not None:
            raise ValueError("archive_path is only used when after_commit is 'archive'")
        return value

    def column_names(self) -> tuple[str, ...] | None:
        """The declared columns; None when they come from the files (parquet)."""
        return None if self.columns is None else tuple(self.columns)

    @property
    def rejects_to_side_table(self) -> bool:
        return self.on_bad_record == "side_table"

    def describe(self) -> str:
        return f"landing zone {self.path} ({self.format})"

    def file_patterns(self) -> tuple[str, ...]:
        if self.pattern is None:
            return DEFAULT_FILE_PATTERNS[self.format]
        return self.pattern if isinstance(self.pattern, tuple) else (self.pattern,)


#: Every source spec kind by its ``kind`` tag. A new kind is one model here and one entry in
#: ``sources/registry.py``; the spec's union below is derived from this mapping.
SOURCE_SPEC_KINDS: dict[str, type[SourceSpecBase]] = {
    "sql": SqlSourceSpec,
    "postgres_cdc": PostgresCdcSourceSpec,
    "mysql_cdc": MySqlCdcSourceSpec,
    "files": FileSourceSpec,
}
#: The kind of a source spec that names none (specs written before landing zones existed are SQL tables).
DEFAULT_SOURCE_KIND = "sql"


def _source_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return str(value.get("kind", DEFAULT_SOURCE_KIND))
    return str(getattr(value, "kind", DEFAULT_SOURCE_KIND))


if TYPE_CHECKING:
    #: The hot store of a table (statically: whichever kind; use the base's capabilities).
    SourceSpec: TypeAlias = SourceSpecBase
else:
    SourceSpec = Annotated[
        Union[tuple(Annotated[model, Tag(kind)] for kind, model in SOURCE_SPEC_KINDS.items())],  # noqa: UP007
        Discriminator(_source_kind),
    ]
