"""How a table's task ends (``core/table_task.py``), over in-memory ports: what the operator maps to Airflow's
skipped, failed-without-retries and succeeded outcomes, with the asset events and metrics it reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import pytest

from airflow_provider_tiering.core.errors import NotRetryable, SourceError
from airflow_provider_tiering.core.ports import Probe, Source
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import StateStore
from airflow_provider_tiering.core.table_task import TableTask, TaskEnd
from testbed.memory_ports import MemoryFiles, MemoryLake, MemoryStateStore, MemoryTable, MemoryWriter

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SPEC = TableSpec.parse(
    {
        "name": "events",
        "source": {"conn_id": "hot", "table": "events", "cursor_column": "version"},
        "lake": {"namespace": "n", "table": "t"},
        "freshness_seconds": 300,
        "max_consecutive_failures": 2,
    }
)


class Interrupted(BaseException):
    """Stands in for Airflow's ``AirflowTaskTimeout``."""


class MemoryRound:
    def __init__(self, hot: MemoryTable, lake: MemoryLake, writer: MemoryWriter, now: datetime) -> None:
        self.hot, self.lake, self.writer, self.now = hot, lake, writer, now
        self.released = False

    def run(self, state_store: StateStore, **options: Any) -> RoundResult:
        return run_round(SPEC, self.hot, self.lake, self.writer, state_store, clock=lambda: self.now, **options)

    def __enter__(self) -> MemoryRound:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.released = True


class Table:
    """One table's hot store, lake and state, and its tasks at ``now``."""

    def __init__(self) -> None:
        self.hot = MemoryTable(password="pw-123")
        self.files = MemoryFiles()
        self.lake = MemoryLake(self.files)
        self.writer = MemoryWriter(self.files)
        self.store = MemoryStateStore()
        self.now = T0
        self.built: list[MemoryRound] = []
        self.broken_connection = False

    # the builder (hooks/tiering.py's TieringHook in Airflow)
    def get_source(self) -> Source[Any, Any]:
        if self.broken_connection:
            raise SourceError("connection 'hot' does not exist")
        return self.hot

    def build_round(self, source: Source[Any, Any] | None = None) -> MemoryRound:
        self.get_source()
        self.built.append(MemoryRound(self.hot, self.lake, self.writer, self.now))
        return self.built[-1]

    def secrets(self) -> list[str]:
        return ["pw-123"]

    def task(self, **options: Any) -> TableTask[MemoryRound]:
        return TableTask(SPEC, self.store, self, lambda exc: timedelta(minutes=1), clock=lambda: self.now, **options)


def test_a_due_table_tiers_and_announces_its_round_then_skips_until_due_again() -> None:
    table = Table()
    table.hot.insert(20)
    tiered: list[RoundResult] = []
    outcome = table.task().run(tiered=lambda parts, result: tiered.append(result))
    assert outcome.end is TaskEnd.SUCCEEDED and len(tiered) == 1 and table.built[0].released
    assert outcome.value == tiered[0].event_extra() and outcome.announcements == (outcome.value,)
    assert {m.name for m in outcome.metrics(T0)} >= {"rounds.tiered", "rows", "consecutive_failures"}

    table.now = T0 + timedelta(seconds=10)
    not_due = table.task().run()
    assert not_due.end is TaskEnd.SKIPPED and "not due until" in not_due.reason and len(table.built) == 1
    assert table.store.load() is not None and table.store.load().status is TableStatus.SCHEDULED  # type: ignore[union-attr]

    table.now = T0 + timedelta(seconds=400)
    nothing = table.task().run()
    assert nothing.end is TaskEnd.SKIPPED and "no row beyond" in nothing.reason and len(table.built) == 1


