"""Start tiering rounds on demand: find the DAG that tiers each named table, start one run per DAG that tiers
only those tables (``conf={"tables": [...]}``), and follow their task instances. Used by the CLI and the plugin.

Needs the metadata database (CLI, API server), like :mod:`airflow_provider_tiering.status`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_tiering.core.errors import (
    AmbiguousTable,
    DagPaused,
    InvalidRunConf,
    TableNotFound,
    TriggerFailed,
)
from airflow_provider_tiering.status import (
    ASSET_GROUP,
    TieredAsset,
    list_tiering_statuses,
    matching_assets,
    session_scope,
    tiered_assets,
    tiering_history,
)
from airflow_provider_tiering.status.lake_rows import refresh_lake_rows
from airflow_provider_tiering.status.records import TieringRound

#: Task instance states after which a table's task will not run again in that DAG run.
FINISHED_STATES = frozenset({"success", "skipped", "failed", "upstream_failed", "removed"})
OK_STATES = frozenset({"success", "skipped"})


class TableOutcome(enum.StrEnum):
    """What a triggered table's round came to, from its task's state and the table's state document."""

    TIERED = "tiered"
    #: The run found nothing new because another run of the table tiered its rows after the trigger (a scheduled
    #: run, or one somebody else started): the lake has them.
    TIERED_BY_ANOTHER_RUN = "tiered_by_another_run"
    NOTHING_NEW = "nothing_new"
    HELD_BACK = "held_back"  # open transactions kept rows from being tiered (some may have been)
    QUARANTINED = "quarantined"
    FAILED = "failed"
    UNFINISHED = "unfinished"  # still running when the wait ended


#: The exit code of ``airflow tiering trigger --wait`` for each outcome (documented in docs/operations.md).
EXIT_CODES = {
    TableOutcome.TIERED: 0,
    TableOutcome.TIERED_BY_ANOTHER_RUN: 0,
    TableOutcome.FAILED: 1,
    TableOutcome.UNFINISHED: 2,
    TableOutcome.NOTHING_NEW: 3,
    TableOutcome.HELD_BACK: 4,
    TableOutcome.QUARANTINED: 5,
}
#: Several tables: the exit code of the first outcome in this order that any of them had.
_SEVERITY = (
    TableOutcome.FAILED,
    TableOutcome.UNFINISHED,
    TableOutcome.QUARANTINED,
    TableOutcome.HELD_BACK,
    TableOutcome.NOTHING_NEW,
    TableOutcome.TIERED_BY_ANOTHER_RUN,
    TableOutcome.TIERED,
)


def exit_code(outcomes: Iterable[TableOutcome]) -> int:
    found = set(outcomes)
    return next((EXIT_CODES[o] for o in _SEVERITY if o in found), 0)


class IfPaused(enum.StrEnum):
    """What :func:`trigger_tables` does when a DAG to run is paused."""

    #: Start the run anyway; it is queued until the DAG is unpaused (what ``airflow dags trigger`` does).
    QUEUE = "queue"
    #: Start nothing and raise :class:`DagPaused` (``airflow tiering trigger --wait``: a wait that cannot end).
    REFUSE = "refuse"
    #: Unpause the DAG, then start the run (``--unpause``).
    UNPAUSE = "unpause"


@dataclass(frozen=True)
class TableTask:
    """Where a tiered table is tiered: the DAG and the task that emit its asset."""

    table: str
    dag_id: str
    task_id: str


@dataclass
class TriggeredRun:
    """A DAG run started for some of the DAG's tables; ``tasks`` maps each table to its tier task id."""

    dag_id: str
    run_id: str
    tasks: dict[str, str] = field(default_factory=dict)
    #: The DAG is paused: the run waits until it is unpaused.
    paused: bool = False
    #: The DAG was paused and :func:`trigger_tables` unpaused it (``IfPaused.UNPAUSE``).
    unpaused: bool = False
    #: When the run was asked for (rounds of its tables committed since then by other runs are reported).
    requested_at: datetime | None = None
    #: Each table's asset name (unique, where a table's name may not be).
    assets: dict[str, str] = field(default_factory=dict)
    #: The run took the place of the scheduled run the unpause would have started at once (see
    #: :func:`trigger_tables`): that run's logical date.
    in_place_of_scheduled: datetime | None = None


