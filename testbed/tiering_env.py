"""What a tiering DAG needs around a real Airflow: a dags folder, an Iceberg catalog and the connections."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any


def pg_conn(server: Any, password: str) -> str:
    """An ``AIRFLOW_CONN_*`` value for the test PostgreSQL server, with the given password."""
    return json.dumps(
        {
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": server.port,
            "login": server.user,
            "password": password,
            "schema": server.dbname,
        }
    )


def embedded_setup(
    directory: Path, pg_server: Any | None, dag_file: str
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """Under ``directory``: a dags folder holding ``dag_file``, an embedded catalog (a SQL catalog on SQLite, a local
    warehouse), and the env with connections ``hot_pg`` (``pg_server``; None: none) and ``iceberg_default``."""
    catalog = {"type": "sql", "uri": f"sqlite:///{directory}/catalog.db", "warehouse": f"file://{directory}/warehouse"}
    dags = directory / "dags"
    dags.mkdir()
    (dags / "tiering_dags.py").write_text(dag_file)
    env = {
        "AIRFLOW_CONN_ICEBERG_DEFAULT": json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog}})
    }
    if pg_server is not None:
        env["AIRFLOW_CONN_HOT_PG"] = pg_conn(pg_server, pg_server.password)
    return dags, catalog, env


def tiering_setup(
    tmp_path: Path, pg_server: Any, dag_file: str, wrong_password: str
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """``embedded_setup``, with a connection ``hot_broken`` too (the same server, ``wrong_password``)."""
    dags, catalog, env = embedded_setup(tmp_path, pg_server, dag_file)
    env["AIRFLOW_CONN_HOT_BROKEN"] = pg_conn(pg_server, wrong_password)
    return dags, catalog, env


def postgres_catalog(pg_server: Any, warehouse: str) -> dict[str, str]:
    """pyiceberg properties of a SQL catalog in a fresh database of the test PostgreSQL server (through psycopg 3 and
    SQLAlchemy's ``postgresql+psycopg`` dialect), its warehouse at ``warehouse``."""
    import uuid

    import psycopg

    name = f"iceberg_catalog_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = f"postgresql+psycopg://{pg_server.user}:{pg_server.password}@127.0.0.1:{pg_server.port}/{name}"
    return {"type": "sql", "uri": uri, "warehouse": warehouse}


def table_function(namespace: str, **defaults: Any) -> str:
    """Source code of ``table(name, conn_id="hot_pg", **options)`` for a test DAG file: the spec of the PostgreSQL
    table ``name`` (cursor ``id``) tiered into ``<namespace>.<name>``, with ``defaults`` under ``options``.
    Lake maintenance is off unless asked for (a task per table: tests of other things need not pay for it)."""
    defaults.setdefault("maintenance", {"enabled": False})
    return textwrap.dedent(
        f"""
        def table(name, conn_id="hot_pg", **options):
            return {{
                "name": name,
                "source": {{"conn_id": conn_id, "table": name, "cursor_column": "id"}},
                "lake": {{"namespace": {namespace!r}, "table": name}},
                **{defaults!r},
                **options,
            }}
        """
    )


def metadata_db(kind: str, pg_server: Any) -> dict[str, dict[str, str]]:
    """``config_overrides`` putting Airflow's metadata DB on ``kind``: "sqlite" (the harness default, nothing to
    override) or "postgres" (a fresh database on the test PostgreSQL server, through psycopg 3)."""
    if kind == "sqlite":
        return {}
    import uuid

    import psycopg

    name = f"airflow_meta_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://{pg_server.user}:{pg_server.password}@127.0.0.1:{pg_server.port}/{name}"
    # psycopg 3 serves Airflow's async engine too (its default async driver, asyncpg, is not installed).
    return {"database": {"sql_alchemy_conn": url, "sql_alchemy_conn_async": url}}


def airflow_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an ``airflow`` command (or a DagBag read) in a fresh Airflow home under ``tmp_path``,
    reading DAGs from ``tmp_path / "dags"``: this process's environment without its Airflow and pytest settings."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        }
    )
    return env
