"""Merge by cursor with key reconciliation (``merge.reconcile_keys_every_seconds``): hard deletes and changes of the
key itself reach the lake, in the same fenced commit as the round's rows.

Real PostgreSQL and SQLite, real pyiceberg; the lake is read back with pyiceberg and with pyarrow's Parquet reader
over the files pyiceberg's scan plans, and compared with the hot table row for row by key, by count and by content
hash (``testbed/mutable_tables.py``), never with code under test.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.decisions import TaskAction, decide_task
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundPhase
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.live_files import live_delete_files
from testbed.crash_round import crash_round
from testbed.lake_check import unreferenced_data_files
from testbed.mutable_tables import (
    MutableHot,
    assert_lake_equals_live_rows_in_files,
    lake_by_key,
    mariadb_mutable,
    postgres_mutable,
    sqlite_mutable,
)
from testbed.rounds import lake_of


def reconciled_spec(name: str, every: float | None = 0, **extra) -> dict:
    merge: dict = {"primary_key": ["tenant", "id"], "soft_delete_column": "deleted_at"}
    if every is not None:
        merge["reconcile_keys_every_seconds"] = every
    return {
        "name": name,
        "source": {"conn_id": "hot", "table": name, "cursor_column": "version"},
        "lake": {"namespace": "it", "table": name},
        "merge": merge,
        **extra,
    }


def make_hot(kind: str, tmp_path, request, name: str, seed: int) -> MutableHot:
    if kind == "sqlite":
        return sqlite_mutable(tmp_path / "hot.db", name, composite_key=True, seed=seed)
    if kind == "mariadb":
        return mariadb_mutable(request.getfixturevalue("mariadb_server").url, name, composite_key=True, seed=seed)
    return postgres_mutable(request.getfixturevalue("pg_server").dsn, name, composite_key=True, seed=seed)


def snapshots_of(catalog_properties, name: str) -> int:
    return len(load_catalog("default", **catalog_properties).load_table(("it", name)).snapshots())


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_random_workload_while_rounds_run_leaves_the_lake_equal_to_the_hot_table(
    kind, tmp_path, catalog_properties, local_writer, spark_writer, request
):
    name = f"reconciled_{kind}"
    hot = make_hot(kind, tmp_path, request, name, seed=21)
    hot.create()
    hot.insert(500)
    spec = TableSpec.parse(reconciled_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier(writer=local_writer, round_spec=spec):
        return run_round(
            round_spec, hot.source(round_spec.source), lake_of(round_spec, catalog_properties), writer, store
        )

    assert tier().metrics.rows == 500
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))

    # Counted exactly: 4 hard deletes, 3 changed keys (their old key leaves, the new one arrives), 1 soft delete.
    live = hot.keys(deleted=False)
    for key in live[:4]:
        hot.hard_delete(key)
    moved = [hot.change_key(key) for key in live[4:7]]
    hot.soft_delete(live[7])
    hot.reinsert(live[8])
    result = tier()
    assert result.outcome is RoundOutcome.TIERED
    assert result.metrics.deleted_rows == 4 + 3 + 1
    assert result.metrics.inserted_rows == 3 and result.metrics.updated_rows == 1  # new keys; the re-inserted one
    assert result.event_extra()["deleted_rows"] == 8
    assert set(moved) <= set(lake_by_key(catalog_properties, ("it", name)))
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))

    # Hard deletes alone: nothing lies beyond the offsets, the round still runs and commits only the removal.
    hot.hard_delete(hot.keys(deleted=False)[0])
    before = snapshots_of(catalog_properties, name)
    keys_only = tier()
    assert keys_only.outcome is RoundOutcome.TIERED and keys_only.metrics.rows == 0
    assert keys_only.metrics.deleted_rows == 1 and keys_only.end_offsets == keys_only.start_offsets
    assert snapshots_of(catalog_properties, name) == before + 1
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))
    # Nothing changed at all: no snapshot, nothing to tier.
    assert tier().outcome is RoundOutcome.NOTHING_TO_TIER
    assert snapshots_of(catalog_properties, name) == before + 1

    # A writer keeps changing the table (every kind of change) while rounds run.
    writer_hot = hot
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_changing():
        try:
            while not stop.is_set():
                writer_hot.random_workload(6)
                time.sleep(0.01)
        except BaseException as exc:  # surfaced by the test below
            errors.append(exc)

    thread = threading.Thread(target=keep_changing, daemon=True)
    thread.start()
    deleted = 0
    try:
        for number in range(8):
            # One round of several splits on Spark (PostgreSQL: many splits in one exported snapshot).
            if number == 4:
                many = TableSpec.parse({**reconciled_spec(name), "target_rows_per_split": 40})
                result = tier(spark_writer, many)
                if kind == "postgres":
                    assert result.metrics is None or result.metrics.splits > 1
            else:
                result = tier()
            if result.metrics is not None:
                deleted += result.metrics.deleted_rows or 0
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert {"hard_delete", "key_change", "reinsert", "soft_delete", "update", "insert"} <= set(hot.counts), hot.counts
    assert deleted > 0
    final = tier()
    assert final.outcome is RoundOutcome.TIERED or final.outcome is RoundOutcome.NOTHING_TO_TIER
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))
    lake = load_catalog("default", **catalog_properties).load_table(("it", name))
    assert all(f.content == 1 for f in live_delete_files(lake))  # position deletes only, never equality deletes
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []
    print(f"{kind}: workload {hot.counts}; {deleted} keys removed from the lake while the writer ran")


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mariadb"])
def test_changes_between_the_watermark_and_the_snapshot_are_neither_lost_nor_deleted_by_mistake(
    kind, tmp_path, catalog_properties, local_writer, request
):
    """Right after the round planned (its watermark fixed), keys are inserted, deleted, moved and re-inserted: the
    round's snapshot sees them, its rows stop at the watermark. The lake loses no key the hot table has and keeps
    none it lost; the next round completes it."""
    name = f"race_{kind}"
    hot = make_hot(kind, tmp_path, request, name, seed=5)
    hot.create()
    hot.insert(200)
    spec = TableSpec.parse(reconciled_spec(name))
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier(**options):
        return run_round(
            spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, store, **options
        )

    tier()
    hot.update(hot.keys()[0])  # the next round has a row to read
    live = hot.keys(deleted=False)
    late: dict[str, object] = {}

    def after_planning(phase: RoundPhase) -> None:
        if phase is RoundPhase.PLANNED and not late:
            late["fresh"] = hot.insert(5)  # beyond the watermark: not in the lake yet, must not be deleted
            hot.hard_delete(live[10])
            late["moved"] = hot.change_key(live[11])
            hot.reinsert(live[12])  # deleted and back, beyond the watermark: the lake keeps its old row for now

    result = tier(observe=after_planning)
    assert result.outcome is RoundOutcome.TIERED and result.end_offsets["cursor"] < hot.version
    lake = lake_by_key(catalog_properties, ("it", name))
    assert live[10] not in lake and live[11] not in lake  # gone from the hot table in the round's snapshot
    assert live[12] in lake
    assert not set(late["fresh"]) & set(lake) and late["moved"] not in lake  # beyond the watermark: next round
    assert result.metrics.deleted_rows == 2
    tier()
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))


def test_reconciliation_period_and_the_due_decision(tmp_path, catalog_properties, local_writer):
    """A period of an hour: the first round reconciles, the next ones (within the hour) do not remove hard deletes;
    once due, the task runs even with nothing beyond the offsets (a probe cannot see deletes)."""
    name = "hourly"
    hot = sqlite_mutable(tmp_path / "hot.db", name, composite_key=True, seed=9)
    hot.create()
    hot.insert(50)
    spec = TableSpec.parse(reconciled_spec(name, every=3600))
    store = JsonFileStateStore(tmp_path / "state.json")
    now = [utcnow()]

    def tier():
        return run_round(
            spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, store, clock=lambda: now[0]
        )

    tier()
    first = store.load().keys_reconciled_at
    assert first is None  # the first round had no lake commit to reconcile with
    tier()  # nothing new; reconciles (nothing to remove) and records it
    assert store.load().keys_reconciled_at == now[0]
    gone = hot.keys()[0]
    hot.hard_delete(gone)
    now[0] += timedelta(minutes=30)
    assert decide_task(spec, store.load(), now=now[0], selected=None).action is TaskAction.PROBE
    assert tier().outcome is RoundOutcome.NOTHING_TO_TIER
    assert gone in lake_by_key(catalog_properties, ("it", name))  # not due yet
    now[0] += timedelta(minutes=31)
    assert decide_task(spec, store.load(), now=now[0], selected=None).action is TaskAction.RUN
    result = tier()
    assert result.outcome is RoundOutcome.TIERED and result.metrics.deleted_rows == 1
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))


PHASES = ["planned", "writing", "written", "committed", "recorded"]


def test_rounds_killed_at_every_phase_and_a_server_restart_leave_the_lake_equal_to_the_table(
    tmp_path, catalog_properties, local_writer, pg_server
):
    name = "reconciled_crashes"
    hot = postgres_mutable(pg_server.dsn, name, composite_key=True, seed=31)
    hot.create()
    hot.insert(400)
    spec_data = reconciled_spec(name)
    spec = TableSpec.parse(spec_data)
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier():
        return run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, store)

    tier()
    for phase in PHASES:
        hot.random_workload(40)
        table = load_catalog("default", **catalog_properties).load_table(("it", name))
        before = table.current_snapshot().snapshot_id
        crashed = crash_round(tmp_path, catalog_properties, phase, spec_data, hot_uri=pg_server.dsn, local_writer=True)
        assert crashed.returncode == -9, f"{phase}: not killed ({crashed.returncode})\n{crashed.stderr[-3000:]}"
        assert f"phase {phase}" in crashed.stdout
        after = load_catalog("default", **catalog_properties).load_table(("it", name)).current_snapshot().snapshot_id
        if phase in ("committed", "recorded"):
            assert after != before
            assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))  # the killed round's commit
        else:
            assert after == before, f"{phase}: the lake changed"
        hot.random_workload(10)
        recovered = tier()
        assert recovered.outcome is RoundOutcome.TIERED, phase
        assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))
        assert unreferenced_data_files(catalog_properties, ("it", name)) == [], phase

    # The server restarts between changes and the next round.
    hot.random_workload(40)
    pg_server.restart()
    hot.random_workload(10)
    assert tier().outcome is RoundOutcome.TIERED
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))
    assert {"hard_delete", "key_change", "reinsert"} <= set(hot.counts), hot.counts
