"""pytest fixtures for real servers: PostgreSQL, MariaDB and an S3-compatible object store, one of each per test
session.

Use from a conftest.py::

    from tests.fixtures_servers import mariadb_server, pg_server, s3_server  # noqa
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.mariadb_server import MariaDBNotInstalledError, MariaDBServer
from testbed.pg_server import PostgresNotInstalledError, PostgresServer
from testbed.s3_server import S3Server

#: The bucket of the S3 server's lake warehouses (each test takes a prefix of its own).
LAKE_BUCKET = "lake"


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One throw-away PostgreSQL server for the whole test session.

    Its data directory lives under pytest's session temp dir (pytest keeps
    the last few; the server log is ``<datadir>/postgres.log``). The server
    is stopped (fast shutdown) at session end. Fails, rather than skips,
    when PostgreSQL is not installed: the integration suite needs it.
    """
    datadir = tmp_path_factory.mktemp("pg") / "data"
    try:
        server = PostgresServer(datadir)
    except PostgresNotInstalledError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """One throw-away MariaDB server for the whole test session (on 127.0.0.1; log in ``<datadir>/mariadbd.log``),
    writing a row binlog its main user may read (change streams). Fails, rather than skips, when MariaDB is not
    installed."""
    datadir = tmp_path_factory.mktemp("mariadb") / "data"
    try:
        server = MariaDBServer(datadir, binlog=True)
    except MariaDBNotInstalledError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One throw-away S3-compatible server (moto's, on 127.0.0.1, requests authenticated) with the bucket
    ``LAKE_BUCKET``, for the whole test session (its log: ``<dir>/moto.log``). Its key may also use moto's AWS Glue
    Data Catalog on the same endpoint (tests of a Glue catalog)."""
    with S3Server(tmp_path_factory.mktemp("s3"), buckets=(LAKE_BUCKET,), actions=("s3:*", "glue:*")) as server:
        yield server
