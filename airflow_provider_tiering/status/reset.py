"""Lifting a tiered table's quarantine (and continuing with a hot table a round refused as another one)."""

from __future__ import annotations

import json
from typing import Any

from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.status.assets import ReadableFilter
from airflow_provider_tiering.status.lake_rows import refresh_lake_rows
from airflow_provider_tiering.status.reads import get_tiering_status, session_scope


def reset_table(
    table: str,
    *,
    adopt_hot_table: bool = False,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> TableState:
    """Lift the quarantine of a tiered table so its next round runs again; ``table`` as for
    :func:`get_tiering_status` (an ambiguous name raises AmbiguousTable and resets nothing). With
    ``adopt_hot_table``, the hot table a round refused as another one (dropped and created again, truncated and
    reloaded) is tiered from its start, the lake's rows kept (ValueError when no round refused one).

    Writes the state document through Airflow's state backend, then the table's row of its catalog's status table
    (``sys.lake_tiering_status``; a failure there is logged, never raised). Raises TableNotFound when no tiered
    table of that name has a state document.
    """
    # Through the configured backend, as the execution API writes the tasks' asset state (Airflow 3.3's own
    # state-store REST endpoint writes to the default backend's table whatever is configured).
    from airflow.state import AssetScope, get_state_backend

    with session_scope(session) as s:
        found = get_tiering_status(table, readable=readable, session=s)
        state = found.state
        state.reset(utcnow(), adopt_hot_table=adopt_hot_table)
        scope = AssetScope(asset_id=found.asset_id)
        get_state_backend().set(scope, found.state_key, json.dumps(state.to_json()), session=s)
    refresh_lake_rows([found])  # the reset shows in SQL at once
    return state
