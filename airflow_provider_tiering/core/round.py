"""One tiering round of one table: plan -> acquire -> write -> fenced commit -> record -> clean -> evict.

This is the exactly-once protocol (``docs/design.md``, "The round"). The lake's latest tiering snapshot is the
only source of truth for what has been tiered: every round plans from it, a state document that lags behind it
(a crash between commit and record) is repaired from it, and a commit is fenced by it.

:func:`run_round` reads as the protocol: each phase is a function over the round's immutable context
(:class:`RoundContext`) and what the phases before it returned; the table's state document is the one mutable
thing they share, and every failure of planning, writing or committing is recorded by one path
(:func:`_failure_recorded`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Generic

from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.errors import (
    CursorBehindLake,
    FencedError,
    ShapeChangedDuringRound,
    SourceError,
    TableTruncated,
)
from airflow_provider_tiering.core.follow_shape import Mode, ShapeOutcome, follow_hot_shape
from airflow_provider_tiering.core.in_place_changes import watch_in_place_changes
from airflow_provider_tiering.core.merge_key import resolve_merge_key
from airflow_provider_tiering.core.offsets import Offsets, cursor_lag_seconds
from airflow_provider_tiering.core.ports import (
    FileKind,
    Lake,
    LakeCommit,
    MergeKey,
    MergeResult,
    PlanT,
    RejectsSink,
    RoundRead,
    SafeWatermark,
    Source,
    SplitT,
    SplitWriter,
    TieringCommit,
    WriteTarget,
    WrittenFile,
)
from airflow_provider_tiering.core.round_failure import (
    RetryDelay,
    no_retry,
    record_failure,
    record_stream,
    refuse_if_quarantined,
)
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundPhase, RoundResult
from airflow_provider_tiering.core.shape import HotIdentity
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import (
    CommittedSnapshot,
    MergeRewriteMetrics,
    RoundMetrics,
    TableState,
    TableStatus,
    utcnow,
)
from airflow_provider_tiering.core.state_repair import reconcile_with_lake, unannounced_commits
from airflow_provider_tiering.core.state_store import StateStore
from airflow_provider_tiering.core.units import count, duration, size

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundContext(Generic[PlanT, SplitT]):
    """What every phase of one round reads: its parts, its options and the attempt's id."""

    spec: TableSpec
    source: Source[PlanT, SplitT]
    lake: Lake
    writer: SplitWriter
    state_store: StateStore
    rejects: RejectsSink | None
    secrets: Sequence[str]
    retry_delay: RetryDelay
    notify: Callable[[RoundPhase], None]
    clock: Callable[[], datetime]
    #: This attempt's id: its files are written under it, and only its own are cleaned when it is fenced.
    attempt: str
    #: ``time.monotonic()`` when the round started.
    started: float


@dataclass(frozen=True)
class _Opened:
    """The lake table as the round found it (phase 1a)."""

    schema: pa.Schema
    key: MergeKey | None
    #: The hot table's identity (its store's ids for the table and its columns).
    identity: HotIdentity
    #: The lake's latest tiering commit: the round's start (None: the lake holds nothing yet).
    lake_commit: LakeCommit | None

    @property
    def start(self) -> Offsets | None:
        return None if self.lake_commit is None else self.lake_commit.end_offsets

    @property
    def lake_epoch(self) -> int:
        return 0 if self.lake_commit is None else self.lake_commit.epoch


