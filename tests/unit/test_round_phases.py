"""The round's protocol over in-memory ports (``testbed/memory_ports.py``): a crash at every phase, fencing, failure
recording, the quarantine, recovery and cleanup, in milliseconds. The same protocol runs against PostgreSQL, Spark
and Iceberg in the integration tests; these pin its logic down one phase at a time.

A crash is a :class:`Crash` raised by the round's observer at a phase: a ``BaseException``, so it passes the round's
failure path untouched and leaves the state document, the files and the lake as a killed process would."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import (
    FencedError,
    NotRetryable,
    QuarantinedError,
    ShapeChangedDuringRound,
    SourceError,
    TableTruncated,
    UnsupportedColumnType,
)
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_failure import RetryDelay, no_retry
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundPhase, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus
from testbed.memory_ports import MemoryFiles, MemoryLake, MemoryPlan, MemoryStateStore, MemoryTable, MemoryWriter

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def _spec(**options: object) -> TableSpec:
    return TableSpec.parse(
        {
            "name": "events",
            "source": {"conn_id": "hot", "table": "events", "cursor_column": "version"},
            "lake": {"namespace": "n", "table": "t"},
            "target_rows_per_split": 40,
            **options,
        }
    )


class Crash(BaseException):
    """The round's process killed at a phase."""


class Parts:
    """One table's hot store, writer, lake and state store, shared by its rounds."""

    def __init__(self, **options: object) -> None:
        self.spec = _spec(**options)
        self.hot = MemoryTable(password="s3cret-pw")
        self.files = MemoryFiles()
        self.writer = MemoryWriter(self.files)
        self.lake = MemoryLake(self.files)
        self.store = MemoryStateStore()

    def round(
        self,
        *,
        crash_at: RoundPhase | None = None,
        hot: MemoryTable | None = None,
        retry_delay: RetryDelay = no_retry,
    ) -> RoundResult:
        def observe(phase: RoundPhase) -> None:
            if phase is crash_at:
                raise Crash(phase)

        source = hot or self.hot
        return run_round(
            self.spec, source, self.lake, self.writer, self.store, observe=observe, clock=lambda: NOW,
            retry_delay=retry_delay,
        )  # fmt: skip

    def state(self) -> TableState:
        found = self.store.load()
        assert found is not None
        return found

    def assert_lake_holds_hot_rows_once(self) -> None:
        """Every row the hot table holds is in the lake exactly once (an append table: no row is ever changed)."""
        lake = Counter(map(tuple, (r.values() for r in self.lake.rows().to_pylist())))
        hot = Counter(map(tuple, (r.values() for r in self.hot.as_table().to_pylist())))
        assert lake == hot, f"lost {hot - lake}, duplicated or extra {lake - hot}"


def test_a_round_tiers_every_row_once_in_splits_and_records_it() -> None:
    parts = Parts()
    parts.hot.insert(100)
    result = parts.round()
    assert result.outcome is RoundOutcome.TIERED and result.end_offsets == {"cursor": 100}
    assert result.metrics is not None and (result.metrics.rows, result.metrics.splits) == (100, 3)
    parts.assert_lake_holds_hot_rows_once()
    state = parts.state()
    assert state.status is TableStatus.TIERED and state.epoch == 1 and state.committed is not None
    assert state.committed.end_offsets == {"cursor": 100} and state.caught_up_time == NOW
    assert parts.lake.unreferenced() == []


def test_a_round_with_nothing_to_tier_starts_no_writer_and_keeps_the_epoch() -> None:
    parts = Parts()
    parts.hot.insert(10)
    parts.round()
    parts.writer.started, jobs = False, parts.writer.jobs
    result = parts.round()
    assert result.outcome is RoundOutcome.NOTHING_TO_TIER and result.end_offsets == {"cursor": 10}
    assert not parts.writer.started and parts.writer.jobs == jobs
    assert parts.state().epoch == 1 and parts.state().status is TableStatus.TIERED


