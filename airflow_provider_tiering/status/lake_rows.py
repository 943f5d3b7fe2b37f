"""The status surfaces' tables written into their catalogs' status tables (``sys.lake_tiering_status``), after a
reset or a trigger from the CLI, the REST API or the Tiering page, so SQL users see them without another DAG run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.core.status_rows import StatusRow
from airflow_provider_tiering.hooks.status_table import refresh_status_tables
from airflow_provider_tiering.status.view import TieringStatus


def refresh_lake_rows(statuses: Sequence[TieringStatus]) -> bool:
    """Refresh these tables' rows, each in its catalog's status table; never raises (``hooks/status_table.py``)."""
    now = utcnow()
    rows: dict[str, list[StatusRow]] = defaultdict(list)
    for status in statuses:
        rows[status.catalog_conn_id].append(status.status_row(now))
    return refresh_status_tables(rows)
