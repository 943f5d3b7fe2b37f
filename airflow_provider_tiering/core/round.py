"""One tiering round of one table: plan -> acquire -> write -> fenced commit -> record -> clean.

This is the exactly-once protocol (``docs/design.md``, "The round"). The lake's latest tiering snapshot is the
only source of truth for what has been tiered: every round plans from it, a state document that lags behind it
(a crash between commit and record) is repaired from it, and a commit is fenced by it.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_tiering.core.decisions import quarantine_reason
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.errors import (
    CursorBehindLake,
    DeploymentIncomplete,
    FencedError,
    NotRetryable,
    QuarantinedError,
    SourceError,
    TableTruncated,
)
from airflow_provider_tiering.core.follow_shape import Mode, ShapeOutcome, follow_hot_shape
from airflow_provider_tiering.core.in_place_changes import watch_in_place_changes
from airflow_provider_tiering.core.merge_key import resolve_merge_key
from airflow_provider_tiering.core.offsets import cursor_lag_seconds
from airflow_provider_tiering.core.ports import (
    FileKind,
    Lake,
    LakeCommit,
    MergeKey,
    MergeResult,
    Offsets,
    PlanT,
    RejectsSink,
    Source,
    SplitT,
    SplitWriter,
    TieringCommit,
    WrittenFile,
)
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import (
    CommittedSnapshot,
    MergeRewriteMetrics,
    RoundMetrics,
    TableState,
    TableStatus,
    utcnow,
)
from airflow_provider_tiering.core.state_store import StateStore
from airflow_provider_tiering.core.units import count, duration, size

log = logging.getLogger(__name__)


class RoundPhase(enum.StrEnum):
    """The phases a round reports to its observer, in order."""

    PLANNED = "planned"
    ACQUIRED = "acquired"
    WRITING = "writing"
    WRITTEN = "written"
    COMMITTED = "committed"
    RECORDED = "recorded"
    CLEANED = "cleaned"
    EVICTED = "evicted"


class RoundOutcome(enum.StrEnum):
    TIERED = "tiered"
    NOTHING_TO_TIER = "nothing_to_tier"


#: When the scheduler retries a round that failed with this error (None: it will not).
RetryDelay = Callable[[BaseException], timedelta | None]


def no_retry(error: BaseException) -> timedelta | None:
    return None


@dataclass
class RoundResult:
    """What a round did; ``event_extra()`` is the payload of the table's asset event."""

    table: str
    outcome: RoundOutcome
    epoch: int
    snapshot_id: int | None
    start_offsets: dict[str, Any] | None
    end_offsets: dict[str, Any] | None
    metrics: RoundMetrics | None = None
    blockers: list[dict[str, Any]] = field(default_factory=list)
    cleaned_files: int = 0
    note: str | None = None
    #: Earlier commits that no asset event announced (see ``run_round``'s ``announced_epoch``), oldest first.
    unannounced: tuple[TieringCommit, ...] = ()

    def announcements(self) -> list[dict[str, Any]]:
        """The asset events this round owes, oldest first: its unannounced predecessors (``recovered``), then its
        own when it tiered rows."""
        owed = [commit.event_extra(self.table) for commit in self.unannounced]
        if self.outcome is RoundOutcome.TIERED:
            owed.append(self.event_extra())
        return owed

    def event_extra(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "epoch": self.epoch,
            "snapshot_id": self.snapshot_id,
            "start_offsets": self.start_offsets,
            "end_offsets": self.end_offsets,
            "rows": self.metrics.rows if self.metrics else 0,
            "bytes": self.metrics.bytes if self.metrics else 0,
            "files": self.metrics.files if self.metrics else 0,
            "duration_seconds": self.metrics.duration_seconds if self.metrics else 0.0,
            "lag_seconds": self.metrics.lag_seconds if self.metrics else None,
            "backlog_rows": self.metrics.backlog_rows if self.metrics else None,
            "rejected_rows": self.metrics.rejected_rows if self.metrics else 0,
            "evicted_rows": self.metrics.evicted_rows if self.metrics else 0,
            **(
                {
                    "inserted_rows": self.metrics.inserted_rows,
                    "updated_rows": self.metrics.updated_rows,
                    "deleted_rows": self.metrics.deleted_rows,
                }
                if self.metrics is not None and self.metrics.inserted_rows is not None
                else {}
            ),
        }


