"""The throw-away PostgreSQL server really is a server with password auth."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from testbed.pg_server import PostgresServer

# pg_server comes from tests/conftest.py (tests.fixtures_pg)


def test_password_login_over_tcp(pg_server: PostgresServer) -> None:
    assert pg_server.host == "127.0.0.1"
    assert pg_server.dsn == (
        f"postgresql://{pg_server.user}:{pg_server.password}@127.0.0.1:{pg_server.port}/{pg_server.dbname}"
    )
    with psycopg.connect(pg_server.dsn) as conn:
        row = conn.execute(
            "select current_user, current_database(), inet_server_addr()::text,"
            " (select rolsuper from pg_roles where rolname = current_user),"
            " current_setting('server_version_num')::int"
        ).fetchone()
    assert row is not None
    user, db, addr, is_super, version = row
    assert (user, db, addr, is_super) == (
        pg_server.user,
        pg_server.dbname,
        "127.0.0.1/32",
        True,
    )
    assert version >= 150000


def test_settings_are_applied(pg_server: PostgresServer) -> None:
    with pg_server.connect() as conn:
        values = dict(
            conn.execute(
                "select name, setting from pg_settings where name = any(%s)",
                (
                    [
                        "fsync",
                        "synchronous_commit",
                        "full_page_writes",
                        "listen_addresses",
                        "max_connections",
                        "password_encryption",
                    ],
                ),
            ).fetchall()
        )
    assert values == {
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "listen_addresses": "127.0.0.1",
        "max_connections": "100",
        "password_encryption": "scram-sha-256",
    }


def test_wrong_password_is_rejected(pg_server: PostgresServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(
            host=pg_server.host,
            port=pg_server.port,
            user=pg_server.user,
            password="definitely-not-the-password",
            dbname=pg_server.dbname,
            connect_timeout=10,
        )


def test_no_password_is_rejected(pg_server: PostgresServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(
            host=pg_server.host,
            port=pg_server.port,
            user=pg_server.user,
            dbname=pg_server.dbname,
            password="",
            passfile="/dev/null",  # no ~/.pgpass rescue
            connect_timeout=10,
        )


def test_restart_keeps_port_and_data_and_stop_is_idempotent(
    tmp_path: Path,
) -> None:
    with PostgresServer(tmp_path / "data", dbname="restart_db") as server:
        port = server.port
        with server.connect(autocommit=True) as conn:
            conn.execute("create table t (x int); insert into t values (42)")
        server.restart()
        assert server.port == port
        with server.connect() as conn:
            assert conn.execute("select x from t").fetchone() == (42,)
        server.stop()
        assert not server.running
        server.stop()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn, connect_timeout=5)