@dataclass(frozen=True)
class _Planned(Generic[PlanT]):
    """What the round will do (phase 1b)."""

    opened: _Opened
    #: The key the round merges by, with ``reconcile`` set when it also reconciles the lake's keys.
    key: MergeKey | None
    shape: ShapeOutcome
    #: Where the round reads from: the lake's offsets, or None to read the whole hot table.
    read_from: Offsets | None
    plan: PlanT | None
    #: The round completes a pending reload (it reads the whole hot table, or found it empty).
    reload_done: bool
    #: Every hot key, read already when the round has no rows to read (reconciling only).
    hot_keys: pa.Table | None
    unannounced: tuple[TieringCommit, ...]

    @property
    def has_rows(self) -> bool:
        return self.plan is not None and not self.plan.is_empty

    @property
    def reconciling(self) -> bool:
        return self.key is not None and self.key.reconcile

    @property
    def keys_only(self) -> bool:
        """A reconciliation with no new rows: the offsets stay."""
        return self.reconciling and not self.has_rows

    @property
    def backlog(self) -> int | None:
        return None if self.plan is None else self.plan.backlog


@dataclass(frozen=True)
class _Written:
    """What the round wrote (phase 3)."""

    end: Offsets
    splits: int
    files: list[WrittenFile]
    rejected: list[WrittenFile]
    hot_keys: pa.Table | None

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class _Committed:
    """What the round committed (phase 4)."""

    snapshot_id: int
    files: list[WrittenFile]
    merged: MergeResult | None


def run_round(
    spec: TableSpec,
    source: Source[PlanT, SplitT],
    lake: Lake,
    writer: SplitWriter,
    state_store: StateStore,
    *,
    secrets: Sequence[str] = (),
    retry_delay: RetryDelay = no_retry,
    observe: Callable[[RoundPhase], None] | None = None,
    clock: Callable[[], datetime] = utcnow,
    rejects: RejectsSink | None = None,
    announced_epoch: int | None = None,
) -> RoundResult:
    """Run one exactly-once round of ``spec`` and return what it did; running it again after a failure is always
    safe (it re-plans from the lake), and of two rounds of one table at once one is fenced.

    Raises :class:`QuarantinedError`, touching nothing, when the table has failed
    ``spec.max_consecutive_failures`` rounds in a row and has not been reset since. Raises the round's error
    (:class:`SourceError`, :class:`LakeError`, :class:`CommitConflict`, a Spark job's) after recording it as the
    table's ``last_error`` (FAILED; ``next_retry_at`` from ``retry_delay``, None: no retry left): a
    :class:`NotRetryable` one quarantines the table at once, a :class:`DeploymentIncomplete` one (a missing pip
    extra) is not counted towards the quarantine. :class:`FencedError`: a newer attempt committed first; the state
    document is left to it and this attempt's files are deleted.

    ``writer`` is only touched when there is something to tier, so an idle round starts no Spark. ``rejects`` is
    the side table of bad records (``on_bad_record="side_table"``), committed before the round's data, per source
    file (``lake/rejects.py``). ``announced_epoch`` is the newest epoch an asset event announced (0: none; None:
    unknown): the lake's commits above it come back in ``unannounced``.
    """
    source = source.for_round()  # this round's own: nothing an earlier round read or bound
    r = RoundContext(
        spec=spec, source=source, lake=lake, writer=writer, state_store=state_store, rejects=rejects,
        secrets=[*secrets, *source.secrets()], retry_delay=retry_delay, notify=observe or (lambda phase: None),
        clock=clock, attempt=uuid.uuid4().hex[:16], started=time.monotonic(),
    )  # fmt: skip
    state = state_store.load() or TableState(table=spec.name)
    refuse_if_quarantined(state, spec)
    with _failure_recorded(r, state), source.connected():
        planned = _plan(r, state, _open(r, state), announced_epoch)
    r.notify(RoundPhase.PLANNED)
    if not planned.has_rows and not planned.keys_only:
        return _nothing_to_tier(r, state, planned)
    epoch = _acquire(r, state, planned)
    with _failure_recorded(r, state, epoch):
        written = _write(r, planned, epoch)
        committed = _commit(r, planned, epoch, written)
    r.notify(RoundPhase.COMMITTED)
    metrics = _record(r, state, planned, epoch, written, committed)
    r.notify(RoundPhase.RECORDED)
    cleaned = _clean(r, state, epoch, written, committed)
    r.notify(RoundPhase.CLEANED)
    if spec.eviction.enabled:
        _evict(r, state, metrics, epoch, planned.key)
        r.notify(RoundPhase.EVICTED)
    start = planned.opened.start
    return RoundResult(
        spec.name, RoundOutcome.TIERED, epoch, committed.snapshot_id, start, written.end, metrics,
        state.watermark_blockers, cleaned, unannounced=planned.unannounced, read_schema=planned.opened.schema,
    )  # fmt: skip