def _evict(
    spec: TableSpec,
    source: Source[Any, Any],
    lake: Lake,
    state: TableState,
    state_store: StateStore,
    metrics: RoundMetrics,
    epoch: int,
    now: datetime,
    secrets: Sequence[str],
    merge_key: MergeKey | None,
) -> None:
    """Evict tiered rows after the commit (see ``core/eviction.py``): walked by the cursor, or by the key for a
    table without one (a change stream's). Its failure leaves the round tiered: the rows stay in the hot store, the
    reason is recorded (``eviction_note``) and the next round tries again."""
    from airflow_provider_tiering.core.eviction import evict_by_key, evict_tiered_rows

    try:
        evictor, keyed, cursor = source.evictor(), source.keyed_evictor(), spec.source.cursor()
        if cursor is not None and evictor is not None:
            result = evict_tiered_rows(spec.eviction, cursor, evictor, lake, epoch=epoch, now=now)
        elif cursor is None and merge_key is not None and keyed is not None:
            result = evict_by_key(spec.eviction, merge_key.columns, keyed, lake, epoch=epoch, now=now)
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
        state.eviction_note = f"eviction failed: {describe_error(exc, secrets)}"
        log.warning("%s: %s", spec.name, state.eviction_note)
    finally:
        state.evicted_rows_total += metrics.evicted_rows
        state_store.save(state)


def _reconcile_with_lake(state: TableState, lake: LakeCommit | None, now: datetime) -> None:
    """Make the state document agree with the lake, which wins every disagreement."""
    if lake is None:
        if state.committed is not None:
            state.note = "the lake holds no tiering snapshot; tiering starts from the beginning"
        state.committed = None
    elif state.committed is None or state.committed.snapshot_id != lake.snapshot_id:
        # Lake maintenance (a compaction's replace snapshot) carries the same commit on: not a repair.
        maintained = state.committed is not None and (state.committed.epoch, state.committed.end_offsets) == (
            lake.epoch,
            dict(lake.end_offsets or {}),
        )
        committed_at = state.committed.committed_at if maintained and state.committed else lake.committed_at
        state.committed = CommittedSnapshot(lake.snapshot_id, lake.epoch, dict(lake.end_offsets or {}), committed_at)
        if not maintained:
            state.note = f"state repaired from lake snapshot {lake.snapshot_id} (epoch {lake.epoch})"
        if state.status is TableStatus.TIERING and lake.epoch >= state.epoch:
            state.transition(TableStatus.TIERED)
            state.last_tiered_time = lake.committed_at
            state.consecutive_failures = 0
    if lake is not None:
        state.epoch = max(state.epoch, lake.epoch)
    if state.status is TableStatus.TIERING:
        state.record_failure(
            f"attempt at epoch {state.epoch} ended without recording its outcome (its process died or was "
            "killed); the round is planned again from the lake's committed offsets",
            now,
        )


#: At most this many unannounced commits are announced by one round (a lake tiered outside Airflow for long).
MAX_RECOVERED_EVENTS = 100


def _unannounced_commits(
    lake: Lake, lake_commit: LakeCommit | None, announced_epoch: int | None
) -> tuple[TieringCommit, ...]:
    if announced_epoch is None or lake_commit is None or lake_commit.epoch <= announced_epoch:
        return ()
    commits = lake.tiering_commits(announced_epoch)
    if len(commits) > MAX_RECOVERED_EVENTS:
        log.warning(
            "%d lake commits were never announced; announcing the newest %d", len(commits), MAX_RECOVERED_EVENTS
        )
    return tuple(commits[-MAX_RECOVERED_EVENTS:])


