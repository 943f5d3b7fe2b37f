"""The one place that assembles what a table's round (or maintenance run) needs, from its spec and connections.

Airflow-free: the connections come in resolved (:class:`TableConnections`). In a task, ``hooks/tiering.py``
resolves them from Airflow's connections and calls these functions; tests, benchmarks and scripts write them
directly. No other module constructs sources, lakes, catalogs or writers by hand::

    parts = build_round(spec, TableConnections(
        source=ConnectionInfo.from_uri("postgresql://user:pw@127.0.0.1:5432/db"),
        catalog=CatalogConfig("default", {"type": "sql", "uri": "sqlite:////tmp/c.db", "warehouse": "file:///tmp/w"}),
    ))
    with parts:
        result = parts.run(JsonFileStateStore("state.json"))

Nothing here opens a connection: the source, the catalog and Spark connect on first use, inside the round, so a
failure to reach one is recorded as the table's failed round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import ConnectionNotUsable, InvalidTableSpec
from airflow_provider_tiering.core.maintenance import MaintenanceStatus, MaintenanceStore, run_maintenance
from airflow_provider_tiering.core.ports import AnySource, SplitWriter
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_failure import RetryDelay, no_retry
from airflow_provider_tiering.core.round_result import RoundPhase, RoundResult
from airflow_provider_tiering.core.source_specs import ChangeStreamSpec
from airflow_provider_tiering.core.spec import LakeSpec, TableSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.core.state_store import StateStore
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.change_log import IcebergChangeLog
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.maintainer import IcebergMaintainer
from airflow_provider_tiering.lake.rejects import RejectsTable
from airflow_provider_tiering.sources.change_stream.group_reader import GroupReader, StreamStateStore
from airflow_provider_tiering.sources.registry import build_group_log, build_source
from airflow_provider_tiering.spark.session import SparkSettings
from airflow_provider_tiering.spark.write_job import SparkSplitWriter


@dataclass(frozen=True)
class CatalogConfig:
    """A pyiceberg catalog: its name (a SQL catalog keeps tables per name: keep it for the life of the tables), its
    properties, how messages name it, and the secrets among its properties."""

    name: str
    properties: Mapping[str, str]
    description: str | None = None
    secrets: tuple[str, ...] = ()

    def handle(self) -> CatalogHandle:
        """The catalog, loaded on first use (inside the round)."""
        from airflow_provider_tiering.lake.catalog import load_catalog

        return CatalogHandle(lambda: load_catalog(self.name, self.properties), self.description or repr(self.name))


@dataclass(frozen=True)
class TableConnections:
    """What a table's round needs from outside, resolved: its hot store's connection (None: it needs none), its
    lake's catalog, and where Spark runs (local mode by default)."""

    source: ConnectionInfo | None
    catalog: CatalogConfig
    spark: SparkSettings = field(default_factory=SparkSettings)

    def secrets(self) -> list[str]:
        return [*(self.source.secrets() if self.source else []), *self.catalog.secrets]


@dataclass
class RoundParts:
    """Everything one round of a table runs with. A context manager: leaving it stops the writer's Spark session."""

    spec: TableSpec
    source: AnySource
    lake: IcebergLake
    writer: SplitWriter
    rejects: RejectsTable | None = None
    secrets: Sequence[str] = ()

    def run(
        self,
        state_store: StateStore,
        *,
        secrets: Sequence[str] = (),
        retry_delay: RetryDelay = no_retry,
        observe: Callable[[RoundPhase], None] | None = None,
        clock: Callable[[], datetime] = utcnow,
        announced_epoch: int | None = None,
    ) -> RoundResult:
        """One round of these parts (:func:`~airflow_provider_tiering.core.round.run_round`, whose keywords these
        are; ``secrets`` are masked beside the parts' own)."""
        return run_round(
            self.spec,
            self.source,
            self.lake,
            self.writer,
            state_store,
            secrets=[*self.secrets, *secrets],
            retry_delay=retry_delay,
            observe=observe,
            clock=clock,
            rejects=self.rejects,
            announced_epoch=announced_epoch,
        )

    def stop(self) -> None:
        self.writer.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def spark_for(spec: TableSpec, spark: SparkSettings) -> SparkSettings:
    """Where a table's Spark runs: the connection's settings, with the spec's own conf on top (it wins) and class
    data sharing only if both allow it."""
    return replace(
        spark,
        conf={**spark.conf, **spec.spark.conf},
        class_data_sharing=spark.class_data_sharing and spec.spark.class_data_sharing,
    )


def build_writer(spark: SparkSettings, *, local_single_split: bool = False) -> SparkSplitWriter:
    """The split writer on ``spark``: its session starts on first use (``local_single_split``: a round of one split
    is written in-process, without Spark)."""
    return SparkSplitWriter(spark, local_single_split=local_single_split)


