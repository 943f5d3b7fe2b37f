"""The scratch space of a PostgreSQL-backed benchmark: a work directory and a hot-store DSN."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def postgres_scratch(workdir: str | None, dsn: str | None, prefix: str) -> Iterator[tuple[Path, str]]:
    """Yield ``(workdir, dsn)``: the given directory (kept) or a temp one (removed afterwards), and the given DSN
    or that of a throw-away PostgreSQL server on 127.0.0.1 under it (stopped afterwards)."""
    from testbed.pg_server import PostgresServer

    directory = Path(workdir or tempfile.mkdtemp(prefix=prefix))
    directory.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        if dsn is None:
            server = PostgresServer(directory / "pg").start()
            dsn = server.dsn
        yield directory, dsn
    finally:
        if server is not None:
            server.stop()
        if not workdir:
            shutil.rmtree(directory, ignore_errors=True)


def drop_change_stream(dsn: str, spec: dict[str, Any]) -> None:
    """Drop the replication slot and publication a ``postgres_cdc`` table spec's rounds made: a slot left behind
    keeps WAL on the server for ever (a benchmark run against a shared ``--dsn`` must not leave one)."""
    import psycopg

    from airflow_provider_tiering.core.spec import TableSpec

    source: Any = TableSpec.parse(spec).source
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active",
            (source.slot(),),
        )
        conn.execute(f'DROP PUBLICATION IF EXISTS "{source.publication()}"')
