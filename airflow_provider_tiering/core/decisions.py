"""What a table's task does now: run a round, or skip it and why. Decided from the state document alone, plus,
at most once, a cheap probe of the hot store.

One decision serves the tier operator and both modes of the due sensor; the Airflow layer only maps it to a task
outcome. A table is due once ``freshness_seconds`` have passed since its last tiered round (at once when never
tiered, failed, or left mid-round); a due table at rest whose hot store holds nothing beyond its committed offsets,
and whose hot table is the one, in the shape, the last round recorded, has nothing new. A probe never skips a check
the round would make: a table dropped and created again, truncated, rewritten or reshaped runs its round, which
follows the change or refuses it. A quarantined table is refused; a DAG run that names its tables runs those, due or
not, and skips the others. Where the DAG's schedule is the table's own clock (one DAG per table, scheduled every
``freshness_seconds``), every run is due: measuring the interval again from the last round's end would find the
next run a few seconds early and skip it, doubling the data age.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import BehindLook, Probe
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus

log = logging.getLogger(__name__)

# A table resting in one of these states has a freshness clock; any other state means "act now"
# (never tiered, failed and retrying, or an attempt that must be recovered).
_RESTING = frozenset({TableStatus.TIERED, TableStatus.SCHEDULED})


class TaskAction(enum.StrEnum):
    """What a table's task does now."""

    RUN = "run"
    #: Due, at rest: run only if the hot store has rows beyond ``probe_offsets`` (see :meth:`TaskDecision.probed`).
    PROBE = "probe"
    NOT_SELECTED = "not_selected"
    NOT_DUE = "not_due"
    NOTHING_NEW = "nothing_new"
    QUARANTINED = "quarantined"


@dataclass(frozen=True)
class TaskDecision:
    """A decision with its reason (for the task log) and what a waiting sensor needs (due time, offsets)."""

    table: str
    action: TaskAction
    reason: str
    due_at: datetime | None = None
    #: The committed offsets of the state (what the hot store is probed beyond).
    committed: Offsets | None = None
    #: The stretch below them that the hot store emptied, as the state knows it (or the probe found it).
    emptied: JsonObject | None = None
    #: When a merge table's key reconciliation falls due: from then on the table runs without new rows.
    reconcile_at: datetime | None = None
    #: The hot table's identity and shape as the last round recorded them (``TableState.hot_shape``): a probe that
    #: finds another runs the round.
    hot_shape: JsonObject | None = None

    @property
    def runs(self) -> bool:
        return self.action is TaskAction.RUN

    def probed(self, probe: Probe) -> TaskDecision:
        """The decision once the hot store has answered a ``PROBE`` (see :meth:`Source.probe`)."""
        if self.action is not TaskAction.PROBE:
            return self
        behind = probe.behind
        if probe.changed is not None:
            reason = (
                f"{self.table}: due, and its hot table changed since the last round ({probe.changed}): the round "
                "follows the change or refuses it"
            )
            return replace(self, action=TaskAction.RUN, reason=reason)
        if behind.arrived:
            reason = f"{self.table}: due, with {behind.arrived} row(s) behind {self.committed} ({behind.where})"
            return replace(self, action=TaskAction.RUN, reason=reason, emptied=behind.emptied)
        if probe.has_rows:
            reason = f"{self.table}: due, with rows beyond {self.committed}"
            return replace(self, action=TaskAction.RUN, reason=reason, emptied=behind.emptied)
        return replace(
            self,
            action=TaskAction.NOTHING_NEW,
            reason=f"{self.table}: nothing to tier; the hot store has no row beyond {self.committed}",
            emptied=behind.emptied,
        )


def due_at(state: TableState | None, freshness_seconds: float) -> datetime | None:
    """When the table next needs a round; None means now."""
    if state is None or state.status not in _RESTING or state.last_tiered_time is None:
        return None
    return state.last_tiered_time + timedelta(seconds=freshness_seconds)


def is_due(state: TableState | None, freshness_seconds: float, now: datetime) -> bool:
    """Due once ``freshness_seconds`` have passed since the last tiered round (or at once when never tiered,
    failed, or left mid-round)."""
    when = due_at(state, freshness_seconds)
    return when is None or now >= when


def _at_rest(state: TableState | None) -> bool:
    """A table never seen, or at rest after a good round with nothing pending (no failure, quarantine or
    unconfirmed watermark): if its hot store has no row beyond the committed offsets, a round has nothing to do.
    Any other table runs its round, which retries, recovers or repairs."""
    return state is None or (
        state.status in _RESTING
        and state.consecutive_failures == 0
        and state.quarantined_since is None
        and state.watermark_candidate is None
    )


def quarantine_reason(name: str, state: TableState) -> str:
    """Why a quarantined table is not tiered, and what to do."""
    since = state.quarantined_since.isoformat() if state.quarantined_since else "?"
    reason = (
        f"table {name!r} is quarantined since {since} after {state.consecutive_failures} consecutive failed "
        f"rounds (last error: {state.last_error}); reset it to tier it again"
    )
    return f"{reason} ({state.note})" if state.note else reason


