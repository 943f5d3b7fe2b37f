"""What a table's task does now (``core/decisions.py``), decided from its state document and one probe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_tiering.core.decisions import (
    TaskAction,
    decide_task,
    due_at,
    is_due,
    probe_hot_store,
    record_decision,
)
from airflow_provider_tiering.core.ports import BehindLook, Probe
from airflow_provider_tiering.core.shape import HotIdentity
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import CommittedSnapshot, TableState, TableStatus

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
HOT = HotIdentity(
    table="16384", storage="16390", columns={"id": 1, "b": 2}, types={"id": "bigint not null", "b": "text"}
)
SPEC = TableSpec.parse(
    {
        "name": "t",
        "source": {"conn_id": "hot", "table": "t", "cursor_column": "id"},
        "lake": {"namespace": "n", "table": "t"},
        "freshness_seconds": 300,
    }
)


def tiered_at(when: datetime, status: TableStatus = TableStatus.TIERED) -> TableState:
    return TableState(
        table="t",
        status=status,
        epoch=3,
        last_tiered_time=when,
        committed=CommittedSnapshot(snapshot_id=9, epoch=3, end_offsets={"cursor": 50}),
        hot_shape=HOT.shape_json(),
    )


def test_never_tiered_table_is_due_at_once():
    assert is_due(None, 300, T0) and is_due(TableState(table="t"), 300, T0)


def test_table_is_due_once_its_freshness_interval_has_passed():
    state = tiered_at(T0)
    assert not is_due(state, 300, T0 + timedelta(seconds=299))
    assert is_due(state, 300, T0 + timedelta(seconds=300))
    assert due_at(state, 300) == T0 + timedelta(seconds=300)


def test_failed_or_interrupted_tables_are_due_regardless_of_freshness():
    for status in (TableStatus.FAILED, TableStatus.TIERING, TableStatus.PENDING):
        assert is_due(tiered_at(T0, status), 3600, T0 + timedelta(seconds=1))


def test_a_not_due_check_rests_the_table_in_scheduled():
    state = tiered_at(T0)
    decision = decide_task(SPEC, state, now=T0 + timedelta(seconds=5), selected=None)
    assert decision.action is TaskAction.NOT_DUE and decision.due_at == T0 + timedelta(seconds=300)
    assert "not due until" in decision.reason and decision.committed == {"cursor": 50}
    assert record_decision(state, decision, T0 + timedelta(seconds=5)) is state
    assert state.status is TableStatus.SCHEDULED and state.last_checked_time == T0 + timedelta(seconds=5)
    again = decide_task(SPEC, state, now=T0 + timedelta(seconds=6), selected=None)
    record_decision(state, again, T0 + timedelta(seconds=6))
    assert state.status is TableStatus.SCHEDULED
    assert not is_due(state, 300, T0 + timedelta(seconds=6))


def test_where_the_schedule_is_the_tables_clock_every_run_is_due_but_still_probes_and_respects_quarantine():
    """A run of the table's own DAG a few seconds short of the interval (its schedule's tick came before the last
    round's end plus freshness) is due: it probes the hot store, which says whether there is anything new."""
    state = tiered_at(T0)
    early = T0 + timedelta(seconds=297)
    assert decide_task(SPEC, state, now=early, selected=None).action is TaskAction.NOT_DUE
    decision = decide_task(SPEC, state, now=early, selected=None, every_run_due=True)
    assert decision.action is TaskAction.PROBE and decision.committed == {"cursor": 50}
    state.quarantined_since = T0
    assert decide_task(SPEC, state, now=early, selected=None, every_run_due=True).action is TaskAction.QUARANTINED


def test_a_due_table_at_rest_runs_only_with_new_rows_and_otherwise_settles_checked():
    state = tiered_at(T0)
    later = T0 + timedelta(seconds=400)
    decision = decide_task(SPEC, state, now=later, selected=None)
    assert decision.action is TaskAction.PROBE
    probed_offsets: list[object] = []

    def no_rows(offsets, emptied, shape):
        probed_offsets.append((offsets, emptied, shape))
        return Probe(False, BehindLook())

    nothing = probe_hot_store(no_rows, decision)
    assert probed_offsets == [({"cursor": 50}, None, HOT.shape_json())]
    assert nothing.action is TaskAction.NOTHING_NEW and "no row beyond {'cursor': 50}" in nothing.reason
    assert record_decision(state, nothing, later) is state
    assert state.status is TableStatus.TIERED and state.last_checked_time == later
    assert probe_hot_store(lambda offsets, emptied, shape: Probe(True, BehindLook()), decision).runs