def table_tasks(*, session: Any | None = None) -> dict[str, list[TableTask]]:
    """Every tiered table by name, with the DAG(s) and task(s) that tier it, from the parsed DAGs' outlets."""
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from sqlalchemy import select

    with session_scope(session) as s:
        rows = s.execute(
            select(AssetModel.extra, TaskOutletAssetReference.dag_id, TaskOutletAssetReference.task_id)
            .join(TaskOutletAssetReference, TaskOutletAssetReference.asset_id == AssetModel.id)
            .where(AssetModel.group == ASSET_GROUP)
        ).all()
    found: dict[str, list[TableTask]] = {}
    for extra, dag_id, task_id in rows:
        name = (extra or {}).get("tiered_table")
        if name:
            found.setdefault(name, []).append(TableTask(name, dag_id, task_id))
    return found


def trigger_tables(
    tables: Iterable[str],
    *,
    triggered_by: str = "cli",
    user: str | None = None,
    if_paused: IfPaused = IfPaused.QUEUE,
    session: Any | None = None,
) -> list[TriggeredRun]:
    """Start, for each DAG involved, one run that tiers only the named tables: each named by its name in its DAG,
    ``namespace.table``, or its asset's name or URI (see :func:`airflow_provider_tiering.status.get_tiering_status`).
    The tables' rows of their catalogs' status tables (``sys.lake_tiering_status``) are refreshed (never raising);
    each run's summary refreshes them again when it ends.

    Raises:
        TableNotFound: no DAG tiers a table of that name (the message lists the closest names).
        AmbiguousTable: the name is several DAGs' tables (name it as ``namespace.table``).
        DagPaused: with ``if_paused=REFUSE``, a DAG involved is paused (nothing was started).
        InvalidRunConf: no table is named.
        TriggerFailed: Airflow did not start a run.
    """
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.models.dag import DagModel
    from airflow.utils.types import DagRunTriggeredByType

    wanted = list(dict.fromkeys(tables))
    if not wanted:
        raise InvalidRunConf("name at least one table")
    requested_at = datetime.now(UTC)
    with session_scope(session) as s:
        by_dag, asset_names = _tasks_by_dag(wanted, tiered_assets(s))
        paused = sorted(dag_id for dag_id in by_dag if (model := s.get(DagModel, dag_id)) and model.is_paused)
        if paused and if_paused is IfPaused.REFUSE:
            which = f"DAG {paused[0]} is" if len(paused) == 1 else f"DAGs {', '.join(paused)} are"
            raise DagPaused(
                f"{which} paused, so a run would wait until it is unpaused: unpause it "
                f"({'; '.join(f'airflow dags unpause {d}' for d in paused)}), or pass --unpause"
            )
        unpausing = paused if if_paused is IfPaused.UNPAUSE else []
        runs = []
        for dag_id, tasks in by_dag.items():
            # An unpause starts the DAG's overdue scheduled run at once, which would race this one for the tables
            # (and often win, leaving this run nothing new): this run takes that run's logical date, so the
            # scheduler, finding a run there, starts none and moves on to the next interval.
            in_place_of = (
                _overdue_scheduled_run(s, s.get(DagModel, dag_id), requested_at) if dag_id in unpausing else None
            )
            dag_run = trigger_dag(
                dag_id,
                triggered_by=DagRunTriggeredByType(triggered_by),
                triggering_user_name=user,
                conf={"tables": sorted(tasks)},
                logical_date=in_place_of,
                replace_microseconds=False,
                note=f"tiering {', '.join(sorted(tasks))} on demand",
                session=s,
            )
            if dag_run is None:
                raise TriggerFailed(f"DAG {dag_id!r} did not start a run")
            unpaused = dag_id in unpausing
            runs.append(
                TriggeredRun(
                    dag_id, dag_run.run_id, dict(tasks), dag_id in paused and not unpaused, unpaused, requested_at,
                    {t: asset_names[t] for t in tasks}, in_place_of,
                )
            )  # fmt: skip
        for dag_id in unpausing:  # after the runs exist, in the same transaction
            s.get(DagModel, dag_id).is_paused = False
        s.flush()
        triggered = {name for run in runs for name in run.assets.values()}
        refresh_lake_rows([t for t in list_tiering_statuses(session=s) if t.asset_name in triggered])
    return runs