def _refuse_rows_behind(spec: TableSpec, source: Source[Any, Any], state: TableState, start: Offsets | None) -> None:
    """Fail the round when rows arrived at or below the committed offsets (see ``Source.look_behind``): later
    rounds only read beyond the offsets, so going on would lose them for good."""
    behind = source.look_behind(start, state.emptied_range)
    state.emptied_range = behind.emptied
    if behind.arrived:
        lake = f"{spec.lake.namespace}.{spec.lake.table}"
        raise CursorBehindLake(
            f"{source.display_name}: {behind.arrived} row(s) arrived at or below the lake's committed offsets "
            f"{start} ({behind.where}) after the table's newest rows there were gone: its cursor went backwards "
            "(the table was reloaded, or a sequence or rowid reused values). No later round reads them, so nothing "
            f"was tiered. Give those rows cursor values above the committed offsets, or drop lake table {lake} to "
            "tier the whole table again (the next round recreates it)"
        )


def _fail(
    state: TableState,
    spec: TableSpec,
    exc: BaseException,
    secrets: Sequence[str],
    now: datetime,
    retry_delay: RetryDelay,
) -> None:
    if state.status is not TableStatus.TIERING:
        state.walk_to_pending()
    if isinstance(exc, DeploymentIncomplete):
        # Installing what is missing cures it, whatever the table: shown, never counted towards the quarantine.
        state.record_failure(describe_error(exc, secrets), now, counted=False)
        state.next_retry_at = None
        return
    state.record_failure(describe_error(exc, secrets), now)
    if isinstance(exc, NotRetryable):
        state.quarantine_now(now)
    delay = None if isinstance(exc, NotRetryable) else retry_delay(exc)
    state.next_retry_at = None if delay is None else now + delay
    state.quarantine_if_exhausted(spec.max_consecutive_failures, now)
    if state.quarantined_since is not None:
        state.next_retry_at = None


def _record_stream(state: TableState, source: Source[Any, Any], secrets: Sequence[str]) -> None:
    """Keep the change stream's slot status in the state document (best effort: it is reporting)."""
    try:
        found = source.stream_status()
    except Exception as exc:
        log.warning("%s: cannot read its replication slot's status: %s", state.table, describe_error(exc, secrets))
        return
    if found is not None:
        state.change_stream = found


def _refuse_if_quarantined(state: TableState, spec: TableSpec) -> None:
    if state.quarantined_since is not None:
        raise QuarantinedError(quarantine_reason(spec.name, state))