@contextmanager
def _failure_recorded(r: RoundContext[PlanT, SplitT], state: TableState, epoch: int | None = None) -> Iterator[None]:
    """The round's one failure path. A fenced attempt (``epoch``: the attempt's) leaves the state document to the
    attempt that won and deletes its own data files; any other error is recorded as the table's failed round."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, FencedError) and epoch is not None:
            # Its rejects may be committed already (before the data): their files are left to the next commit's
            # cleanup, which keeps those a snapshot references.
            r.lake.clean_attempt(epoch, r.attempt, keep=())
            raise
        record_failure(state, r.spec, exc, r.secrets, r.clock(), r.retry_delay)
        record_stream(state, r.source, r.secrets)
        r.state_store.save(state)
        raise


# -- 1. Plan, from the lake's committed offsets ----------------------------------------------------------------
def _open(r: RoundContext[PlanT, SplitT], state: TableState) -> _Opened:
    """The hot table's columns and key, the lake table (created on the first round), and the state document
    reconciled with the lake's latest commit."""
    # The identity before the columns: a change between the two reads makes the identity the round records (and a
    # probe compares with) older than what the round followed, so the next probe runs a round rather than miss one.
    identity = r.source.identity()
    schema = r.source.schema()
    key = resolve_merge_key(r.spec, r.source, schema)
    if key is not None:
        r.source.bind_key(key)
    state.mode = Mode.of(key).value
    state.merge_key = None if key is None else list(key.columns)
    # An empty schema: the source cannot know its columns yet (no Parquet file has landed), so no table.
    location = None
    if len(schema):
        location = r.lake.ensure_table(schema, () if key is None else key.columns, identity)
    r.source.bind_lake(location, r.lake.storage())
    lake_commit = r.lake.committed()
    reconcile_with_lake(state, lake_commit, r.clock())
    return _Opened(schema, key, identity, lake_commit)


def _plan(r: RoundContext[PlanT, SplitT], state: TableState, opened: _Opened, announced: int | None) -> _Planned[PlanT]:
    """Follow the hot table's shape, take the safe watermark and plan the rows up to it. A change stream that
    carried a TRUNCATE (found following the shape, or planning) keeps the hot table's identity in the state: an
    operator may continue with the table as it is (``reset --adopt-hot-table``)."""
    try:
        return _plan_rows(r, state, opened, announced)
    except TableTruncated:
        state.replaced_hot_table = opened.identity.to_json()
        raise
    except Exception as exc:
        _raise_if_reshaped(r, exc)
        raise


def _raise_if_reshaped(r: RoundContext[PlanT, SplitT], error: Exception) -> None:
    """An error while the round read the hot table (a value that would not convert to the type it planned with) may
    be an ALTER's that committed under the read: when the columns changed since the round read them, that change is
    the error (``ShapeChangedDuringRound``, retryable: the next round follows it), not the data's. A check that fails
    itself leaves the original error to be raised."""
    try:
        r.source.check_shape_unchanged()
    except ShapeChangedDuringRound as changed:
        raise changed from error
    except Exception:  # the hot store is out of reach too: the original error says more
        return