def _tasks_by_dag(wanted: list[str], assets: Sequence[TieredAsset]) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Each DAG involved with the tasks (by table) it runs for ``wanted``, and each table's asset name."""
    by_dag: dict[str, dict[str, str]] = {}
    asset_names: dict[str, str] = {}
    for ref in wanted:
        places = [a for a in matching_assets(ref, assets) if a.dag_id is not None and a.task_id is not None]
        if not places:
            raise TableNotFound(f"table {ref!r} is tiered by no DAG now (its DAG was removed or not parsed yet)")
        if len({(a.dag_id, a.task_id) for a in places}) > 1:
            names = "; ".join(a.describe() for a in places)
            raise AmbiguousTable(f"{ref!r} names {len(places)} tiered tables: {names}. Name one as <namespace>.<table>")
        place = places[0]
        assert place.dag_id is not None and place.task_id is not None  # kept above
        by_dag.setdefault(place.dag_id, {})[place.table] = place.task_id
        asset_names[place.table] = place.name
    return by_dag, asset_names


def _overdue_scheduled_run(session: Any, model: Any, now: datetime) -> datetime | None:
    """The logical date of the scheduled run the scheduler would start as soon as the DAG is unpaused (its next run
    is due and no run holds that date yet: the scheduler starts none there either), or None."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    if model is None or model.next_dagrun is None or model.next_dagrun_create_after is None:
        return None
    due: datetime = model.next_dagrun_create_after
    logical: datetime = model.next_dagrun
    taken = session.scalar(select(DagRun.id).where(DagRun.dag_id == model.dag_id, DagRun.logical_date == logical))
    return logical if due <= now and taken is None else None


def task_states(runs: Iterable[TriggeredRun], *, session: Any | None = None) -> dict[str, str | None]:
    """The state of each triggered table's task instance (None while not yet scheduled)."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    states: dict[str, str | None] = {}
    with session_scope(session) as s:
        for run in runs:
            found = dict(
                s.execute(
                    select(TaskInstance.task_id, TaskInstance.state).where(
                        TaskInstance.dag_id == run.dag_id,
                        TaskInstance.run_id == run.run_id,
                        TaskInstance.task_id.in_(list(run.tasks.values())),
                    )
                ).all()
            )
            for table, task_id in run.tasks.items():
                state = found.get(task_id)
                states[table] = None if state is None else str(getattr(state, "value", state))
    return states


def wait_for_tables(
    runs: list[TriggeredRun],
    *,
    timeout: float | None = None,
    poll_interval: float = 2.0,
    on_change: Callable[[str, str | None], None] | None = None,
) -> dict[str, str | None]:
    """Poll until every triggered table's task has finished (or ``timeout`` seconds passed); the final states."""
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: dict[str, str | None] = {}
    while True:
        states = task_states(runs)
        for table, state in states.items():
            if on_change is not None and seen.get(table, "<none>") != state:
                on_change(table, state)
        seen = states
        if all(state in FINISHED_STATES for state in states.values()):
            return states
        if deadline is not None and time.monotonic() >= deadline:
            return states
        time.sleep(poll_interval)


def table_outcomes(
    runs: Iterable[TriggeredRun], states: dict[str, str | None], *, session: Any | None = None
) -> dict[str, TableOutcome]:
    """Each triggered table's outcome, once its task has finished (``states``: :func:`task_states`)."""
    runs = list(runs)
    documents = {(s.dag_id, s.table): s.state for s in list_tiering_statuses(session=session)}
    outcomes: dict[str, TableOutcome] = {}
    for run in runs:
        for table in run.tasks:
            task_state, document = states.get(table), documents.get((run.dag_id, table))
            if task_state not in FINISHED_STATES:
                outcomes[table] = TableOutcome.UNFINISHED
            elif task_state not in OK_STATES:
                outcomes[table] = TableOutcome.FAILED
            elif document is not None and document.quarantined_since is not None:
                outcomes[table] = TableOutcome.QUARANTINED
            elif document is not None and document.watermark_blockers:
                outcomes[table] = TableOutcome.HELD_BACK
            elif task_state == "success":
                outcomes[table] = TableOutcome.TIERED
            elif other_rounds(run, table, session=session):
                outcomes[table] = TableOutcome.TIERED_BY_ANOTHER_RUN
            else:
                outcomes[table] = TableOutcome.NOTHING_NEW
    return outcomes


def other_rounds(run: TriggeredRun, table: str, *, session: Any | None = None) -> list[TieringRound]:
    """The rounds of ``table`` that other runs committed since ``run`` was asked for, oldest first: what left a run
    that found nothing new nothing to do."""
    if run.requested_at is None or table not in run.assets:
        return []
    rounds = tiering_history(run.assets[table], limit=20, session=session, read_lake=False)
    since = [r for r in rounds if r.timestamp >= run.requested_at and r.run_id != run.run_id and r.rows > 0]
    return sorted(since, key=lambda r: r.timestamp)