@pytest.mark.parametrize(
    "phase",
    [
        RoundPhase.PLANNED,
        RoundPhase.ACQUIRED,
        RoundPhase.WRITING,
        RoundPhase.WRITTEN,
        RoundPhase.COMMITTED,
        RoundPhase.RECORDED,
        RoundPhase.CLEANED,
    ],
)
def test_a_crash_at_any_phase_loses_and_duplicates_nothing(phase: RoundPhase) -> None:
    """Killed at ``phase``, with Spark's dead task attempts beside its files; rows keep arriving; the next round
    tiers every row exactly once, its epoch above the dead attempt's, and once it committed no file of the dead
    attempt is left unreferenced."""
    parts = Parts()
    parts.writer.dead_attempts = True
    parts.hot.insert(100)
    with pytest.raises(Crash):
        parts.round(crash_at=phase)
    after_crash = parts.store.load() or TableState(table="events")  # a crash before the first save leaves none
    committed_before = phase in (RoundPhase.COMMITTED, RoundPhase.RECORDED, RoundPhase.CLEANED)
    assert (parts.lake.committed() is not None) is committed_before
    parts.hot.insert(50)
    result = parts.round()
    parts.assert_lake_holds_hot_rows_once()
    state = parts.state()
    assert result.outcome is RoundOutcome.TIERED and state.status is TableStatus.TIERED
    assert result.epoch > after_crash.epoch
    assert result.start_offsets == ({"cursor": 100} if committed_before else None)
    assert parts.lake.unreferenced() == [], "the dead attempt's files were not cleaned"
    if phase is RoundPhase.COMMITTED:  # committed, never recorded: the state was repaired from the lake
        assert after_crash.status is TableStatus.TIERING
        assert state.last_error is None or "ended without recording" not in state.last_error
    if phase in (RoundPhase.ACQUIRED, RoundPhase.WRITING, RoundPhase.WRITTEN):
        assert state.last_error is not None and "ended without recording its outcome" in state.last_error


def test_a_zombie_attempt_is_fenced_and_leaves_the_state_and_the_lake_to_the_winner() -> None:
    """A round pauses after planning (a long GC, a lost heartbeat) while a newer one tiers the same rows and more:
    the old one's commit is refused, its files are deleted, and the state keeps the winner's commit."""
    parts = Parts()
    parts.hot.insert(60)
    winner: list[RoundResult] = []

    def rival_round() -> None:
        parts.writer.before_write = None
        parts.hot.insert(20)
        winner.append(parts.round(hot=parts.hot.session()))

    parts.writer.before_write = rival_round
    with pytest.raises(FencedError):
        parts.round()
    assert winner[0].outcome is RoundOutcome.TIERED and winner[0].end_offsets == {"cursor": 80}
    parts.assert_lake_holds_hot_rows_once()
    state = parts.state()
    assert state.status is TableStatus.TIERED and state.epoch == winner[0].epoch == 2
    assert state.committed is not None and state.committed.snapshot_id == winner[0].snapshot_id
    assert parts.lake.unreferenced() == []


def test_a_failed_write_is_recorded_with_its_secret_masked_and_the_next_round_cleans_it() -> None:
    parts = Parts()
    parts.hot.insert(100)
    parts.writer.fail_split = 1

    def failing_with_password() -> None:
        raise SourceError("connection to memory://user:s3cret-pw@host failed")

    parts.writer.before_write = failing_with_password
    with pytest.raises(SourceError):
        parts.round(retry_delay=lambda exc: timedelta(minutes=5))
    state = parts.state()
    assert state.status is TableStatus.FAILED and state.consecutive_failures == 1
    assert state.last_error is not None and "s3cret-pw" not in state.last_error and "***" in state.last_error
    assert state.next_retry_at == NOW + timedelta(minutes=5)
    parts.writer.before_write = None
    with pytest.raises(SourceError, match="split 1"):
        parts.round()
    assert parts.files.under(parts.lake.location), "the failed attempt wrote files"
    parts.writer.fail_split = None
    result = parts.round()
    assert result.outcome is RoundOutcome.TIERED and parts.state().consecutive_failures == 0
    assert parts.state().last_error is not None  # kept after the success, with its time: a flapping table shows
    parts.assert_lake_holds_hot_rows_once()
    assert parts.lake.unreferenced() == []


def test_failures_quarantine_the_table_and_a_quarantined_round_touches_nothing() -> None:
    parts = Parts(max_consecutive_failures=2)
    parts.hot.insert(5)
    parts.lake.unavailable = True
    for _ in range(2):
        with pytest.raises(Exception, match="catalog is unreachable"):
            parts.round()
    state = parts.state()
    assert state.quarantined_since == NOW and state.next_retry_at is None
    saves = parts.store.saves
    parts.lake.unavailable = False
    with pytest.raises(QuarantinedError):
        parts.round()
    assert parts.store.saves == saves and parts.lake.committed() is None


