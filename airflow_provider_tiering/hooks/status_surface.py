"""One write to a status surface of the lake (the status table, the history table) from Airflow: in the catalog of an
``iceberg`` connection, never at the cost of what writes. A write that fails for any reason (the connection missing,
the catalog unreachable, the race lost too often) is logged with the catalog's secrets masked, counted in a metric,
and answered ``False``: the caller's next write catches up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.error_text import describe_error

if TYPE_CHECKING:
    from airflow_provider_tiering.build import CatalogConfig


def write_in_catalog(
    conn_id: str, write: Callable[[CatalogConfig], str], *, failure: str, metric: str, log: logging.Logger
) -> bool:
    """Run ``write`` with the catalog of connection ``conn_id`` and log (info) what it returns; whether it succeeded.
    On an error, log (warning) ``failure`` and the error, and count ``metric``. Never raises."""
    from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook

    secrets: list[str] = []
    try:
        config = IcebergCatalogHook(conn_id).catalog_config()
        secrets = list(config.secrets)
        log.info("%s", write(config))
        return True
    except Exception as exc:  # a status surface: it never fails tiering
        log.warning("%s: %s", failure, describe_error(exc, secrets))
        _count(metric, log)
        return False


def _count(metric: str, log: logging.Logger) -> None:
    try:
        from airflow.sdk.observability.stats import Stats

        Stats.incr(metric)
    except Exception as exc:  # metrics are reporting: never an error of their own
        log.debug("%s was not counted: %s", metric, exc)