def record_failure_before_round(
    spec: TableSpec,
    state_store: StateStore,
    exc: BaseException,
    *,
    secrets: Sequence[str] = (),
    retry_delay: RetryDelay = no_retry,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Record an error that stopped a round before it could start (say, its Airflow connection is missing)
    as a failed round of the table: FAILED, ``last_error``, counted towards the quarantine like any other, except a
    :class:`DeploymentIncomplete` one (a missing pip extra), which is shown but not counted.

    Raises :class:`QuarantinedError`, recording nothing, when the table is quarantined already: as
    :func:`run_round` would, so a broken set-up does not keep failing tasks after the quarantine.
    """
    state = state_store.load() or TableState(table=spec.name)
    _refuse_if_quarantined(state, spec)
    _fail(state, spec, exc, secrets, clock(), retry_delay)
    state_store.save(state)


def record_interrupted_round(
    spec: TableSpec,
    state_store: StateStore,
    exc: BaseException,
    *,
    secrets: Sequence[str] = (),
    retry_delay: RetryDelay = no_retry,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Record a round stopped from outside while it ran (a timeout): FAILED with ``exc`` as its error, like any
    failed round. Whatever it had written is cleaned by the next committed round, as for any failed attempt."""
    state = state_store.load() or TableState(table=spec.name)
    _fail(state, spec, exc, secrets, clock(), retry_delay)
    state_store.save(state)


def _rewrite_metrics(merged: MergeResult) -> MergeRewriteMetrics:
    return MergeRewriteMetrics(
        "task_process" if merged.rewritten_in_process else "spark",
        merged.rewrite_tasks,
        merged.removed_files,
        merged.rewrite_bytes_read,
        merged.rewrite_bytes_written,
    )


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
    """Run one exactly-once round of ``spec`` and return what it did.

    ``retry_delay`` tells, for the error a round failed with, how long the scheduler waits before it retries
    (None: no retry left); a failure records ``next_retry_at`` from it.
    Raises :class:`QuarantinedError`, touching nothing, when the table has failed
    ``spec.max_consecutive_failures`` rounds in a row and has not been reset since.
    Raises the round's error after recording it as the table's ``last_error`` (state FAILED):
    :class:`SourceError` (hot store), :class:`LakeError` / :class:`CommitConflict` (lake),
    or any error of the Spark job. A :class:`NotRetryable` one (say, a column of a type the lake cannot hold)
    quarantines the table at once, with no retry time; a :class:`DeploymentIncomplete` one (a missing pip extra) is
    recorded without counting towards the quarantine. :class:`FencedError` means a newer attempt committed first;
    the state document is then left to the winner and this attempt's files are deleted.

    Hazards: running it again after a failure is always safe (it re-plans from the lake). Two
    rounds of one table at once are safe but wasteful: one of them is fenced.
    ``writer`` is only touched when there is something to tier, so an idle round starts no Spark.
    ``rejects`` is the side table that bad records go to (a file source with ``on_bad_record="side_table"``);
    they are committed there before the round's data (idempotently per source file, see ``lake/rejects.py``).
    ``announced_epoch`` is the newest epoch an asset event announced (0: none yet; None: unknown); the lake's
    commits above it, made by rounds that died before announcing them, come back in ``unannounced``.
    """
    notify: Callable[[RoundPhase], None] = observe or (lambda phase: None)
    started = time.monotonic()
    attempt = uuid.uuid4().hex[:16]
    state = state_store.load() or TableState(table=spec.name)
    secrets = [*secrets, *source.secrets()]
    _refuse_if_quarantined(state, spec)

    # 1. Plan, from the lake's committed offsets.
    try:
        schema = source.schema()
        merge_key = resolve_merge_key(spec, source, schema)
        if merge_key is not None:
            source.bind_key(merge_key)
        mode = Mode.of(merge_key)
        state.mode = mode.value
        state.merge_key = None if merge_key is None else list(merge_key.columns)
        # An empty schema: the source cannot know its columns yet (no Parquet file has landed), so no table.
        location = None
        identity = source.identity()
        if len(schema):
            location = lake.ensure_table(schema, () if merge_key is None else merge_key.columns, identity)
        source.bind_lake(location, lake.storage())
        lake_commit = lake.committed()
        _reconcile_with_lake(state, lake_commit, clock())
        start = None if lake_commit is None else lake_commit.end_offsets
        unannounced = _unannounced_commits(lake, lake_commit, announced_epoch)
        # The hot table's shape and identity: the lake follows a change of columns, reads the whole table again
        # when it must (``reload``), or the round refuses; an adopted table is read from its start.
        shape = ShapeOutcome(identity)
        if len(schema):
            shape = follow_hot_shape(
                spec, source, lake, state, schema, merge_key, lake_commit, writer, clock(), identity
            )
        if mode is Mode.APPEND:
            watch_in_place_changes(state, source.in_place_changes(), clock())
        read_from = None if shape.reload or shape.adopting else start
        if read_from is None and start is not None:
            state.emptied_range = state.watermark_candidate = None
        _refuse_rows_behind(spec, source, state, read_from)
        watermark = source.safe_watermark(read_from, state.watermark_candidate)
        state.watermark_blockers = [b.to_json() for b in watermark.blockers]
        state.watermark_candidate = watermark.candidate
        plan = None
        if watermark.end is not None and watermark.end != read_from:
            plan = source.plan(read_from, watermark.end, spec.max_rows_per_round)
        # A reload is done only by a round that reads the whole table from its start (or finds it empty, with nothing
        # held back): one held back by open transactions leaves it pending.
        reload_done = shape.reload is not None and (
            (plan is not None and not plan.is_empty) or (watermark.observed is None and not watermark.blockers)
        )
        # Key reconciliation (merge.reconcile_keys_every_seconds): this round also reads every hot key, in the
        # snapshot it reads its rows in, and its merge removes the lake's keys that are gone. A reload reconciles
        # (and a change stream's reads them with its new load), and so does a merge round after the table's storage
        # was replaced (a TRUNCATE deletes rows without a change each); an adopted table keeps the lake's rows.
        reconcile_every = None if spec.merge is None else spec.merge.reconcile_keys_every_seconds
        reconciling = (
            merge_key is not None
            and lake_commit is not None
            and not shape.adopting
            and (
                shape.reload is not None
                or (
                    not merge_key.from_change_stream
                    and (shape.reconcile or state.keys_reconciliation_due(reconcile_every, clock()))
                )
            )
        )
        hot_keys = None
        if reconciling and merge_key is not None:
            merge_key = replace(merge_key, reconcile=True)
            source.bind_key(merge_key)
            if plan is None or plan.is_empty:  # no rows to read: the keys alone, in a snapshot of their own
                with source.reading_one_snapshot([]):
                    hot_keys = source.live_keys()
                if not lake.keys_not_in(hot_keys, merge_key):
                    reconciling, state.keys_reconciled_at = False, clock()
    except Exception as exc:
        if isinstance(exc, TableTruncated):  # its rows replaced: an operator may continue with the table as it is
            state.replaced_hot_table = identity.to_json()
        _fail(state, spec, exc, secrets, clock(), retry_delay)
        _record_stream(state, source, secrets)
        state_store.save(state)
        raise
    notify(RoundPhase.PLANNED)
    lake_epoch = 0 if lake_commit is None else lake_commit.epoch

    keys_only = reconciling and (plan is None or plan.is_empty)
    if (plan is None or plan.is_empty) and not keys_only:
        if not shape.adopting and (shape.identity_changed or shape.reload):
            # Nothing to merge in a reload, or rows found as tiered after a rewrite: the lake records the table
            # as it is now (an adopted table's is recorded by the commit that first tiers it).
            lake.record_hot_table(shape.identity, reloaded=reload_done)
        state.walk_to_idle()
        state.consecutive_failures = 0
        state.next_retry_at = None
        state.last_checked_time = clock()
        if not state.watermark_blockers:
            state.caught_up_time = state.last_checked_time
        _record_stream(state, source, secrets)
        state_store.save(state)
        log.info("%s: nothing to tier (lake at epoch %s, offsets %s)", spec.name, lake_epoch, start)
        return RoundResult(
            spec.name,
            RoundOutcome.NOTHING_TO_TIER,
            state.epoch,
            None if lake_commit is None else lake_commit.snapshot_id,
            start,
            start,
            blockers=state.watermark_blockers,
            note=state.note,
            unannounced=unannounced,
        )

    # 2. Acquire a new epoch.
    state.walk_to_pending()
    epoch = max(state.epoch, lake_epoch) + 1
    state.epoch = epoch
    state.attempt = attempt
    state.transition(TableStatus.TIERING)
    state_store.save(state)
    notify(RoundPhase.ACQUIRED)

    # 3. Write; 4. commit, fenced by the lake's offsets and epoch.
    files: list[WrittenFile] = []
    committed_files: list[WrittenFile] = []
    merged: MergeResult | None = None
    splits: list[Any] = []
    written: list[WrittenFile] = []
    try:
        if keys_only:  # a reconciliation with no new rows: the offsets stay
            assert start is not None  # reconciling needs a lake commit
            end = dict(start)
        else:
            assert plan is not None
            end = source.end_offsets(plan)  # a landing zone writes its offsets log here: it can fail like a write
            # A round of one split at one slot may be written without Spark (see SparkSplitWriter); else cut it
            # for the Spark slots, which starts the session.
            splits = source.cut_splits(plan, spec.target_rows_per_split, 1)
            if len(splits) > 1 or not writer.writes_single_split_locally:
                splits = source.cut_splits(plan, spec.target_rows_per_split, writer.parallelism)
        if rejects is not None:
            rejects.ensure()
        log.info(
            "%s: planned epoch %d: %s -> %s in %s%s",
            spec.name,
            epoch,
            "the start" if start is None else start,
            end,
            "1 split" if len(splits) == 1 else f"{len(splits)} splits",
            f"; {count(plan.backlog)} more left for later rounds (max_rows_per_round)"
            if plan is not None and plan.backlog
            else "",
        )
        notify(RoundPhase.WRITING)
        writing_started = time.monotonic()
        if not keys_only:
            read_here = len(splits) == 1 and writer.writes_single_split_locally
            with source.reading_one_snapshot(splits, read_here=read_here):
                if reconciling:
                    hot_keys = source.live_keys()  # read on entering, in the snapshot the splits read
                written = writer.write(
                    source,
                    splits,
                    schema,
                    lake.write_target(
                        epoch,
                        attempt,
                        spec.target_file_size_mb * 1024 * 1024,
                        # A change stream planned from no offsets loads the table from a snapshot: whole rows,
                        # one per key, so its files need no change columns and are committed as written.
                        change_stream=merge_key is not None and merge_key.from_change_stream and read_from is not None,
                    ),
                    rejects_uri=None if rejects is None else rejects.staging_uri(epoch, attempt),
                )
        source.check_shape_unchanged()
        files = [f for f in written if f.kind == FileKind.DATA]
        rejected = [f for f in written if f.kind == FileKind.REJECTS]
        in_process = len(splits) == 1 and writer.writes_single_split_locally
        log.info(
            "%s: read and written %s rows in %d files (%s) %s in %s%s",
            spec.name,
            count(sum(f.rows for f in files)),
            len(files),
            size(sum(f.bytes for f in files)),
            "by this process" if in_process else "on Spark",
            duration(time.monotonic() - writing_started),
            f"; {count(sum(f.rows for f in rejected))} bad records to the rejects table" if rejected else "",
        )
        notify(RoundPhase.WRITTEN)
        committing_started = time.monotonic()
        if rejected and rejects is not None:
            rejects.replace(rejected, epoch=epoch, table_name=spec.name, attempt=attempt)
        reloaded = reload_done or shape.adopting
        if merge_key is None:
            snapshot_id = lake.commit(
                files,
                epoch=epoch,
                start=start,
                end=end,
                table_name=spec.name,
                attempt=attempt,
                identity=shape.identity,
                reloaded=reloaded,
            )
            committed_files = files
        else:
            merged = lake.merge(
                files,
                merge_key,
                epoch=epoch,
                start=start,
                end=end,
                table_name=spec.name,
                attempt=attempt,
                hot_keys=hot_keys,
                identity=shape.identity,
                reloaded=reloaded,
                target_file_bytes=spec.target_file_size_mb * 1024 * 1024,
                writer=writer,
            )
            snapshot_id, committed_files = merged.snapshot_id, list(merged.added)
            log.info(
                "%s: merged %d row versions by %s: %d rows inserted, %d updated, %d deleted; %d lake files rewritten "
                "%s (%d %s, %s read, %s written)",
                spec.name,
                sum(f.rows for f in files),
                list(merge_key.columns),
                merged.inserted_rows,
                merged.updated_rows,
                merged.deleted_rows,
                merged.removed_files,
                "by this process" if merged.rewritten_in_process else "on Spark",
                merged.rewrite_tasks,
                "task" if merged.rewrite_tasks == 1 else "tasks",
                size(merged.rewrite_bytes_read),
                size(merged.rewrite_bytes_written),
            )
    except FencedError:
        lake.clean_attempt(epoch, attempt, keep=())
        raise
    except Exception as exc:
        _fail(state, spec, exc, secrets, clock(), retry_delay)
        _record_stream(state, source, secrets)
        state_store.save(state)
        raise
    log.info("%s: committed snapshot %s in %s", spec.name, snapshot_id, duration(time.monotonic() - committing_started))
    notify(RoundPhase.COMMITTED)

    # 5. Record.
    now = clock()
    metrics = RoundMetrics(
        rows=sum(f.rows for f in files),
        bytes=sum(f.bytes for f in committed_files),
        files=len(committed_files),
        splits=len(splits),
        duration_seconds=round(time.monotonic() - started, 3),
        lag_seconds=cursor_lag_seconds(end, now),
        backlog_rows=None if plan is None else plan.backlog,
        rejected_rows=sum(f.rows for f in rejected),
        inserted_rows=None if merged is None else merged.inserted_rows,
        updated_rows=None if merged is None else merged.updated_rows,
        deleted_rows=None if merged is None else merged.deleted_rows,
        merge=None if merged is None else _rewrite_metrics(merged),
    )
    state.transition(TableStatus.TIERED)
    state.committed = CommittedSnapshot(snapshot_id, epoch, dict(end), now)
    state.replaced_hot_table = state.adopt_hot_table = None  # the commit recorded the hot table it tiered
    if reconciling:
        state.keys_reconciled_at = now
    state.last_tiered_time = now
    state.last_checked_time = now
    if not state.watermark_blockers and (plan is None or not plan.backlog):
        state.caught_up_time = now
    state.last_round = metrics
    state.consecutive_failures = 0
    state.next_retry_at = None
    state.note = None
    state_store.save(state)
    log.info(
        "%s: recorded epoch %d: %s rows tiered, the lake now at %s; round took %s",
        spec.name,
        epoch,
        count(metrics.rows),
        dict(end),
        duration(metrics.duration_seconds),
    )
    notify(RoundPhase.RECORDED)

    # 6. Clean, only after the commit: files no snapshot references, of attempts that can never commit.
    cleaned = 0
    try:
        cleaned = lake.clean_attempt(epoch, attempt, keep=[f.path for f in committed_files])
        if rejects is not None:
            cleaned += rejects.clean_attempt(epoch, attempt, keep=[f.path for f in rejected])
        cleaned += lake.clean(epoch, since_epoch=state.cleaned_through_epoch)
        state.cleaned_through_epoch = epoch - 1
        state_store.save(state)
        if cleaned:
            log.info("%s: removed %d files of attempts that can no longer commit", spec.name, cleaned)
    except Exception as exc:  # cleanup is best effort: the next committed round retries it
        log.warning("%s: cleaning old attempts failed: %s", spec.name, describe_error(exc, secrets))
    try:
        housekept = source.after_commit(dict(end))
        if housekept:
            log.info("%s: %d tiered source files archived or deleted", spec.name, housekept)
    except Exception as exc:  # best effort too: the next committed round catches up (files, a slot's position)
        log.warning("%s: housekeeping after the commit failed: %s", spec.name, describe_error(exc, secrets))
    _record_stream(state, source, secrets)
    state_store.save(state)
    notify(RoundPhase.CLEANED)
    if spec.eviction.enabled:
        _evict(spec, source, lake, state, state_store, metrics, epoch, clock(), secrets, merge_key)
        notify(RoundPhase.EVICTED)
    return RoundResult(
        spec.name,
        RoundOutcome.TIERED,
        epoch,
        snapshot_id,
        start,
        dict(end),
        metrics,
        state.watermark_blockers,
        cleaned,
        unannounced=unannounced,
    )
