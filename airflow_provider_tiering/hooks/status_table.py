"""The lake's status table (``lake/status_table.py``) refreshed from Airflow: in which namespace (Airflow's
``[tiering] status_namespace``, ``sys`` by default; empty turns it off), in each table's own catalog (its ``iceberg``
connection), and never at the cost of what refreshes it. A DAG run's summary, a reset and a trigger each refresh the
rows of their tables; a refresh that fails (the catalog unreachable, the race lost too often) is logged and counted
(``tiering.status_table.refresh_failed``) and the next refresh catches up: it never fails a task or a command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.status_rows import StatusRow

log = logging.getLogger(__name__)

SECTION = "tiering"
#: The Airflow option naming the status table's namespace.
NAMESPACE_OPTION = "status_namespace"
DEFAULT_NAMESPACE = "sys"


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
    from airflow_provider_tiering.build import CatalogConfig
    from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook
    from airflow_provider_tiering.lake.status_table import LakeStatusTable

    succeeded = True
    for conn_id, catalog_rows in rows.items():
        secrets: list[str] = []
        try:
            config: CatalogConfig = IcebergCatalogHook(conn_id).catalog_config()
            secrets = list(config.secrets)
            table = LakeStatusTable(config.handle(), namespace)
            count = table.refresh(catalog_rows)
            log.info("status table %s of catalog %s: %d tables' rows refreshed (%d in all)", table.name, conn_id,
                     len(catalog_rows), count)  # fmt: skip
        except Exception as exc:  # a status surface: it never fails tiering
            succeeded = False
            log.warning(
                "status table %s.lake_tiering_status of catalog %s not refreshed (the next refresh catches up): %s",
                namespace, conn_id, describe_error(exc, secrets),
            )  # fmt: skip
            _count_failure()
    return succeeded


def _count_failure() -> None:
    try:
        from airflow.sdk.observability.stats import Stats

        Stats.incr("tiering.status_table.refresh_failed")
    except Exception as exc:  # metrics are reporting: never an error of their own
        log.debug("status table refresh: the failure was not counted: %s", exc)