def _plan_rows(
    r: RoundContext[PlanT, SplitT], state: TableState, opened: _Opened, announced: int | None
) -> _Planned[PlanT]:
    # The hot table's shape and identity: the lake follows a change of columns, reads the whole table again when it
    # must (``reload``), or the round refuses; an adopted table is read from its start.
    shape = ShapeOutcome(opened.identity)
    if len(opened.schema):
        shape = follow_hot_shape(
            r.spec, r.source, r.lake, state, opened.schema, opened.key, opened.lake_commit, r.writer, r.clock(),
            opened.identity,
        )  # fmt: skip
    if opened.key is None:
        watch_in_place_changes(state, r.source.in_place_changes(), r.clock())
    read_from = None if shape.reload or shape.adopting else opened.start
    if read_from is None and opened.start is not None:
        state.emptied_range = state.watermark_candidate = None
    _refuse_rows_behind(r, state, read_from)
    watermark = r.source.safe_watermark(read_from, state.watermark_candidate)
    state.watermark_blockers = [b.to_json() for b in watermark.blockers]
    state.watermark_candidate = watermark.candidate
    plan = None
    if watermark.end is not None and watermark.end != read_from:
        plan = r.source.plan(read_from, watermark.end, r.spec.max_rows_per_round)
    has_rows = plan is not None and not plan.is_empty
    key, hot_keys = _reconciliation(r, state, opened, shape, has_rows)
    return _Planned(
        opened, key, shape, read_from, plan, _reload_done(shape, has_rows, watermark), hot_keys,
        unannounced_commits(r.lake, opened.lake_commit, announced),
    )  # fmt: skip


def _refuse_rows_behind(r: RoundContext[PlanT, SplitT], state: TableState, start: Offsets | None) -> None:
    """Fail the round when rows arrived at or below the committed offsets (see ``Source.look_behind``): later
    rounds only read beyond the offsets, so going on would lose them for good."""
    behind = r.source.look_behind(start, state.emptied_range)
    state.emptied_range = behind.emptied
    if behind.arrived:
        lake = f"{r.spec.lake.namespace}.{r.spec.lake.table}"
        raise CursorBehindLake(
            f"{r.source.display_name}: {behind.arrived} row(s) arrived at or below the lake's committed offsets "
            f"{start} ({behind.where}) after the table's newest rows there were gone: its cursor went backwards "
            "(the table was reloaded, or a sequence or rowid reused values). No later round reads them, so nothing "
            f"was tiered. Give those rows cursor values above the committed offsets, or drop lake table {lake} to "
            "tier the whole table again (the next round recreates it)"
        )


def _reload_done(shape: ShapeOutcome, has_rows: bool, watermark: SafeWatermark) -> bool:
    """A reload is done only by a round that reads the whole table from its start (or finds it empty, with nothing
    held back): one held back by open transactions leaves it pending."""
    return shape.reload is not None and (has_rows or (watermark.observed is None and not watermark.blockers))


def _reconciliation(
    r: RoundContext[PlanT, SplitT], state: TableState, opened: _Opened, shape: ShapeOutcome, has_rows: bool
) -> tuple[MergeKey | None, pa.Table | None]:
    """Whether this round also reads every hot key, in the snapshot it reads its rows in, so that its merge removes
    the lake's keys that are gone (``merge.reconcile_keys_every_seconds``): the key it merges by (with ``reconcile``
    set when it does) and, for a round with no rows to read, the hot keys read already.

    A reload reconciles (and a change stream's reads them with its new load), and so does a merge round after the
    table's storage was replaced (a TRUNCATE deletes rows without a change each); an adopted table keeps the lake's
    rows."""
    key = opened.key
    if key is None or opened.lake_commit is None or shape.adopting:
        return key, None
    every = None if r.spec.merge is None else r.spec.merge.reconcile_keys_every_seconds
    due = not key.from_change_stream and (shape.reconcile or state.keys_reconciliation_due(every, r.clock()))
    if shape.reload is None and not due:
        return key, None
    reconciling = replace(key, reconcile=True)
    if has_rows:
        return reconciling, None  # the keys are read with the rows
    with r.source.reading_one_snapshot(None, [], with_keys=True) as read:  # no rows: the keys alone, in a snapshot
        hot_keys = _hot_keys(r, read)
    if not r.lake.keys_not_in(hot_keys, reconciling):
        state.keys_reconciled_at = r.clock()
        return key, None
    return reconciling, hot_keys


