"""The append contract, watched (``core/in_place_changes.py``): counts of rows updated and deleted in place, less the
table's own evictions, through a reset of the hot store's statistics; the alert past the spec's bound; and what the
CLI shows of it and of the last change of shape."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_provider_tiering.cli import status_table
from airflow_provider_tiering.core.in_place_changes import changed_in_place, in_place_alert, watch_in_place_changes
from airflow_provider_tiering.core.shape import InPlaceChanges
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus
from airflow_provider_tiering.core.table_metrics import table_gauges
from airflow_provider_tiering.status import TieringStatus

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _spec(bound: int | None) -> TableSpec:
    source = {"conn_id": "pg", "table": "events", "cursor_column": "id", "changed_rows_alert": bound}
    return TableSpec.parse({"name": "events", "source": source, "lake": {"namespace": "n", "table": "events"}})


def test_the_first_look_counts_nothing_then_each_round_counts_what_changed_since() -> None:
    state = TableState(table="events")
    watch_in_place_changes(state, InPlaceChanges(updated=100, deleted=10), NOW)
    assert changed_in_place(state) == 0  # what happened before the table was watched is unknown
    watch_in_place_changes(state, InPlaceChanges(updated=130, deleted=15), NOW)
    found = state.in_place_changes
    assert found is not None
    assert (found["updated_since_last_round"], found["deleted_since_last_round"]) == (30, 5)
    assert (found["updated_total"], found["deleted_total"]) == (30, 5)
    watch_in_place_changes(state, InPlaceChanges(updated=131, deleted=15), NOW)
    assert state.in_place_changes is not None and state.in_place_changes["updated_total"] == 31
    assert changed_in_place(state) == 1


def test_the_tables_own_evictions_are_not_counted_as_deletes() -> None:
    state = TableState(table="events")
    watch_in_place_changes(state, InPlaceChanges(updated=0, deleted=0), NOW)
    state.evicted_rows_total += 500  # this table's eviction deleted 500 rows
    watch_in_place_changes(state, InPlaceChanges(updated=0, deleted=503), NOW)
    assert state.in_place_changes is not None and state.in_place_changes["deleted_since_last_round"] == 3


def test_counters_reset_by_the_hot_store_count_again_from_zero() -> None:
    state = TableState(table="events")
    watch_in_place_changes(state, InPlaceChanges(updated=900, deleted=90), NOW)
    watch_in_place_changes(state, InPlaceChanges(updated=4, deleted=1), NOW)  # pg_stat_reset, then 4 and 1
    assert state.in_place_changes is not None
    assert (state.in_place_changes["updated_since_last_round"], state.in_place_changes["deleted_since_last_round"]) == (
        4,
        1,
    )


def test_a_store_that_does_not_count_leaves_the_state_alone() -> None:
    state = TableState(table="events")
    watch_in_place_changes(state, None, NOW)
    assert state.in_place_changes is None and changed_in_place(state) == 0


def test_the_alert_fires_past_the_bound_only_and_says_what_to_do() -> None:
    state = TableState(table="events")
    watch_in_place_changes(state, InPlaceChanges(updated=0, deleted=0), NOW)
    watch_in_place_changes(state, InPlaceChanges(updated=8, deleted=2), NOW)
    assert in_place_alert(_spec(10), state) is None  # 10 changed: not past 10
    assert in_place_alert(_spec(None), state) is None  # no bound: shown only
    watch_in_place_changes(state, InPlaceChanges(updated=20, deleted=3), NOW)
    alert = in_place_alert(_spec(10), state)
    assert alert is not None and "12 of its hot rows were updated and 1 deleted" in alert
    assert "merge" in alert and "postgres_cdc" in alert
    gauges = {m.name: m.value for m in table_gauges(state, NOW)}
    assert gauges["rows_changed_in_place"] == 13


def test_the_cli_shows_rows_changed_in_place_and_the_last_change_of_shape() -> None:
    state = TableState(table="events", status=TableStatus.TIERED, mode="append")
    watch_in_place_changes(state, InPlaceChanges(updated=0, deleted=0), NOW)
    watch_in_place_changes(state, InPlaceChanges(updated=30, deleted=5), NOW)
    state.shape_change = {"at": NOW.isoformat(), "changes": "renamed b -> b2", "reload": None}
    record = TieringStatus(1, "tiering/n/events", "tiering://n/events", "n", "events", "d", "events", state)
    text = status_table.render_one(record.to_json(NOW))
    assert "30 updated, 5 deleted since the round before" in text
    assert "tier it by key (merge) or change stream" in text
    assert "renamed b -> b2 (at 2026-11-25T12:00:00+00:00)" in text
    assert "counters" not in str(record.to_json(NOW)["in_place_changes"])