def test_a_probe_keeps_an_emptied_stretch_watched_and_runs_when_rows_arrive_in_it():
    state = tiered_at(T0)
    later = T0 + timedelta(seconds=400)
    decision = decide_task(SPEC, state, now=later, selected=None)
    stretch = {"after": 40, "through": 50}
    emptied = probe_hot_store(lambda offsets, emptied, shape: Probe(False, BehindLook(0, stretch)), decision)
    assert emptied.action is TaskAction.NOTHING_NEW
    assert record_decision(state, emptied, later) is state and state.emptied_range == stretch
    again = decide_task(SPEC, state, now=later + timedelta(seconds=400), selected=None)
    assert again.emptied == stretch
    arrived = probe_hot_store(
        lambda offsets, emptied, shape: Probe(False, BehindLook(3, emptied, "40 < id <= 50")), again
    )
    assert arrived.runs and "3 row(s) behind {'cursor': 50} (40 < id <= 50)" in arrived.reason
    assert record_decision(state, arrived, later) is None  # the round looks again and fails, naming them


def test_a_probe_that_fails_lets_the_round_run_and_tell():
    def broken(offsets, emptied, shape):
        raise OSError("hot store unreachable")

    decision = decide_task(SPEC, None, now=T0, selected=None)
    assert decision.action is TaskAction.PROBE and decision.committed is None
    assert probe_hot_store(broken, decision).runs


def test_a_probe_that_failed_keeps_the_emptied_stretch_watched():
    state = tiered_at(T0)
    state.emptied_range = {"after": 40, "through": 50}
    decision = decide_task(SPEC, state, now=T0 + timedelta(seconds=400), selected=None)

    def broken(offsets, emptied, shape):
        raise OSError("hot store unreachable")

    assert probe_hot_store(broken, decision).emptied == {"after": 40, "through": 50}


@pytest.mark.parametrize(
    ("now", "words"),
    [
        (HotIdentity(table="16999", storage="17000", columns={"id": 1, "b": 2}), "table id 16384 -> 16999"),
        (HotIdentity(table="16384", storage="17000", columns={"id": 1, "b": 2}, types=HOT.types), "storage 16390"),
        (HotIdentity("16384", "16390", {"id": 1, "b2": 2}, types=HOT.types), "renamed b -> b2"),
        (HotIdentity("16384", "16390", {"id": 1}, types={"id": "bigint not null"}), "dropped b"),
        (HotIdentity("16384", "16390", {"id": 1, "b": 2}, types={**HOT.types, "b": "text not null"}),
         "retyped b text -> text not null"),
        (HotIdentity("16384", "16390", {"id": 1, "b": 2, "c": 4}, types=HOT.types), "added c"),
    ],
    ids=["recreated", "truncated", "renamed", "dropped", "not-null", "added"],
)  # fmt: skip
def test_a_hot_table_changed_since_the_last_round_runs_it_with_no_new_row(now, words):
    """The probe's "nothing new" never skips a check the round makes: another table under the same name, new
    storage, other columns or types run the round (which follows the change or refuses it)."""
    decision = decide_task(SPEC, tiered_at(T0), now=T0 + timedelta(seconds=400), selected=None)
    from airflow_provider_tiering.core.shape import shape_change

    changed = shape_change(decision.hot_shape or {}, now)
    assert changed is not None and words in changed
    ran = probe_hot_store(lambda offsets, emptied, shape: Probe(False, changed=shape_change(shape, now)), decision)
    assert ran.runs and words in ran.reason and "follows the change or refuses it" in ran.reason
    assert shape_change(decision.hot_shape or {}, HOT) is None  # the same table, the horizon aside
    assert shape_change(decision.hot_shape or {}, HotIdentity(**{**HOT.__dict__, "horizon": "991"})) is None