def _hot_keys(r: RoundContext[PlanT, SplitT], read: RoundRead[SplitT]) -> pa.Table:
    """The keys a snapshot entered ``with_keys`` read; a source that yields none cannot reconcile."""
    if read.keys is None:
        raise SourceError(f"{r.source.display_name}: no keys were read in the round's snapshot (key reconciliation)")
    return read.keys


def _nothing_to_tier(r: RoundContext[PlanT, SplitT], state: TableState, planned: _Planned[PlanT]) -> RoundResult:
    """Finish a round with nothing to tier: the table is idle, and caught up unless open transactions hold it."""
    shape = planned.shape
    if not shape.adopting and (shape.identity_changed or shape.reload):
        # Nothing to merge in a reload, or rows found as tiered after a rewrite: the lake records the table
        # as it is now (an adopted table's is recorded by the commit that first tiers it).
        r.lake.record_hot_table(shape.identity, reloaded=planned.reload_done)
    state.walk_to_idle()
    state.consecutive_failures = 0
    state.next_retry_at = None
    state.hot_shape = shape.identity.shape_json()
    state.last_checked_time = r.clock()
    if not state.watermark_blockers:
        state.caught_up_time = state.last_checked_time
    record_stream(state, r.source, r.secrets)
    r.state_store.save(state)
    opened = planned.opened
    log.info("%s: nothing to tier (lake at epoch %s, offsets %s)", r.spec.name, opened.lake_epoch, opened.start)
    return RoundResult(
        r.spec.name, RoundOutcome.NOTHING_TO_TIER, state.epoch,
        None if opened.lake_commit is None else opened.lake_commit.snapshot_id, opened.start, opened.start,
        blockers=state.watermark_blockers, note=state.note, unannounced=planned.unannounced,
    )  # fmt: skip


# -- 2. Acquire a new epoch ------------------------------------------------------------------------------------
def _acquire(r: RoundContext[PlanT, SplitT], state: TableState, planned: _Planned[PlanT]) -> int:
    state.walk_to_pending()
    state.epoch = max(state.epoch, planned.opened.lake_epoch) + 1
    state.attempt = r.attempt
    state.transition(TableStatus.TIERING)
    r.state_store.save(state)
    r.notify(RoundPhase.ACQUIRED)
    return state.epoch