def test_a_table_recreated_with_nothing_new_fails_its_task_without_retries_instead_of_skipping() -> None:
    """The probe of a due table at rest compares the hot table's identity with the last round's record: a table
    dropped and created again (its new rows, if any, below the lake's offsets) runs its round, which refuses it."""
    table = Table()
    table.hot.insert(20)
    assert table.task().run().end is TaskEnd.SUCCEEDED
    table.hot.recreate()
    table.now = T0 + timedelta(seconds=400)
    outcome = table.task().run()
    assert outcome.end is TaskEnd.FAILED and len(table.built) == 2, outcome.reason
    assert isinstance(outcome.cause, NotRetryable) and "dropped and created again" in outcome.reason
    assert "--adopt-hot-table" in outcome.reason


def test_only_the_tables_a_run_names_are_tiered_due_or_not() -> None:
    table = Table()
    table.hot.insert(5)
    assert table.task(selected=["other"]).run().end is TaskEnd.SKIPPED
    assert table.task(selected=["events"]).run().end is TaskEnd.SUCCEEDED


def test_a_failing_round_raises_for_airflows_retries_and_its_tries_then_fail_on_the_quarantine() -> None:
    table = Table()
    table.hot.insert(5)
    table.lake.unavailable = True
    task = table.task()
    with pytest.raises(Exception, match="catalog is unreachable"):
        task.run()
    assert {m.name for m in task.metrics(None, failed=True)} >= {"rounds.failed", "consecutive_failures"}
    assert "rounds.failed" not in {m.name for m in task.metrics(None)}  # stopped from outside: no round counted
    with pytest.raises(Exception, match="catalog is unreachable"):
        table.task().run()
    quarantined = table.task(retried=True).run()
    assert quarantined.end is TaskEnd.FAILED and "quarantined" in quarantined.reason
    assert table.task(retried=False).run().end is TaskEnd.SKIPPED  # a later run's task skips, with the reason


def test_an_error_no_retry_cures_fails_the_task_without_retries_and_counts_a_failed_round() -> None:
    table = Table()
    table.hot.insert(5)

    def unusable() -> None:
        raise NotRetryable("column 'c' has a type the lake cannot hold")

    table.writer.before_write = unusable
    outcome = table.task().run()
    assert outcome.end is TaskEnd.FAILED and isinstance(outcome.cause, NotRetryable)
    assert "rounds.failed" in {m.name for m in outcome.metrics(T0)}


def test_a_broken_connection_is_recorded_as_the_tables_failed_round_with_its_secret_masked() -> None:
    table = Table()
    table.broken_connection = True
    with pytest.raises(SourceError):
        table.task().run()
    state = table.store.load()
    assert state is not None and state.status is TableStatus.FAILED and state.consecutive_failures == 1


def test_a_round_stopped_from_outside_is_recorded_as_its_interruption_and_its_parts_are_released() -> None:
    table = Table()
    table.hot.insert(5)

    def stopped() -> None:
        raise Interrupted()

    table.writer.before_write = stopped
    task = table.task(interrupted_by=(Interrupted,), interruption=lambda: RuntimeError("ran past its timeout"))
    with pytest.raises(Interrupted):
        task.run()
    state = table.store.load()
    assert (
        state is not None and state.status is TableStatus.FAILED and "ran past its timeout" in (state.last_error or "")
    )
    assert table.built[0].released


def test_a_round_that_only_announces_earlier_commits_succeeds_with_their_events() -> None:
    table = Table()
    table.hot.insert(5)
    first = table.task().run()
    table.store.doc = None  # its state and event lost: the next round finds its commit unannounced
    table.now = T0 + timedelta(seconds=400)
    outcome = table.task(announced_epoch=lambda: 0).run()
    assert outcome.end is TaskEnd.SUCCEEDED and outcome.result is not None
    assert outcome.result.outcome is RoundOutcome.NOTHING_TO_TIER
    assert [a["epoch"] for a in outcome.announcements] == [1] and first.value is not None
    assert outcome.value == outcome.announcements[-1]


