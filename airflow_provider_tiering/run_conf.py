"""What a DAG run's ``conf`` asks of a tiering DAG."""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering.core.errors import InvalidRunConf


def selected_tables(context: Any) -> list[str] | None:
    """``conf["tables"]`` of the DAG run: the only tables to tier, due or not (None: every table, when due)."""
    dag_run = context.get("dag_run")
    conf = (getattr(dag_run, "conf", None) or {}) if dag_run is not None else {}
    tables = conf.get("tables")
    if tables is None:
        return None
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise InvalidRunConf(f'dag run conf "tables" must be a list of table names, got {tables!r}')
    return tables
