"""The lake's status table (``lake/status_table.py``) refreshed from Airflow: in which namespace (Airflow's
``[tiering] status_namespace``, ``sys`` by default; empty turns it off), in each table's own catalog (its ``iceberg``
connection), and never at the cost of what refreshes it. A DAG run's summary, a reset and a trigger each refresh the
rows of their tables; a refresh that fails (the catalog unreachable, the race lost too often) is logged and counted
(``tiering.status_table.refresh_failed``) and the next refresh catches up: it never fails a task or a command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.status_rows import StatusRow
from airflow_provider_tiering.hooks.status_surface import write_in_catalog

if TYPE_CHECKING:
    from airflow_provider_tiering.build import CatalogConfig

log = logging.getLogger(__name__)

SECTION = "tiering"
#: The Airflow option naming the status table's namespace.
NAMESPACE_OPTION = "status_namespace"
DEFAULT_NAMESPACE = "sys"
FAILURE_METRIC = "tiering.status_table.refresh_failed"


def status_namespace() -> str | None:
    """The status table's namespace, from Airflow's configuration (``AIRFLOW__TIERING__STATUS_NAMESPACE``); None when
    it is turned off (set to an empty value)."""
    from airflow.configuration import conf

    found = conf.get(SECTION, NAMESPACE_OPTION, fallback=DEFAULT_NAMESPACE)
    return found.strip() or None


def refresh_status_tables(rows: Mapping[str, Sequence[StatusRow]], *, namespace: str | None = None) -> bool:
    """Refresh each catalog's status table (``rows``: by catalog connection id) with these tables' rows; whether
    every refresh succeeded. Never raises (see the module's description)."""
    namespace = namespace or status_namespace()
    if namespace is None or not rows:
        return True
    results = [_refresh(conn_id, namespace, catalog_rows) for conn_id, catalog_rows in rows.items()]
    return all(results)


def _refresh(conn_id: str, namespace: str, rows: Sequence[StatusRow]) -> bool:
    def write(config: CatalogConfig) -> str:
        from airflow_provider_tiering.lake.status_table import LakeStatusTable

        table = LakeStatusTable(config.handle(), namespace)
        count = table.refresh(rows)
        return f"status table {table.name} of catalog {conn_id}: {len(rows)} tables' rows refreshed ({count} in all)"

    failure = (
        f"status table {namespace}.lake_tiering_status of catalog {conn_id} not refreshed (the next refresh catches up)"
    )
    return write_in_catalog(conn_id, write, failure=failure, metric=FAILURE_METRIC, log=log)
