"""Start tiering rounds on demand: find the DAG that tiers each named table, start one run per DAG that tiers
only those tables (``conf={"tables": [...]}``), and follow their task instances (a declared database's table: the
instance of the mapped tier task its run's discovery gave it). Used by the CLI and the plugin.

Needs the metadata database (CLI, API server), like :mod:`airflow_provider_tiering.status`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_tiering.core.database_state import FINISHED_STATES
from airflow_provider_tiering.core.errors import (
    AmbiguousTable,
    DagPaused,
    InvalidRunConf,
    TableNotFound,
    TriggerFailed,
)
from airflow_provider_tiering.status import (
    TieredAsset,
    known_tables,
    list_tiering_statuses,
    matching_assets,
    session_scope,
    tiering_history,
)
from airflow_provider_tiering.status.lake_rows import refresh_lake_rows
from airflow_provider_tiering.status.records import TieringRound

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
    #: Tables of a declared database: each runs as one instance of the mapped task in ``tasks``, the one the run's
    #: discovery gave it (its place in what the ``discover`` task returned).
    mapped: list[str] = field(default_factory=list)


def table_tasks(*, session: Any | None = None) -> dict[str, list[TableTask]]:
    """Every tiered table by name, with the DAG(s) and task(s) that tier it: the parsed DAGs' outlets, and the
    tables their discoveries found in declared databases."""
    with session_scope(session) as s:
        assets = known_tables(s)
    found: dict[str, list[TableTask]] = {}
    for asset in assets:
        if asset.dag_id is not None and asset.task_id is not None:
            found.setdefault(asset.table, []).append(TableTask(asset.table, asset.dag_id, asset.task_id))
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
        assets = known_tables(s)
        by_dag, asset_names = _tasks_by_dag(wanted, assets)
        in_databases = {a.table for a in assets if a.database is not None and a.table in asset_names}
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
                    {t: asset_names[t] for t in tasks}, in_place_of, sorted(in_databases.intersection(tasks)),
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
    """The state of each triggered table's task instance (None while not yet scheduled). A declared database's table
    whose run ended without an instance for it (its discovery no longer tiered it) is ``removed``."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    states: dict[str, str | None] = {}
    with session_scope(session) as s:
        for run in runs:
            found = {
                (task_id, map_index): None if state is None else str(getattr(state, "value", state))
                for task_id, map_index, state in s.execute(
                    select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                        TaskInstance.dag_id == run.dag_id,
                        TaskInstance.run_id == run.run_id,
                        TaskInstance.task_id.in_(list(run.tasks.values())),
                    )
                ).all()
            }
            places = _mapped_places(run, s) if run.mapped else {}
            for table, task_id in run.tasks.items():
                if table not in run.mapped:
                    states[table] = found.get((task_id, -1))
                elif table in places:
                    states[table] = found.get((task_id, places[table]))
                else:
                    states[table] = "removed" if _run_finished(run, s) else None
    return states


def _mapped_places(run: TriggeredRun, session: Any) -> dict[str, int]:
    """Each table's map index in ``run``: its place in the specs its ``discover`` task returned (empty before)."""
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    from airflow_provider_tiering.assets import DISCOVER_TASK_ID

    row = session.execute(
        select(XComModel.value).where(
            XComModel.dag_id == run.dag_id,
            XComModel.run_id == run.run_id,
            XComModel.task_id == DISCOVER_TASK_ID,
            XComModel.map_index == -1,
            XComModel.key == "return_value",
        )
    ).first()
    specs = [] if row is None else XComModel.deserialize_value(row) or []
    return {spec["name"]: index for index, spec in enumerate(specs) if isinstance(spec, dict) and "name" in spec}


def _run_finished(run: TriggeredRun, session: Any) -> bool:
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    state = session.scalar(select(DagRun.state).where(DagRun.dag_id == run.dag_id, DagRun.run_id == run.run_id))
    return str(getattr(state, "value", state)) in ("success", "failed")


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
