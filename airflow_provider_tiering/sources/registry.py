"""Every hot-store implementation, and how a table's spec and connection find theirs.

A source spec's ``kind`` picks the entries (``core/source_specs.py``); for ``"sql"``, the Airflow connection's
type picks the dialect. Implementations are imported only when a table needs them, and an entry names the
modules its pip extra installs, so a missing driver fails at once with the extra to install instead of a bare
``ModuleNotFoundError`` in the middle of a round.

Adding a hot store is one module under ``sources/`` and one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.discovery import TableLister
from airflow_provider_tiering.core.errors import ConnectionNotUsable, MissingDependency, missing_modules
from airflow_provider_tiering.core.ports import AnySource
from airflow_provider_tiering.core.source_specs import SourceSpecBase
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec

if TYPE_CHECKING:
    from airflow_provider_tiering.sources.change_stream.group_reader import GroupLog

_PACKAGE = "airflow-provider-tiering"
#: How a source is built: ``Class(spec, connection)``.
SourceFactory = Callable[[SourceSpecBase, ConnectionInfo | None], AnySource]


@dataclass(frozen=True)
class SourceKind:
    """One hot-store implementation: the spec kind it reads, the connection types it takes (empty: it needs no
    connection, and takes any for its options), where it lives, and its pip extra."""

    name: str
    spec_kind: str
    conn_types: frozenset[str]
    #: ``module:Class``; the class is built as ``Class(spec, connection)``.
    target: str
    extra: str | None = None
    #: Importable modules the extra installs.
    requires: tuple[str, ...] = ()
    #: A table of a stream group (``source.stream``), read from the group's change log; and the ``module:Class`` of
    #: the group's reader of the database's log, built as ``Class(group, connection)``.
    grouped: bool = False
    group_log: str | None = None
    #: ``module:Class`` listing a whole database's tables for a declared database, built as ``Class(connection)``.
    lister: str | None = None

    def load(self) -> SourceFactory:
        """The implementation class; MissingDependency names the extra when its drivers are not installed."""
        found: SourceFactory = self._load(self.target)
        return found

    def load_group_log(self) -> Callable[[StreamGroupSpec, ConnectionInfo], GroupLog]:
        """The class of the group's reader of the database's log (MissingDependency as :meth:`load`)."""
        if self.group_log is None:
            raise ConnectionNotUsable(f"{self.name} tables are not read through a stream group")
        found: Callable[[StreamGroupSpec, ConnectionInfo], GroupLog] = self._load(self.group_log)
        return found

    def load_lister(self) -> Callable[[ConnectionInfo], TableLister]:
        """The class that lists a whole database's tables (MissingDependency as :meth:`load`)."""
        if self.lister is None:
            raise ConnectionNotUsable(f"{self.name} databases cannot be declared whole")
        found: Callable[[ConnectionInfo], TableLister] = self._load(self.lister)
        return found

    def modules(self) -> tuple[str, ...]:
        """What a table of this kind imports, when its extra is installed: its drivers, then the modules of its
        implementation, lister and log reader (none when the extra is missing)."""
        if missing_modules(self.requires):
            return ()
        targets = (self.target, self.lister, self.group_log)
        return (*self.requires, *(target.partition(":")[0] for target in targets if target is not None))

    def _load(self, target: str) -> Any:
        missing = missing_modules(self.requires)
        if missing:
            raise MissingDependency(
                f"{self.name} hot tables need {', '.join(missing)}: pip install '{_PACKAGE}[{self.extra}]'"
            )
        module_name, _, class_name = target.partition(":")
        return getattr(importlib.import_module(module_name), class_name)


