"""The append contract, watched: rows of an append table updated or deleted in place behind the lake's back.

An append table's lake keeps the first version of each row by design (a round reads only rows beyond its offsets),
so an update or delete of a tiered row never reaches it. Where the hot store counts updates and deletes
(PostgreSQL's ``pg_stat_user_tables``), every round compares the counters with the last round's: the difference,
less the rows the table's own eviction deleted, is shown in the status, the Tiering page and a metric, and past
``source.changed_rows_alert`` fails the task with an alert that says to tier the table by key instead. The counters
are PostgreSQL's statistics: published by a writing session when it goes idle (at most about once a second), kept
across restarts (reset by ``pg_stat_reset``, then counted again from zero), and counting rolled-back changes too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_provider_tiering.core.shape import InPlaceChanges
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState


def watch_in_place_changes(state: TableState, found: InPlaceChanges | None, now: datetime) -> None:
    """Fold the hot store's counters into ``state.in_place_changes``: the changes since the last round, and in all
    since they were first watched."""
    if found is None:
        return
    previous: dict[str, Any] = state.in_place_changes or {}
    counters = previous.get("counters")
    evicted = state.evicted_rows_total
    updated = deleted = 0
    if counters is not None:
        if found.updated < counters["updated"] or found.deleted < counters["deleted"]:
            counters = {"updated": 0, "deleted": 0, "evicted": evicted}  # the statistics were reset: from zero
        updated = found.updated - counters["updated"]
        deleted = max(0, found.deleted - counters["deleted"] - (evicted - counters.get("evicted", evicted)))
    state.in_place_changes = {
        "updated_since_last_round": updated,
        "deleted_since_last_round": deleted,
        "updated_total": int(previous.get("updated_total", 0)) + updated,
        "deleted_total": int(previous.get("deleted_total", 0)) + deleted,
        "watched_since": previous.get("watched_since") or now.isoformat(),
        "counters": {"updated": found.updated, "deleted": found.deleted, "evicted": evicted},
    }


def changed_in_place(state: TableState | None) -> int:
    """Rows updated or deleted in place since the round before the last one looked (0: none, or not counted)."""
    found = None if state is None else state.in_place_changes
    if not found:
        return 0
    return int(found.get("updated_since_last_round", 0)) + int(found.get("deleted_since_last_round", 0))


def in_place_alert(spec: TableSpec, state: TableState | None) -> str | None:
    """The alert for an append table whose tiered rows were changed in place past ``source.changed_rows_alert``
    since the round before; None when they were not (or no bound is set)."""
    bound = spec.source.changed_rows_bound()
    changed = changed_in_place(state)
    if bound is None or state is None or changed <= bound or state.in_place_changes is None:
        return None
    found = state.in_place_changes
    return (
        f"table {spec.name!r} is tiered by appending, but {found['updated_since_last_round']} of its hot rows were "
        f"updated and {found['deleted_since_last_round']} deleted in place since the round before (bound "
        f"{bound}, source.changed_rows_alert): the lake keeps each row's first version, so it no longer matches the "
        "hot table. Tier the table by key (merge, with an update-time cursor) or from its change stream "
        "(kind postgres_cdc) if its rows change"
    )