# -- 3. Write ----------------------------------------------------------------------------------------------------
def _write(r: RoundContext[PlanT, SplitT], planned: _Planned[PlanT], epoch: int) -> _Written:
    """Read the planned rows (and the hot keys of a reconciling round) in one snapshot and write them as files no
    reader sees yet."""
    start = planned.opened.start
    if planned.plan is None or planned.keys_only:
        if start is None:  # cannot happen: reconciling needs a lake commit
            raise SourceError(f"{r.source.display_name}: a round with no rows to read has no offsets to keep")
        end, splits = start, []
    else:
        end = r.source.end_offsets(planned.plan)  # a landing zone writes its offsets log here: it can fail
        splits = _cut(r, planned.plan)
    if r.rejects is not None:
        r.rejects.ensure()
    backlog = planned.backlog
    log.info(
        "%s: planned epoch %d: %s -> %s in %s%s", r.spec.name, epoch, "the start" if start is None else start, end,
        "1 split" if len(splits) == 1 else f"{len(splits)} splits",
        f"; {count(backlog)} more left for later rounds (max_rows_per_round)" if backlog else "",
    )  # fmt: skip
    r.notify(RoundPhase.WRITING)
    writing_started = time.monotonic()
    written: list[WrittenFile] = []
    hot_keys = planned.hot_keys
    in_process = len(splits) == 1 and r.writer.writes_single_split_locally
    if not planned.keys_only:
        try:
            with r.source.reading_one_snapshot(
                planned.plan, splits, read_here=in_process, with_keys=planned.reconciling
            ) as read:
                if planned.reconciling:
                    hot_keys = _hot_keys(r, read)  # read on entering, in the snapshot the splits read
                written = r.writer.write(
                    read.reader, splits, planned.opened.schema, _write_target(r, planned, epoch),
                    rejects_uri=None if r.rejects is None else r.rejects.staging_uri(epoch, r.attempt),
                )  # fmt: skip
        except Exception as exc:
            _raise_if_reshaped(r, exc)
            raise
    r.source.check_shape_unchanged()
    result = _Written(
        end, len(splits), [f for f in written if f.kind == FileKind.DATA],
        [f for f in written if f.kind == FileKind.REJECTS], hot_keys,
    )  # fmt: skip
    log.info(
        "%s: read and written %s rows in %d files (%s) %s in %s%s", r.spec.name, count(result.rows),
        len(result.files), size(sum(f.bytes for f in result.files)), "by this process" if in_process else "on Spark",
        duration(time.monotonic() - writing_started),
        f"; {count(sum(f.rows for f in result.rejected))} bad records to the rejects table" if result.rejected else "",
    )  # fmt: skip
    r.notify(RoundPhase.WRITTEN)
    return result


def _cut(r: RoundContext[PlanT, SplitT], plan: PlanT) -> list[SplitT]:
    """A round of one split at one slot may be written without Spark (see ``SparkSplitWriter``); else it is cut for
    the Spark slots, which starts the session."""
    splits = r.source.cut_splits(plan, r.spec.target_rows_per_split, 1)
    if len(splits) > 1 or not r.writer.writes_single_split_locally:
        splits = r.source.cut_splits(plan, r.spec.target_rows_per_split, r.writer.parallelism)
    return splits


def _write_target(r: RoundContext[PlanT, SplitT], planned: _Planned[PlanT], epoch: int) -> WriteTarget:
    key = planned.key
    # A change stream planned from no offsets loads the table from a snapshot: whole rows, one per key, so its
    # files need no change columns and are committed as written.
    change_stream = key is not None and key.from_change_stream and planned.read_from is not None
    return r.lake.write_target(epoch, r.attempt, r.spec.target_file_bytes, change_stream=change_stream)


# -- 4. Commit, fenced by the lake's offsets and epoch ------------------------------------------------------------
def _commit(r: RoundContext[PlanT, SplitT], planned: _Planned[PlanT], epoch: int, written: _Written) -> _Committed:
    committing_started = time.monotonic()
    if written.rejected and r.rejects is not None:
        r.rejects.replace(written.rejected, epoch=epoch, table_name=r.spec.name, attempt=r.attempt)
    start, identity, reloaded = (
        planned.opened.start,
        planned.shape.identity,
        planned.reload_done or planned.shape.adopting,
    )
    if planned.key is None:
        snapshot_id = r.lake.commit(
            written.files, epoch=epoch, start=start, end=written.end, table_name=r.spec.name, attempt=r.attempt,
            identity=identity, reloaded=reloaded,
        )  # fmt: skip
        committed = _Committed(snapshot_id, written.files, None)
    else:
        merged = r.lake.merge(
            written.files, planned.key, epoch=epoch, start=start, end=written.end, table_name=r.spec.name,
            attempt=r.attempt, hot_keys=written.hot_keys, identity=identity, reloaded=reloaded,
            target_file_bytes=r.spec.target_file_bytes, copy_on_write_fraction=r.spec.lake.copy_on_write_fraction,
            writer=r.writer,
        )  # fmt: skip
        _log_merge(r, planned.key, written, merged)
        committed = _Committed(merged.snapshot_id, [*merged.added, *merged.delete_files], merged)
    took = duration(time.monotonic() - committing_started)
    log.info("%s: committed snapshot %s in %s", r.spec.name, committed.snapshot_id, took)
    return committed