def test_a_not_retryable_error_quarantines_at_once() -> None:
    parts = Parts()
    parts.hot.insert(5)

    class Unusable(NotRetryable):
        pass

    def unusable() -> None:
        raise Unusable("column x has a type the lake cannot hold")

    parts.writer.before_write = unusable
    with pytest.raises(Unusable):
        parts.round(retry_delay=lambda exc: timedelta(minutes=5))
    state = parts.state()
    assert state.status is TableStatus.FAILED and state.quarantined_since == NOW and state.next_retry_at is None


def test_a_value_that_does_not_convert_because_a_column_changed_under_the_read_is_retried_not_quarantined() -> None:
    """An ALTER that retypes a column while the round reads makes a value fail to convert to the type the round
    planned with: the error is the change of shape (retryable, the next round follows it), never the data's
    (non-retryable, quarantined at once)."""
    parts = Parts()
    parts.hot.insert(5)

    class ReshapedUnderTheRead(MemoryTable):
        def check_shape_unchanged(self) -> None:
            raise ShapeChangedDuringRound("its columns changed while the round read it")

    hot = ReshapedUnderTheRead.__new__(ReshapedUnderTheRead)
    hot.__dict__.update(parts.hot.__dict__)

    def unconvertible() -> None:
        raise UnsupportedColumnType("column 'q': cannot convert string to int64")

    parts.writer.before_write = unconvertible
    with pytest.raises(ShapeChangedDuringRound) as raised:
        parts.round(hot=hot, retry_delay=lambda exc: timedelta(minutes=5))
    assert isinstance(raised.value.__context__, UnsupportedColumnType)
    state = parts.state()
    assert state.quarantined_since is None and state.next_retry_at is not None
    with pytest.raises(UnsupportedColumnType):  # the same error with the columns unchanged is the data's
        parts.round(retry_delay=lambda exc: timedelta(minutes=5))
    assert parts.state().quarantined_since == NOW


def test_a_lost_state_document_is_rebuilt_from_the_lake_without_tiering_again() -> None:
    parts = Parts()
    parts.hot.insert(30)
    first = parts.round()
    parts.store.doc = None
    result = parts.round()
    assert result.outcome is RoundOutcome.NOTHING_TO_TIER
    state = parts.state()
    assert state.committed is not None and state.committed.snapshot_id == first.snapshot_id and state.epoch == 1
    parts.assert_lake_holds_hot_rows_once()


def test_the_row_cap_leaves_a_backlog_for_the_next_rounds() -> None:
    parts = Parts(max_rows_per_round=40)
    parts.hot.insert(100)
    backlogs = []
    for _ in range(3):
        result = parts.round()
        assert result.metrics is not None
        backlogs.append(result.metrics.backlog_rows)
    assert backlogs == [60, 20, 0]
    parts.assert_lake_holds_hot_rows_once()


class StreamedMemoryTable(MemoryTable):
    """A memory table behind a replication slot: the WAL the slot retains is read on every look, the WAL a capped
    round left for later rounds only by the round's plan (as ``PostgresCdcSource.stream_status`` tells them)."""

    retained = 0
    left: int | None = None

    def _begin_round(self) -> None:
        self.left = None

    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> MemoryPlan:
        plan = super().plan(start, end, max_rows)
        self.left = plan.backlog * 100
        return plan

    def stream_status(self) -> JsonObject:
        found: JsonObject = {"slot": "tiering_events", "retained_wal_bytes": self.retained}
        if self.left is not None:
            found["backlog_wal_bytes"] = self.left
        return found


def test_a_round_failing_before_its_plan_keeps_the_backlog_the_last_plan_measured() -> None:
    """The status shows a capped table's backlog until a plan measures it again: a round that failed before
    planning (the hot store unreachable) does not show it as gone, and shows the slot's retained WAL as it is now."""
    parts = Parts(max_rows_per_round=40)
    parts.hot = StreamedMemoryTable()
    parts.hot.insert(100)
    parts.round()
    slot = {"slot": "tiering_events"}
    assert parts.state().change_stream == {**slot, "retained_wal_bytes": 0, "backlog_wal_bytes": 6000}
    parts.hot.unreachable, parts.hot.retained = True, 9000
    with pytest.raises(SourceError):
        parts.round()
    assert parts.state().change_stream == {**slot, "retained_wal_bytes": 9000, "backlog_wal_bytes": 6000}
    parts.hot.unreachable = False
    parts.round()
    parts.round()
    assert parts.state().change_stream == {**slot, "retained_wal_bytes": 9000, "backlog_wal_bytes": 0}