def build_lake(lake: LakeSpec, catalog: CatalogHandle, *, table: str | None = None) -> IcebergLake:
    """The Iceberg table of a spec's lake part (``table``: another table of its namespace, e.g. the side table)."""
    partition_by = lake.partition_by if table is None else ()
    return IcebergLake(catalog, lake.namespace, table or lake.table, partition_by)


def build_round(
    spec: TableSpec,
    connections: TableConnections,
    *,
    source: AnySource | None = None,
    writer: SplitWriter | None = None,
    catalog: CatalogHandle | None = None,
) -> RoundParts:
    """The parts of a round of ``spec``. ``source``, ``writer`` and ``catalog`` replace the ones the connections
    would give (a source built already for a probe; a shared Spark session; a catalog a test instruments).

    Raises:
        ConnectionNotUsable: the source connection is of a type no implementation of the spec's kind takes.
        MissingDependency: the source kind's extra is not installed (the message names it).
    """
    handle = catalog or connections.catalog.handle()
    hot = source if source is not None else build_source(spec.source, connections.source)
    group = spec.source.stream_group()
    if hot.reads_change_log and group is not None:
        hot.bind_change_log(build_change_log(group, handle))
    rejects = None
    if spec.source.rejects_to_side_table:
        rejects = RejectsTable(build_lake(spec.lake, handle, table=spec.lake.rejects_table_name))
    return RoundParts(
        spec=spec,
        source=hot,
        lake=build_lake(spec.lake, handle),
        writer=writer
        or build_writer(spark_for(spec, connections.spark), local_single_split=spec.spark.local_single_split),
        rejects=rejects,
        secrets=list(connections.catalog.secrets),  # the round adds the source's own
    )


def build_change_log(group: StreamGroupSpec, catalog: CatalogHandle) -> IcebergChangeLog:
    """A stream group's change log, in ``catalog`` (its tables' own)."""
    return IcebergChangeLog(catalog, group.change_log.namespace, group.change_log_table)


def build_stream_reader(
    group: StreamGroupSpec,
    tables: Sequence[TableSpec],
    connections: TableConnections,
    store: StreamStateStore,
    *,
    observe: Callable[[str], None] | None = None,
    clock: Callable[[], datetime] = utcnow,
) -> GroupReader:
    """The reader of a stream group: the database's log (for the type of its connection), the change log in its
    tables' catalog, and how each table's lake position is read (for expiry). With no ``tables`` it reads for none:
    the tables the log read leave it. Connects to nothing yet.

    Raises:
        ConnectionNotUsable: the group's connection is of a type no change stream of its tables' kind takes.
        MissingDependency: that kind's extra is not installed (the message names it).
    """
    if connections.source is None:
        raise ConnectionNotUsable(f"stream {group.name!r}: its connection {group.conn_id!r} was not resolved")
    handle = connections.catalog.handle()
    log = build_group_log(group, connections.source)
    members = {log.table_name(_stream_source(spec)): spec.name for spec in tables}
    lakes = {log.table_name(_stream_source(spec)): build_lake(spec.lake, handle) for spec in tables}

    def applied() -> dict[str, int]:
        found: dict[str, int] = {}
        for table, lake in lakes.items():
            commit = lake.committed()
            if commit is not None and commit.end_offsets is not None:
                found[table] = log.position(commit.end_offsets)
        return found

    return GroupReader(
        group, members, log, build_change_log(group, handle), store, applied,
        secrets=connections.secrets(), observe=observe or (lambda phase: None), clock=clock,
    )  # fmt: skip


def _stream_source(spec: TableSpec) -> ChangeStreamSpec:
    source = spec.source
    if not isinstance(source, ChangeStreamSpec):
        raise InvalidTableSpec(f"table {spec.name!r}: field 'source.kind': a stream group reads change streams only")
    return source


@dataclass
class MaintenanceParts:
    """Everything one maintenance run of a table runs with."""

    spec: TableSpec
    maintainer: IcebergMaintainer
    secrets: Sequence[str] = ()

    def run(self, store: MaintenanceStore, **options: Any) -> MaintenanceStatus:
        """One run (:func:`~airflow_provider_tiering.core.maintenance.run_maintenance`; ``options`` are its
        keywords, ``now`` among them)."""
        return run_maintenance(
            self.spec.name,
            self.spec.maintenance,
            self.maintainer,
            store,
            target_file_bytes=self.spec.target_file_bytes,
            secrets=[*self.secrets, *options.pop("secrets", ())],
            **options,
        )


def build_maintenance(
    spec: TableSpec,
    catalog: CatalogConfig,
    spark: SparkSettings | None = None,
    *,
    writer: SplitWriter | None = None,
) -> MaintenanceParts:
    """The parts of a maintenance run of ``spec``: its lake, and the rounds' writer for compaction."""
    settings = spark_for(spec, spark or SparkSettings())
    split_writer = writer or build_writer(settings, local_single_split=spec.spark.local_single_split)
    maintainer = IcebergMaintainer(build_lake(spec.lake, catalog.handle()), split_writer, spec.name)
    return MaintenanceParts(spec, maintainer, catalog.secrets)