def _log_merge(r: RoundContext[PlanT, SplitT], key: MergeKey, written: _Written, merged: MergeResult) -> None:
    log.info(
        "%s: merged %d row versions by %s: %d rows inserted, %d updated, %d deleted; %d lake files rewritten "
        "%s (%d %s, %s read, %s written); %s rows of %d lake files deleted by position in %d delete files",
        r.spec.name, written.rows, list(key.columns), merged.inserted_rows, merged.updated_rows, merged.deleted_rows,
        merged.removed_files, "by this process" if merged.rewritten_in_process else "on Spark", merged.rewrite_tasks,
        "task" if merged.rewrite_tasks == 1 else "tasks", size(merged.rewrite_bytes_read),
        size(merged.rewrite_bytes_written), count(merged.rows_deleted_by_position), merged.files_given_deletes,
        len(merged.delete_files),
    )  # fmt: skip


# -- 5. Record -------------------------------------------------------------------------------------------------
def _record(
    r: RoundContext[PlanT, SplitT],
    state: TableState,
    planned: _Planned[PlanT],
    epoch: int,
    written: _Written,
    committed: _Committed,
) -> RoundMetrics:
    now = r.clock()
    metrics = _metrics(r, planned, written, committed, now)
    state.transition(TableStatus.TIERED)
    state.committed = CommittedSnapshot(committed.snapshot_id, epoch, written.end, now)
    state.replaced_hot_table = state.adopt_hot_table = None  # the commit recorded the hot table it tiered
    state.hot_shape = planned.shape.identity.shape_json()
    if planned.reconciling:
        state.keys_reconciled_at = now
    if committed.merged is not None and committed.merged.lake_delete_files is not None:
        state.lake_delete_files = committed.merged.lake_delete_files
        state.lake_deleted_rows = committed.merged.lake_deleted_rows
    state.last_tiered_time = state.last_checked_time = now
    if not state.watermark_blockers and not planned.backlog:
        state.caught_up_time = now
    state.last_round = metrics
    state.consecutive_failures = 0
    state.next_retry_at = None
    state.note = None
    r.state_store.save(state)
    log.info(
        "%s: recorded epoch %d: %s rows tiered, the lake now at %s; round took %s", r.spec.name, epoch,
        count(metrics.rows), written.end, duration(metrics.duration_seconds),
    )  # fmt: skip
    return metrics


def _metrics(
    r: RoundContext[PlanT, SplitT], planned: _Planned[PlanT], written: _Written, committed: _Committed, now: datetime
) -> RoundMetrics:
    merged = committed.merged
    data = [f for f in committed.files if f.kind is FileKind.DATA]
    return RoundMetrics(
        rows=written.rows,
        bytes=sum(f.bytes for f in data),
        files=len(data),
        splits=written.splits,
        duration_seconds=round(time.monotonic() - r.started, 3),
        lag_seconds=cursor_lag_seconds(written.end, now),
        backlog_rows=planned.backlog,
        rejected_rows=sum(f.rows for f in written.rejected),
        inserted_rows=None if merged is None else merged.inserted_rows,
        updated_rows=None if merged is None else merged.updated_rows,
        deleted_rows=None if merged is None else merged.deleted_rows,
        merge=None if merged is None else _rewrite_metrics(merged),
    )


def _rewrite_metrics(merged: MergeResult) -> MergeRewriteMetrics:
    return MergeRewriteMetrics(
        "task_process" if merged.rewritten_in_process else "spark",
        merged.rewrite_tasks,
        merged.removed_files,
        merged.rewrite_bytes_read,
        merged.rewrite_bytes_written,
        files_given_deletes=merged.files_given_deletes,
        rows_deleted_by_position=merged.rows_deleted_by_position,
        delete_files_written=len(merged.delete_files),
        delete_bytes_written=sum(f.bytes for f in merged.delete_files),
    )


