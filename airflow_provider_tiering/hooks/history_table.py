"""The lake's history table (``lake/history_table.py``) appended to from Airflow: in the status table's namespace
(``[tiering] status_namespace``; empty turns both off), in each table's own catalog (its ``iceberg`` connection),
its rows kept ``[tiering] history_retention_days`` (30 by default; 0 keeps them for ever). A round appends its rows;
a DAG run's summary tidies each catalog's table once (compaction, retention, snapshot expiry): what every append did
before, its cost growing with the rounds a minute. An append or a tidy that fails (the catalog unreachable, the race
lost too often) is logged and counted (``tiering.history_table.append_failed``, ``tiering.history_table.tidy_failed``)
and never fails the task: the table's next round appends what it could not (``core/round_history.py``), the next
summary tidies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.round_history import HistoryRow, HistorySink
from airflow_provider_tiering.hooks.status_surface import write_in_catalog
from airflow_provider_tiering.hooks.status_table import SECTION, status_namespace

if TYPE_CHECKING:
    from airflow_provider_tiering.build import CatalogConfig

log = logging.getLogger(__name__)

#: The Airflow option: how many days a round's row is kept in the history table.
RETENTION_OPTION = "history_retention_days"
DEFAULT_RETENTION_DAYS = 30.0
FAILURE_METRIC = "tiering.history_table.append_failed"
TIDY_FAILURE_METRIC = "tiering.history_table.tidy_failed"


def history_retention() -> timedelta | None:
    """How long rows are kept (``AIRFLOW__TIERING__HISTORY_RETENTION_DAYS``); None: for ever."""
    from airflow.configuration import conf

    days = float(conf.get(SECTION, RETENTION_OPTION, fallback=str(DEFAULT_RETENTION_DAYS)) or 0)
    return timedelta(days=days) if days > 0 else None


def history_sink(catalog_conn_id: str) -> HistorySink | None:
    """What appends a table's rounds to its catalog's history table; None when the status namespace is off."""
    namespace = status_namespace()
    if namespace is None:
        return None

    def append(rows: Sequence[HistoryRow]) -> bool:
        from airflow_provider_tiering.lake.history_table import LakeHistoryTable

        def write(config: CatalogConfig) -> str:
            table = LakeHistoryTable(config.handle(), namespace, history_retention())
            table.append(rows)
            return f"history table {table.name} of catalog {catalog_conn_id}: {len(rows)} round(s) appended"

        failure = (
            f"history table {namespace}.lake_tiering_history of catalog {catalog_conn_id}: {len(rows)} round(s) not "
            "appended (the next round appends them)"
        )
        return write_in_catalog(catalog_conn_id, write, failure=failure, metric=FAILURE_METRIC, log=log)

    return append


def tidy_history_tables(catalog_conn_ids: Iterable[str]) -> bool:
    """Tidy the history table of each catalog (:meth:`LakeHistoryTable.tidy`); whether every tidy succeeded. Never
    raises; nothing when the status namespace is off."""
    namespace = status_namespace()
    if namespace is None:
        return True

    def tidy(conn_id: str) -> bool:
        def write(config: CatalogConfig) -> str:
            from airflow_provider_tiering.lake.history_table import LakeHistoryTable

            table = LakeHistoryTable(config.handle(), namespace, history_retention())
            table.tidy()
            return f"history table {table.name} of catalog {conn_id}: tidied"

        failure = f"history table {namespace}.lake_tiering_history of catalog {conn_id} not tidied (the next run does)"
        return write_in_catalog(conn_id, write, failure=failure, metric=TIDY_FAILURE_METRIC, log=log)

    return all([tidy(conn_id) for conn_id in sorted(set(catalog_conn_ids))])