def test_a_table_with_lake_rows_and_no_recorded_shape_runs_its_round_to_record_one():
    """A state document older than the record of the hot table's shape cannot tell a reshaped table from the one
    the lake holds: its round runs (and records it) rather than a probe saying "nothing new"."""
    state = tiered_at(T0)
    state.hot_shape = None
    decision = decide_task(SPEC, state, now=T0 + timedelta(seconds=400), selected=None)
    assert decision.runs and "no round recorded its hot table's shape" in decision.reason
    assert decide_task(SPEC, None, now=T0, selected=None).action is TaskAction.PROBE  # no lake rows: a probe


@pytest.mark.parametrize(
    "changes",
    [
        {"status": TableStatus.FAILED, "consecutive_failures": 1},
        {"watermark_candidate": {"offsets": {"cursor": 60}, "blockers": [[1, "x"]]}},
        {"status": TableStatus.TIERING},
    ],
    ids=["failed", "watermark-pending", "mid-round"],
)
def test_a_table_not_at_rest_runs_without_a_probe(changes):
    state = tiered_at(T0 - timedelta(hours=1))
    for key, value in changes.items():
        setattr(state, key, value)
    decision = decide_task(SPEC, state, now=T0, selected=None)
    assert decision.action is TaskAction.RUN
    assert record_decision(state, decision, T0) is None


def test_a_run_naming_tables_runs_them_due_or_not_and_skips_the_others():
    fresh = tiered_at(T0)
    assert decide_task(SPEC, fresh, now=T0, selected=["t"]).runs
    other = decide_task(SPEC, fresh, now=T0, selected=["u"])
    assert other.action is TaskAction.NOT_SELECTED and "not among the tables this run tiers (u)" in other.reason


def test_a_quarantined_table_is_refused_even_when_named():
    state = tiered_at(T0, TableStatus.FAILED)
    state.consecutive_failures, state.quarantined_since, state.last_error = 5, T0, "boom"
    state.quarantine_if_exhausted(5, T0)
    for selected in (None, ["t"]):
        decision = decide_task(SPEC, state, now=T0 + timedelta(days=1), selected=selected)
        assert decision.action is TaskAction.QUARANTINED
        assert "is quarantined since" in decision.reason and "boom" in decision.reason


def test_a_due_key_reconciliation_runs_the_round_without_a_probe():
    """Hard deletes leave no row beyond the offsets for a probe to find: once the reconciliation period has passed,
    a due table at rest runs; within it, it probes; never before its freshness interval."""
    spec = TableSpec.parse(
        {
            "name": "t",
            "source": {"conn_id": "hot", "table": "t", "cursor_column": "version"},
            "lake": {"namespace": "n", "table": "t"},
            "freshness_seconds": 300,
            "merge": {"primary_key": ["id"], "reconcile_keys_every_seconds": 3600},
        }
    )
    state = tiered_at(T0)
    assert decide_task(spec, state, now=T0 + timedelta(seconds=301), selected=None).action is TaskAction.RUN
    state.keys_reconciled_at = T0
    assert decide_task(spec, state, now=T0 + timedelta(seconds=100), selected=None).action is TaskAction.NOT_DUE
    probing = decide_task(spec, state, now=T0 + timedelta(seconds=1800), selected=None)
    assert probing.action is TaskAction.PROBE and probing.reconcile_at == T0 + timedelta(seconds=3600)
    waiting = decide_task(spec, state, now=T0 + timedelta(seconds=100), selected=None)
    assert waiting.reconcile_at == T0 + timedelta(seconds=3600)  # handed to the trigger with the due time
    decision = decide_task(spec, state, now=T0 + timedelta(seconds=3600), selected=None)
    assert decision.action is TaskAction.RUN and "reconciliation" in decision.reason
    assert decide_task(SPEC, tiered_at(T0), now=T0 + timedelta(seconds=3600), selected=None).action is TaskAction.PROBE
    restored = TableState.from_json(state.to_json())
    assert restored.keys_reconciled_at == T0