SOURCE_KINDS: tuple[SourceKind, ...] = (
    SourceKind(
        "postgres",
        "sql",
        frozenset({"postgres", "postgresql"}),
        "airflow_provider_tiering.sources.postgres.cursor_source:PostgresSource",
        extra="postgres",
        requires=("adbc_driver_postgresql", "adbc_driver_manager", "psycopg"),
        lister="airflow_provider_tiering.sources.postgres.table_listing:PostgresTableLister",
    ),
    SourceKind(
        "postgres change stream",
        "postgres_cdc",
        frozenset({"postgres", "postgresql"}),
        "airflow_provider_tiering.sources.postgres.change_stream_source:PostgresCdcSource",
        extra="postgres",
        requires=("adbc_driver_postgresql", "psycopg"),
    ),
    SourceKind(
        "postgres stream group",
        "postgres_cdc",
        frozenset({"postgres", "postgresql"}),
        "airflow_provider_tiering.sources.postgres.group_member:PostgresGroupMember",
        extra="postgres",
        requires=("adbc_driver_postgresql", "psycopg"),
        grouped=True,
        group_log="airflow_provider_tiering.sources.postgres.group_log:PostgresGroupLog",
    ),
    SourceKind(
        "sqlite",
        "sql",
        frozenset({"sqlite"}),
        "airflow_provider_tiering.sources.sqlite:SqliteSource",
        lister="airflow_provider_tiering.sources.sqlite_listing:SqliteTableLister",
    ),
    SourceKind(
        "mysql",
        "sql",
        frozenset({"mysql", "mariadb"}),
        "airflow_provider_tiering.sources.mysql.cursor_source:MySqlSource",
        extra="mysql",
        requires=("connectorx", "pymysql"),
        lister="airflow_provider_tiering.sources.mysql.table_listing:MySqlTableLister",
    ),
    SourceKind(
        "mysql change stream",
        "mysql_cdc",
        frozenset({"mysql", "mariadb"}),
        "airflow_provider_tiering.sources.mysql.change_stream_source:MySqlCdcSource",
        extra="mysql",
        requires=("connectorx", "pymysql"),
    ),
    SourceKind(
        "mysql stream group",
        "mysql_cdc",
        frozenset({"mysql", "mariadb"}),
        "airflow_provider_tiering.sources.mysql.group_member:MySqlGroupMember",
        extra="mysql",
        requires=("connectorx", "pymysql"),
        grouped=True,
        group_log="airflow_provider_tiering.sources.mysql.group_log:MySqlGroupLog",
    ),
    SourceKind("files", "files", frozenset(), "airflow_provider_tiering.sources.files.source:FileSource"),
)


def connection_types(spec_kind: str) -> list[str]:
    """The connection types some implementation of ``spec_kind`` takes, sorted."""
    return sorted(t for kind in SOURCE_KINDS if kind.spec_kind == spec_kind for t in kind.conn_types)


def source_kind(spec: SourceSpecBase, connection: ConnectionInfo | None) -> SourceKind:
    """The implementation for a source spec and its resolved connection (None: the spec names none).

    Raises:
        ConnectionNotUsable: no implementation of the spec's kind takes a connection of that type, or the kind
            needs a connection and none was given.
    """
    grouped = spec.stream_group() is not None
    candidates = [kind for kind in SOURCE_KINDS if kind.spec_kind == spec.kind and kind.grouped == grouped]
    for kind in candidates:
        if not kind.conn_types or (connection is not None and connection.type in kind.conn_types):
            return kind
    what = "no connection" if connection is None else f"type {connection.conn_type!r}"
    raise ConnectionNotUsable(
        f"connection {spec.conn_id!r} has {what}; supported: {', '.join(connection_types(spec.kind))}"
    )


def build_source(spec: SourceSpecBase, connection: ConnectionInfo | None) -> AnySource:
    """The source of a table's hot store (see :func:`source_kind`; MissingDependency when its extra is missing)."""
    return source_kind(spec, connection).load()(spec, connection)


def build_group_log(group: StreamGroupSpec, connection: ConnectionInfo) -> GroupLog:
    """The reader of a stream group's database log, for the type of its connection.

    Raises:
        ConnectionNotUsable: no change stream reads a database of that type through a group.
        MissingDependency: its extra is not installed (the message names it).
    """
    for kind in SOURCE_KINDS:
        if kind.group_log is not None and connection.type in kind.conn_types:
            return kind.load_group_log()(group, connection)
    supported = sorted(t for kind in SOURCE_KINDS if kind.group_log is not None for t in kind.conn_types)
    raise ConnectionNotUsable(
        f"stream {group.name!r}: connection {group.conn_id!r} has type {connection.conn_type!r}; a stream group reads "
        f"{', '.join(supported)}"
    )


def build_table_lister(database: str, connection: ConnectionInfo) -> TableLister:
    """What lists a declared database's tables, for the type of its connection.

    Raises:
        ConnectionNotUsable: a database of that type cannot be declared whole (yet); its tables can be, one by one.
        MissingDependency: its extra is not installed (the message names it).
    """
    for kind in SOURCE_KINDS:
        if kind.lister is not None and connection.type in kind.conn_types:
            return kind.load_lister()(connection)
    supported = sorted(t for kind in SOURCE_KINDS if kind.lister is not None for t in kind.conn_types)
    raise ConnectionNotUsable(
        f"database {database!r}: connection {connection.describe()} has type {connection.conn_type!r}; a whole "
        f"database is declared for {', '.join(supported)} connections: declare the tables of this one one by one"
    )