class History:
    """A history table that can be made unreachable; the rows it was given, appended or not."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.down = False

    def __call__(self, rows: Any) -> bool:
        if self.down:
            return False
        self.rows.extend(rows)
        return True


def test_each_round_leaves_a_history_row_failed_ones_included_and_rows_not_appended_follow_later() -> None:
    table = Table()
    history = History()
    table.hot.insert(20)
    assert table.task(history=history, dag_id="d", run_id="r1").run().end is TaskEnd.SUCCEEDED
    table.now = T0 + timedelta(seconds=10)
    assert table.task(history=history).run().end is TaskEnd.SKIPPED  # not due: no round, no row
    assert [(r.outcome, r.rows_in, r.tiering_epoch, r.airflow_run_id) for r in history.rows] == [
        ("tiered", 20, 1, "r1")
    ]
    assert history.rows[0].data_age_after_seconds == 0 and history.rows[0].error is None

    history.down = True  # the catalog is unreachable while the next rounds append their rows
    table.lake.unavailable = True
    table.hot.insert(5)
    table.now = T0 + timedelta(seconds=400)
    with pytest.raises(Exception, match="catalog is unreachable"):
        table.task(history=history).run()
    table.lake.unavailable = False
    table.now = T0 + timedelta(seconds=500)
    assert table.task(history=history).run().end is TaskEnd.SUCCEEDED  # a failed round's retry: the round stands
    state = table.store.load()
    assert state is not None and len(state.history_backlog) == 2 and len(history.rows) == 1

    history.down = False
    table.hot.insert(5)
    table.now = T0 + timedelta(seconds=900)
    assert table.task(history=history).run().end is TaskEnd.SUCCEEDED
    found = [(r.outcome, r.rows_in) for r in history.rows]
    assert found == [("tiered", 20), ("failed", None), ("tiered", 5), ("tiered", 5)], found
    failed = history.rows[1]
    assert "catalog is unreachable" in (failed.error or "") and failed.data_age_before_seconds == 400
    state = table.store.load()
    assert state is not None and state.history_backlog == []


def test_a_set_up_that_fails_before_the_probe_or_the_round_is_a_failed_round_in_the_history_too() -> None:
    """Whether the connection breaks while a due table at rest is probed or as its round is built, the state counts
    a failed round: so does the history. A probe that finds nothing new is no round and leaves no row."""
    table = Table()
    history = History()
    table.hot.insert(5)
    assert table.task(history=history).run().end is TaskEnd.SUCCEEDED
    table.now = T0 + timedelta(seconds=400)
    assert table.task(history=history).run().end is TaskEnd.SKIPPED  # probed: nothing new
    assert [r.outcome for r in history.rows] == ["tiered"]

    table.broken_connection = True
    table.now = T0 + timedelta(seconds=800)
    with pytest.raises(SourceError, match="does not exist"):
        table.task(history=history).run()  # a table at rest is probed first: the probe's set-up fails
    state = table.store.load()
    assert state is not None and state.consecutive_failures == 1
    assert [r.outcome for r in history.rows] == ["tiered", "failed"]
    assert "does not exist" in (history.rows[-1].error or "") and history.rows[-1].started_at == table.now


def test_a_probe_stopped_from_outside_is_the_tables_failed_round_too() -> None:
    """A due table's probe that waits past the task's timeout (its hot table locked by another session) is recorded
    as a failed round, with its row in the history, as a round stopped so is: the task's failure is never silent."""
    table = Table()
    history = History()
    table.hot.insert(5)
    assert table.task(history=history).run().end is TaskEnd.SUCCEEDED
    table.now = T0 + timedelta(seconds=400)

    def waits(*args: object) -> Probe:
        raise Interrupted()

    table.hot.probe = waits  # type: ignore[method-assign,assignment]  # waits on a lock until the timeout
    task = table.task(history=history, interrupted_by=(Interrupted,),
                      interruption=lambda: RuntimeError("ran past its timeout"))  # fmt: skip
    with pytest.raises(Interrupted):
        task.run()
    state = table.store.load()
    assert state is not None and state.status is TableStatus.FAILED and state.consecutive_failures == 1
    assert "ran past its timeout" in (state.last_error or "")
    assert [r.outcome for r in history.rows] == ["tiered", "failed"]
