"""How many connections a round opens to a real hot store: one kept while it plans (``Source.connected``), one for
its split, one for the shape's check after writing; a kept connection the server dropped is not used again."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.source_specs import SqlSourceSpec
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.hot_tables import COLUMNS, MariaDBHot, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts


def counting(monkeypatch: pytest.MonkeyPatch, drivers: dict[str, Any]) -> list[str]:
    """Count the drivers' connects by driver (the rounds' sources import a driver where they connect)."""
    opened: list[str] = []
    for name, module in drivers.items():
        real: Callable[..., Any] = module.connect

        def connect(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            opened.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "connect", connect)
    return opened


@pytest.fixture(params=["postgres", "mariadb"])
def hot_and_drivers(request: pytest.FixtureRequest) -> Iterator[tuple[Any, dict[str, Any]]]:
    if request.param == "postgres":
        import adbc_driver_postgresql.dbapi as adbc

        yield PostgresHot(request.getfixturevalue("pg_server").dsn), {"psycopg": psycopg, "adbc": adbc}
    else:
        # PyMySQL's connections, made through the module that gives them one TLS context.
        from airflow_provider_tiering.sources.mysql import connections

        yield MariaDBHot(request.getfixturevalue("mariadb_server").url), {"pymysql": connections}


def test_a_round_plans_on_one_connection(
    hot_and_drivers: tuple[Any, dict[str, Any]], catalog_properties, local_writer, tmp_path, monkeypatch
) -> None:
    hot, drivers = hot_and_drivers
    table = f"conns_{hot.kind}"
    hot.create(table)
    spec = TableSpec.parse(
        {
            "name": table,
            "source": {"conn_id": "unused", "table": table, "cursor_column": "id"},
            "lake": {"namespace": "it", "table": table},
        }
    )
    store = JsonFileStateStore(tmp_path / "state.json")
    opened = counting(monkeypatch, drivers)
    for start in (1, 301):
        hot.insert(table, start, 300)
        opened.clear()
        result = round_parts(spec, hot, catalog_properties, writer=local_writer).run(store)
        assert result.outcome == "tiered" and result.metrics.rows == 300
        # Planning (schema, key, identity, watermark, distribution, ...) on one; the check that the columns did
        # not change while the split was read on another; and the split's read, ADBC's on PostgreSQL (connectorx
        # reads MariaDB's). It was eight on PostgreSQL and six on MariaDB, one per query, every one ADBC's on
        # PostgreSQL: the small queries are psycopg's, whose connect costs a tenth of ADBC's.
        expected = ["psycopg", "psycopg", "adbc"] if hot.kind == "postgres" else ["pymysql", "pymysql"]
        assert sorted(opened) == sorted(expected), opened
    assert digest(lake_rows(catalog_properties, ("it", table), COLUMNS)) == digest(hot.rows(table))


def test_a_kept_connection_the_server_dropped_fails_one_query_and_the_next_connects_again(pg_server) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create("conns_dropped")
    source = hot.source(SqlSourceSpec(conn_id="unused", table="conns_dropped", cursor_column="id"))
    with source.connected():
        (pid,) = source._query("SELECT pg_backend_pid()")[0]  # type: ignore[attr-defined]
        assert source._query("SELECT pg_backend_pid()")[0][0] == pid  # type: ignore[attr-defined]
        # A copy for a Spark task carries no connection of the round's.
        copy = pickle.loads(pickle.dumps(source))
        assert copy._connections._conn is None and copy._connections._holding is False
        assert copy._query("SELECT pg_backend_pid()")[0][0] != pid
        with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(SourceError, match="query failed"):
            source._query("SELECT 1")  # type: ignore[attr-defined]
        (again,) = source._query("SELECT pg_backend_pid()")[0]  # type: ignore[attr-defined]
        assert again != pid
    assert source._connections._conn is None  # closed when the round's planning ends
