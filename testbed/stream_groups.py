"""A stream group of changing tables, its reader and its tables' rounds, run without Airflow (the package's builder
fed with explicit connections), on PostgreSQL (``postgres_cdc``) or MariaDB (``mysql_cdc``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from airflow_provider_tiering.build import build_stream_reader
from airflow_provider_tiering.core.round_result import RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore, JsonFileStreamStateStore
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_reader import GroupReader, ReaderRun
from testbed.changing_table import ChangingMariaDBTable, ChangingTable, assert_lake_equals_hot
from testbed.rounds import connections, round_parts

NAMESPACE = "sg"


def group_spec(name: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "conn_id": "hot", "change_log": {"namespace": NAMESPACE}, **options}


def member_spec(table: str, group: dict[str, Any], kind: str = "postgres_cdc", **options: Any) -> TableSpec:
    return TableSpec.parse(
        {
            "name": table,
            "source": {"kind": kind, "conn_id": "hot", "table": table, "stream": group},
            "lake": {"namespace": NAMESPACE, "table": table},
            **options,
        }
    )


class Group:
    """A stream group of changing tables on ``server`` (a PostgreSQL or MariaDB test server), its state documents
    under ``tmp_path``, its lakes in ``catalog``; rounds written by ``writer``."""

    def __init__(self, server: Any, tmp_path: Path, catalog: dict[str, str], name: str, tables: int,
                 writer: Any, *, mariadb: bool = False, rows: int = 20, **options: Any) -> None:  # fmt: skip
        self.server, self.tmp_path, self.catalog, self.writer = server, tmp_path, catalog, writer
        self.mariadb = mariadb
        self.kind = "mysql_cdc" if mariadb else "postgres_cdc"
        self.group = group_spec(name, **options)
        self.hot: dict[str, ChangingTable | ChangingMariaDBTable] = {}
        for number in range(tables):
            self.add(f"{name}_t{number:02d}", rows=rows + number)

    def new_table(self, table: str, seed: int) -> ChangingTable | ChangingMariaDBTable:
        """A session on ``table`` (not created)."""
        if self.mariadb:
            return ChangingMariaDBTable(self.server.url, table, seed=seed)
        return ChangingTable(self.server.dsn, table, seed=seed)

    def add(self, table: str, rows: int) -> ChangingTable | ChangingMariaDBTable:
        hot = self.new_table(table, len(self.hot) + 1)
        hot.create()
        hot.insert(rows)
        self.hot[table] = hot
        return hot

    def qualified(self, tables: Any) -> set[str]:
        schema = self.server.database if self.mariadb else "public"
        return {f"{schema}.{table}" for table in tables}

    def spec(self, table: str) -> TableSpec:
        return member_spec(table, self.group, self.kind)

    def reader(self) -> GroupReader:
        return build_stream_reader(
            StreamGroupSpec.parse(self.group), [self.spec(t) for t in self.hot],
            connections(self.connection(), self.catalog), self.store(),
        )  # fmt: skip

    def store(self) -> JsonFileStreamStateStore:
        return JsonFileStreamStateStore(self.tmp_path / f"{self.group['name']}.json")

    def connection(self) -> Any:
        return next(iter(self.hot.values())).connection()

    def read(self) -> ReaderRun:
        return self.reader().run()

    def tier(self, table: str) -> RoundResult:
        with round_parts(self.spec(table), self.hot[table], self.catalog, writer=self.writer) as parts:
            return parts.run(JsonFileStateStore(self.tmp_path / f"{table}.json"))

    def tier_all(self) -> dict[str, RoundResult]:
        return {table: self.tier(table) for table in self.hot}

    def check(self, tables: Any = None, *, duckdb: bool = False) -> None:
        for table in self.hot if tables is None else tables:
            assert_lake_equals_hot(self.hot[table], self.catalog, (NAMESPACE, table), duckdb=duckdb)

    def close(self) -> None:
        for hot in self.hot.values():
            hot.close()
        if not self.mariadb:  # the group's slot, and any a table's own stream left (slots keep WAL)
            slots = [StreamGroupSpec.parse(self.group).slot(), *(f"tiering_public_{t}" for t in self.hot)]
            with psycopg.connect(self.server.dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ANY(%s) "
                    "AND NOT active",
                    (slots,),
                )
