"""A stream group: the change-stream tables of one hot database read through one log reader.

Each change-stream table (``postgres_cdc``, ``mysql_cdc``) may name a group (``source.stream``). The group's reader
reads the database's log once for all of them (one PostgreSQL slot and publication, one MariaDB binlog dump) and
writes each table's changes to the group's change log, an Iceberg table in the lake; each table's own task then
applies its changes from there. A group is declared once, beside the tables (``build_table_dags(...,
streams=[...])``), and named by its tables; :func:`resolve_streams` puts each group's whole spec into its tables'
specs, so a table's spec says everything its task needs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec_types import Identifier, StrictModel, dotted, validated


class ChangeLogSpec(StrictModel):
    """Where a stream group's change log lives: an Iceberg table of the members' lake catalog."""

    catalog_conn_id: str = Field(
        default="iceberg_default",
        min_length=1,
        description="Airflow connection (type iceberg) of the catalog holding the change log: the members' own",
    )
    namespace: Identifier = Field(description="Iceberg namespace of the change log (created if missing)")
    table: Identifier | None = Field(
        default=None, description="name of the change log in its namespace; unset: <group name>_changes"
    )


class StreamGroupSpec(StrictModel):
    """One hot database's change stream, read once for every table of the group (see the module's description)."""

    name: Identifier = Field(description="the group's name: its reader's DAG is <DAG group>.<name>")
    conn_id: str = Field(min_length=1, description="Airflow connection of the hot database; every member's own")
    change_log: ChangeLogSpec = Field(description="the Iceberg table the reader writes each table's changes to")
    slot_name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]{1,63}$",
        description="PostgreSQL: the group's one logical replication slot; unset: tiering_group_<name> (shortened "
        "to 63 characters with a hash)",
    )
    publication_name: Identifier | None = Field(
        default=None, description="PostgreSQL: the group's one publication, over its tables; unset: the slot's name"
    )
    server_id: int = Field(
        default=0,
        ge=0,
        le=2**32 - 1,
        description="MariaDB: the server id the group's binlog dump reads with (0: as mysqlbinlog reads, never "
        "registered as a replica)",
    )
    read_every_seconds: float = Field(
        default=10.0, gt=0, allow_inf_nan=False, description="how often the reader's DAG runs (its schedule)"
    )
    max_changes_per_read: int = Field(
        default=1_000_000,
        gt=0,
        description="changes one run of the reader writes at most (whole transactions: the first is taken whole)",
    )
    keep_days: float = Field(
        default=0.0,
        ge=0,
        allow_inf_nan=False,
        description="keep each change in the change log this long after its table applied it (0: expire it once "
        "its table applied it)",
    )
    expire_every_seconds: float = Field(
        default=300.0,
        ge=0,
        allow_inf_nan=False,
        description="how often the reader expires applied changes and counts each table's backlog",
    )
    backlog_alert_changes: int = Field(
        default=1_000_000,
        gt=0,
        description="a table with more changes than this waiting in the change log fails its task and the status "
        "DAG's summary with an alert",
    )
    max_retained_wal_mb: float = Field(
        default=4096.0,
        gt=0,
        allow_inf_nan=False,
        description="PostgreSQL: WAL the group's slot may hold back before the reader's task fails with an alert",
    )
    join_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        allow_inf_nan=False,
        description="PostgreSQL: how long the reader waits, when a table joins, for transactions open before it was "
        "added to the publication (whose earlier changes of it the slot would not decode); the join waits for the "
        "next run past that",
    )
    retries: int = Field(default=2, ge=0, le=100, description="Airflow retries of the reader's task")
    retry_delay_seconds: float = Field(default=10.0, ge=0, description="Airflow's retry_delay of the reader's task")

    @property
    def change_log_table(self) -> str:
        return self.change_log.table or f"{self.name}_changes"

    @property
    def asset_name(self) -> str:
        """The Airflow asset of the group: its reader's state lives in its asset state store."""
        return f"tiering-stream/{self.change_log.namespace}/{self.change_log_table}"

    def slot(self) -> str:
        """The group's replication slot (a slot name allows lower-case letters, digits and underscores)."""
        if self.slot_name is not None:
            return self.slot_name
        name = re.sub(r"[^a-z0-9_]", "_", f"tiering_group_{self.name}".lower())
        if len(name) > 63 or name != f"tiering_group_{self.name}":
            name = f"{name[:54]}_{hashlib.sha1(self.name.encode()).hexdigest()[:8]}"
        return name

    def publication(self) -> str:
        return self.publication_name or self.slot()

    @classmethod
    def parse(cls, data: StreamGroupSpec | Mapping[str, Any]) -> StreamGroupSpec:
        """A group from a mapping, raising InvalidTableSpec that names the field."""
        return validated(cls, data, "stream", dotted)


def parse_streams(streams: Iterable[StreamGroupSpec | Mapping[str, Any]]) -> dict[str, StreamGroupSpec]:
    """The declared groups by name; InvalidTableSpec for a bad one or a name declared twice."""
    found: dict[str, StreamGroupSpec] = {}
    for data in streams:
        group = StreamGroupSpec.parse(data)
        if group.name in found:
            raise InvalidTableSpec(f"stream {group.name!r}: field 'name': declared more than once")
        found[group.name] = group
    return found


def resolve_streams(tables: Iterable[Any], streams: Mapping[str, StreamGroupSpec]) -> list[Any]:
    """``tables`` with each ``source.stream`` that names a group (a string) replaced by that group's spec; a table
    that names a group not declared fails with the field named."""
    resolved: list[Any] = []
    for table in tables:
        source = table.get("source") if isinstance(table, Mapping) else None
        named = source.get("stream") if isinstance(source, Mapping) else None
        if isinstance(named, str) and isinstance(source, Mapping):
            group = streams.get(named)
            if group is None:
                known = ", ".join(sorted(streams)) or "none"
                raise InvalidTableSpec(
                    f"table {table.get('name', '<unnamed>')!r}: field 'source.stream': no stream {named!r} is "
                    f"declared (declared: {known}); declare it with build_table_dags(..., streams=[...])"
                )
            table = {**table, "source": {**source, "stream": group}}
        resolved.append(table)
    return resolved