def test_rows_held_back_by_an_open_transaction_wait_and_show_their_blocker() -> None:
    parts = Parts()
    parts.hot.insert(10)
    parts.hot.hold_from = 6
    result = parts.round()
    assert result.end_offsets == {"cursor": 5} and result.blockers and result.blockers[0]["pid"] == 4242
    assert parts.state().caught_up_time is None
    parts.hot.hold_from = None
    assert parts.round().end_offsets == {"cursor": 10}
    parts.assert_lake_holds_hot_rows_once()


def test_a_merge_round_keeps_the_latest_version_of_each_key_and_reconciles_deletes() -> None:
    parts = Parts(merge={"primary_key": ["id"]})
    ids = parts.hot.insert(50)
    parts.round()
    parts.hot.update(ids[:10], "changed")
    parts.hot.delete(ids[40:])
    parts.hot.insert(5)
    result = parts.round()
    assert result.metrics is not None and (result.metrics.inserted_rows, result.metrics.updated_rows) == (5, 10)
    assert parts.lake.rows().num_rows == 55  # the hard deletes wait for a reconciliation
    parts.store.doc = {**parts.state().to_json(), "keys_reconciled_at": None}
    parts.spec = _spec(merge={"primary_key": ["id"], "reconcile_keys_every_seconds": 60})
    parts.hot.bound_keys.clear()
    result = parts.round()
    # The key is bound once (the source learns the round reconciles by reading its keys in its snapshot).
    assert [key.columns for key in parts.hot.bound_keys] == [("id",)]
    assert result.outcome is RoundOutcome.TIERED and result.metrics is not None
    assert result.metrics.deleted_rows == 10 and result.end_offsets == result.start_offsets
    assert sorted(parts.lake.rows().to_pylist(), key=lambda r: r["id"]) == parts.hot.as_table().to_pylist()
    assert parts.state().keys_reconciled_at == NOW


def test_the_splits_are_read_in_the_rounds_snapshot_and_a_later_reconciliation_removes_what_it_deleted() -> None:
    """The writer reads the splits through what the source's snapshot yields (``RoundRead``): rows deleted while
    the round writes are still read by it, as a PostgreSQL round's imported snapshot reads them, and the next round's
    reconciliation removes them from the lake."""
    parts = Parts(merge={"primary_key": ["id"]})
    ids = parts.hot.insert(30)
    parts.round()
    parts.hot.update(ids[:5], "changed")
    parts.writer.before_write = lambda: parts.hot.delete(ids[:5])
    result = parts.round()
    assert result.metrics is not None and result.metrics.updated_rows == 5
    lake = {row["id"]: row["value"] for row in parts.lake.rows().to_pylist()}
    assert [lake[i] for i in ids[:5]] == ["changed"] * 5
    parts.writer.before_write = None
    parts.store.doc = {**parts.state().to_json(), "keys_reconciled_at": None}
    parts.spec = _spec(merge={"primary_key": ["id"], "reconcile_keys_every_seconds": 60})
    result = parts.round()
    assert result.metrics is not None and result.metrics.deleted_rows == 5
    assert sorted(parts.lake.rows().to_pylist(), key=lambda r: r["id"]) == parts.hot.as_table().to_pylist()


def test_a_truncate_found_while_planning_keeps_the_hot_tables_identity_for_an_adopting_reset() -> None:
    """A change stream finds a TRUNCATE when it plans: the round fails, quarantined, and keeps the hot table's
    identity so that ``reset --adopt-hot-table`` can continue with the table as it is."""
    parts = Parts()
    parts.hot.insert(10)
    parts.round()
    parts.hot.insert(5)
    parts.hot.truncated = True
    with pytest.raises(TableTruncated):
        parts.round()
    state = parts.state()
    assert state.replaced_hot_table is not None and state.replaced_hot_table["table"] == "16384"
    assert state.quarantined_since == NOW