# -- 6. Clean, only after the commit: files no snapshot references, of attempts that can never commit -------------
def _clean(
    r: RoundContext[PlanT, SplitT], state: TableState, epoch: int, written: _Written, committed: _Committed
) -> int:
    cleaned = 0
    try:
        cleaned = r.lake.clean_attempt(epoch, r.attempt, keep=[f.path for f in committed.files])
        if r.rejects is not None:
            cleaned += r.rejects.clean_attempt(epoch, r.attempt, keep=[f.path for f in written.rejected])
        cleaned += r.lake.clean(epoch, since_epoch=state.cleaned_through_epoch)
        if r.rejects is not None:  # failed and fenced attempts' rejects files, those no snapshot references
            cleaned += r.rejects.clean(epoch, since_epoch=state.cleaned_through_epoch)
        state.cleaned_through_epoch = epoch - 1
        r.state_store.save(state)
        if cleaned:
            log.info("%s: removed %d files of attempts that can no longer commit", r.spec.name, cleaned)
    except Exception as exc:  # cleanup is best effort: the next committed round retries it (old epochs' too)
        log.warning("%s: cleaning old attempts failed: %s", r.spec.name, describe_error(exc, r.secrets))
    try:
        housekept = r.source.after_commit(written.end)
        if housekept:
            log.info("%s: %d tiered source files archived or deleted", r.spec.name, housekept)
    except Exception as exc:  # best effort too: the next committed round catches up (files, a slot's position)
        log.warning("%s: housekeeping after the commit failed: %s", r.spec.name, describe_error(exc, r.secrets))
    record_stream(state, r.source, r.secrets)
    r.state_store.save(state)
    return cleaned


# -- 7. Evict --------------------------------------------------------------------------------------------------
def _evict(
    r: RoundContext[PlanT, SplitT], state: TableState, metrics: RoundMetrics, epoch: int, key: MergeKey | None
) -> None:
    """Evict tiered rows after the commit (see ``core/eviction.py``): walked by the cursor, or by the key for a
    table without one (a change stream's). Its failure leaves the round tiered: the rows stay in the hot store, the
    reason is recorded (``eviction_note``) and the next round tries again."""
    from airflow_provider_tiering.core.eviction import evict_by_key, evict_tiered_rows

    spec, source = r.spec, r.source
    try:
        evictor, keyed, cursor = source.evictor(), source.keyed_evictor(), spec.source.cursor()
        if cursor is not None and evictor is not None:
            result = evict_tiered_rows(spec.eviction, cursor, evictor, r.lake, epoch=epoch, now=r.clock())
        elif cursor is None and key is not None and keyed is not None:
            result = evict_by_key(spec.eviction, key.columns, keyed, r.lake, epoch=epoch, now=r.clock())
        else:
            raise SourceError(
                f"{source.display_name} cannot evict rows (eviction needs a SQL table with a cursor, or a change "
                "stream's table with a key)"
            )
        metrics.evicted_rows, state.eviction_note = result.rows, result.note
        if result.rows:
            log.info("%s: evicted %d tiered rows in %d batches", spec.name, result.rows, result.batches)
            # Eviction may have emptied the newest rows the lake holds: watch that stretch from now on, not from
            # the next round (rows arriving in it before then would go unseen).
            committed = None if state.committed is None else state.committed.end_offsets
            state.emptied_range = source.look_behind(committed, state.emptied_range).emptied
    except Exception as exc:
        state.eviction_note = f"eviction failed: {describe_error(exc, r.secrets)}"
        log.warning("%s: %s", spec.name, state.eviction_note)
    finally:
        state.evicted_rows_total += metrics.evicted_rows
        r.state_store.save(state)
