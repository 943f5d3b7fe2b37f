"""pytest fixtures for a real PostgreSQL server.

Use from a conftest.py::

    from tests.fixtures_pg import pg_server  # noqa
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg_server import PostgresNotInstalledError, PostgresServer


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