def decide_task(
    spec: TableSpec,
    state: TableState | None,
    *,
    now: datetime,
    selected: Sequence[str] | None,
    every_run_due: bool = False,
) -> TaskDecision:
    """Decide what the table's task does now, from its state document and the DAG run's selection (None: every
    table, when due; ``every_run_due``: the schedule is the table's clock). A ``PROBE`` decision still needs
    :func:`probe_hot_store` and :meth:`TaskDecision.probed`."""
    name = spec.name
    committed = None if state is None or state.committed is None else state.committed.end_offsets
    emptied = None if state is None else state.emptied_range
    if selected is not None and name not in selected:
        reason = f"{name}: not among the tables this run tiers ({', '.join(selected)})"
        return TaskDecision(name, TaskAction.NOT_SELECTED, reason)
    if state is not None and state.quarantined_since is not None:
        return TaskDecision(name, TaskAction.QUARANTINED, quarantine_reason(name, state))
    if selected is not None:
        return TaskDecision(name, TaskAction.RUN, f"{name}: named in the run's conf", committed=committed)
    reconcile_every = None if spec.merge is None else spec.merge.reconcile_keys_every_seconds
    reconcile_at = None
    if state is not None and state.keys_reconciled_at is not None and reconcile_every is not None:
        reconcile_at = state.keys_reconciled_at + timedelta(seconds=reconcile_every)
    when = due_at(state, spec.freshness_seconds)
    if when is not None and now < when and not every_run_due:
        reason = (
            f"{name}: not due until {when.isoformat()} "
            f"(freshness {spec.freshness_seconds:g}s since the last tiered round)"
        )
        return TaskDecision(
            name, TaskAction.NOT_DUE, reason, due_at=when, committed=committed, reconcile_at=reconcile_at
        )
    if state is not None and state.committed is not None and state.keys_reconciliation_due(reconcile_every, now):
        # Hard deletes leave no row beyond the offsets for a probe to find: a due reconciliation runs the round.
        return TaskDecision(name, TaskAction.RUN, f"{name}: due, and its keys' reconciliation too", committed=committed)
    if state is not None and state.committed is not None and state.hot_shape is None:
        # Nothing to compare the hot table with (a state document older than the record): the round checks it.
        reason = f"{name}: due; no round recorded its hot table's shape yet, so the round checks it"
        return TaskDecision(name, TaskAction.RUN, reason, committed=committed)
    if _at_rest(state):
        reason = f"{name}: due; new rows?"
        return TaskDecision(
            name, TaskAction.PROBE, reason, committed=committed, emptied=emptied, reconcile_at=reconcile_at,
            hot_shape=None if state is None else state.hot_shape,
        )  # fmt: skip
    return TaskDecision(name, TaskAction.RUN, f"{name}: due", committed=committed)


#: A hot store's probe (``Source.probe``): the committed offsets, the emptied stretch, the recorded shape.
ProbeFunction = Callable[[Offsets | None, JsonObject | None, JsonObject | None], Probe]


def probe_hot_store(probe: ProbeFunction, decision: TaskDecision) -> TaskDecision:
    """Answer a ``PROBE`` decision with the hot store's ``probe`` (``Source.probe``: the hot table's identity and
    shape against the last round's record, rows arrived behind the committed offsets, rows beyond them). A probe that
    fails counts as "there may be rows": the round then reports and records the error (it owns the table's state,
    retries and quarantine)."""
    if decision.action is not TaskAction.PROBE:
        return decision
    try:
        return decision.probed(probe(decision.committed, decision.emptied, decision.hot_shape))
    except Exception as exc:
        log.warning("%s: probing the hot store failed, the round will tell: %s", decision.table, describe_error(exc))
        return decision.probed(Probe(True, BehindLook(emptied=decision.emptied)))


def record_decision(state: TableState | None, decision: TaskDecision, now: datetime) -> TableState | None:
    """The state as the decision leaves it (to be saved), or None when it changes nothing: a table found not due
    rests in SCHEDULED until its freshness interval passes; one with nothing new settles at rest, checked now; a
    probe that found the hot store's newest rows gone below the offsets keeps that stretch watched."""
    if decision.action is TaskAction.RUN and state is not None and decision.emptied != state.emptied_range:
        state.emptied_range = decision.emptied
        return state
    if decision.action is TaskAction.NOT_DUE and state is not None:
        if state.status is TableStatus.TIERED:
            state.transition(TableStatus.SCHEDULED)
        state.last_checked_time = now
        return state
    if decision.action is TaskAction.NOTHING_NEW:
        state = state or TableState(table=decision.table)
        state.walk_to_idle()
        state.last_checked_time = now
        if not state.watermark_blockers:
            state.caught_up_time = now
        state.emptied_range = decision.emptied
        return state
    return None
