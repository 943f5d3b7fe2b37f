"""Build tiering DAGs from a list of tables: one DAG of them all (per table a tier task and a maintenance task, plus
a summary task), or one DAG per table on its own clock with a status DAG and a maintenance DAG beside them. Each
stream group the tables read through gets its reader: a DAG of its own on its own clock, or a task before its tables'
tasks in the one DAG."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, TaskGroup

from airflow_provider_tiering.assets import TIER_TASK_ID, database_asset, database_events_alias, stream_asset
from airflow_provider_tiering.core.database_spec import DatabaseSpec
from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec import Declaration, TableSpec, declare
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.operators.database_summary import DatabaseSummaryOperator
from airflow_provider_tiering.operators.discover_tables import DiscoverTablesOperator
from airflow_provider_tiering.operators.maintain_table import MaintainTableOperator
from airflow_provider_tiering.operators.read_changes import ReadChangesOperator, ReadDatabaseChangesOperator
from airflow_provider_tiering.operators.summary import TieringSummaryOperator
from airflow_provider_tiering.operators.tier_table import TierTableOperator
from airflow_provider_tiering.sensors.table_due import TableDueSensor
from airflow_provider_tiering.timetables import StaggeredInterval, phase_of

SUMMARY_TASK_ID = "tiering_summary"


def build_tiering_dag(
    dag_id: str,
    tables: Iterable[TableSpec | Mapping[str, Any]] | str | Path,
    *,
    schedule: Any = None,
    start_date: datetime | None = None,
    max_active_tasks: int | None = None,
    tags: Iterable[str] = ("tiering",),
    wait_until_due: bool = False,
    due_timeout: timedelta | float | None = None,
    due_poke_interval: timedelta | float = 60,
    maintenance: bool = True,
    streams: Iterable[StreamGroupSpec | Mapping[str, Any]] = (),
    **dag_kwargs: Any,
) -> DAG:
    """Tables in, DAG out.

    Every table becomes a :class:`TierTableOperator` whose task id is the table's name; the tables
    run independently (a failing table fails only its own task). A final ``tiering_summary`` task
    runs whatever happened (``trigger_rule="all_done"``), lists each table's outcome and fails the
    DAG run if any table failed. Specs are validated here, so a bad spec fails at DAG parse time
    with the table and the field named. ``tables`` may also be the path of a YAML file listing them.

    With ``wait_until_due=True`` each table becomes a task group named after it: a deferrable
    :class:`TableDueSensor` (``<table>.due``) that waits in the triggerer, holding no worker slot, until
    the table is due and has new rows, then its tier task (``<table>.tier``). ``due_timeout`` bounds the
    wait (a table not due by then skips this run; Airflow's sensor default when None); the hot store is
    probed every ``due_poke_interval`` seconds once the freshness interval has passed. Without it, a table
    that is not due skips at once and the next scheduled run looks again.

    A table whose spec has ``maintenance.enabled`` (the default) also gets a :class:`MaintainTableOperator`
    (``<table>.maintain``) after its tier task, whatever that task's outcome (``trigger_rule="all_done"``). It runs
    at most every ``maintenance.interval_seconds`` and its failure is reported by the summary but fails neither the
    table's tiering nor the DAG run. Each maintenance task that skips still costs a task start in every run: for
    many tables scheduled often, pass ``maintenance=False`` and run :func:`build_maintenance_dag` on a slower
    schedule instead.

    Each stream group (``streams``, named by its tables' ``source.stream``) gets a :class:`ReadChangesOperator`
    (``<group>.read_changes``) before its tables' tasks, which run whatever its outcome (a failed read leaves what
    the change log holds to apply).
    """
    declared = declare(tables, streams)
    specs = declared.tables
    if SUMMARY_TASK_ID in {s.name for s in specs}:
        raise InvalidTableSpec(f"table {SUMMARY_TASK_ID!r}: field 'name': reserved for the summary task")
    dag = DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=start_date or datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_tasks=max_active_tasks or 16,
        tags=list(tags),
        **dag_kwargs,
    )
    with dag:
        table_tasks = []
        maintenance_tasks = []
        readers = _readers(declared)
        for spec in specs:
            if wait_until_due:
                tier, maintain = _waiting_tier_task(spec, due_timeout, due_poke_interval, maintenance)
            else:
                tier = TierTableOperator(table=spec, **_after_reader(spec))
                maintain = _maintenance_task(spec, tier, f"{spec.name}.maintain") if maintenance else None
            group = spec.source.stream_group()
            if group is not None:
                readers[group.name] >> tier
            table_tasks.append(tier)
            if maintain is not None:
                maintenance_tasks.append(maintain)
        summary = TieringSummaryOperator(
            task_id=SUMMARY_TASK_ID,
            table_task_ids=[t.task_id for t in table_tasks],
            maintenance_task_ids=[t.task_id for t in maintenance_tasks],
            tables=specs,
        )
        for task in table_tasks + maintenance_tasks + list(readers.values()):
            task >> summary
    return dag


def _readers(declared: Declaration) -> dict[str, ReadChangesOperator]:
    """A reader task per stream group (``<group>.read_changes``), in the DAG being built."""
    return {
        name: ReadChangesOperator(task_id=f"{name}.read_changes", stream=group, tables=_members(declared, name))
        for name, group in declared.streams.items()
    }


def _members(declared: Declaration, stream: str) -> list[TableSpec]:
    """The tables of a stream group."""
    return [s for s in declared.tables if (g := s.source.stream_group()) is not None and g.name == stream]


def _after_reader(spec: TableSpec) -> dict[str, Any]:
    """A table of a stream group runs after its reader whatever the reader's outcome: it applies what the log holds."""
    return {"trigger_rule": "all_done"} if spec.source.stream_group() is not None else {}


def build_table_dags(
    group: str,
    tables: Iterable[TableSpec | Mapping[str, Any]] | str | Path,
    *,
    status_schedule: Any = timedelta(minutes=1),
    maintenance_schedule: Any = "@hourly",
    start_date: datetime | None = None,
    tags: Iterable[str] = ("tiering",),
    streams: Iterable[StreamGroupSpec | Mapping[str, Any]] = (),
    **dag_kwargs: Any,
) -> dict[str, DAG]:
    """Tables in, one DAG per table out, each on its own clock: no table waits for a sibling.

    Table ``orders`` becomes DAG ``<group>.orders``, scheduled every ``freshness_seconds`` (one run at a time, no
    catch-up), holding the table's :class:`TierTableOperator` (task id: the table's name). Every run of it is due:
    the schedule is the table's clock. A run that finds nothing new in the hot store skips without opening the lake;
    a slow round (a first load) delays only its own table's next run, and a failing table fails only its own DAG's
    runs. Two DAGs serve the group. ``<group>`` refreshes the tables' rows in ``sys.lake_tiering_status`` every
    ``status_schedule``, lists each table's status and fails when one is stale past its bound (the summary task,
    with no table tasks of its own: a failed round fails its own table's run). ``<group>_maintenance`` maintains the
    tables whose spec has ``maintenance.enabled``, every ``maintenance_schedule`` (:func:`build_maintenance_dag`;
    absent when no table has it). Specs are validated here, as :func:`build_tiering_dag` does. Returns the DAGs by
    id; each is registered with Airflow as it is built.

    A stream group (``streams``: each read by one log reader for all of its tables, named by their
    ``source.stream``) becomes DAG ``<group>.<stream>``, running its :class:`ReadChangesOperator` every
    ``read_every_seconds``, one run at a time; its tables' own DAGs apply what it wrote of them (their probe asks
    the group's state document, not the hot database), each every ``freshness_seconds`` less the reader's interval
    (at least half its freshness), so that its data age stays about its freshness. Every DAG runs at a phase of its
    own within its interval (``timetables.py``).
    """
    declared = declare(tables, streams)
    specs = declared.tables
    start = start_date or datetime(2024, 1, 1, tzinfo=UTC)
    dags: dict[str, DAG] = {}
    for name, stream in declared.streams.items():
        reader = DAG(
            dag_id=f"{group}.{name}", schedule=_staggered(f"{group}.{name}", stream.read_every_seconds),
            start_date=start, catchup=False, max_active_runs=1, tags=[*tags, group], **dag_kwargs,
        )  # fmt: skip
        with reader:
            ReadChangesOperator(stream=stream, tables=_members(declared, name))
        dags[reader.dag_id] = reader
    for spec in specs:
        dag = DAG(
            dag_id=f"{group}.{spec.name}",
            schedule=_staggered(f"{group}.{spec.name}", _interval(spec)),
            start_date=start,
            catchup=False,
            max_active_runs=1,
            tags=[*tags, group],
            **dag_kwargs,
        )
        with dag:
            TierTableOperator(table=spec, every_run_due=True)
        dags[dag.dag_id] = dag
    status = DAG(
        dag_id=group, schedule=status_schedule, start_date=start, catchup=False, max_active_runs=1,
        tags=[*tags, group], **dag_kwargs,
    )  # fmt: skip
    with status:
        TieringSummaryOperator(
            task_id=SUMMARY_TASK_ID, table_task_ids=[], tables=specs,
            table_dag_ids={spec.name: f"{group}.{spec.name}" for spec in specs},
        )  # fmt: skip
    dags[status.dag_id] = status
    if any(spec.maintenance.enabled for spec in specs):
        maintenance = build_maintenance_dag(
            f"{group}_maintenance", specs, schedule=maintenance_schedule, start_date=start, tags=[*tags, group],
            **dag_kwargs,
        )  # fmt: skip
        dags[maintenance.dag_id] = maintenance
    return dags


def _interval(spec: TableSpec) -> float:
    """How often a table's DAG runs: every ``freshness_seconds``; a table of a stream group that much less its
    reader's interval (at least half of it), as a change waits for the reader before its table's round."""
    group = spec.source.stream_group()
    if group is None:
        return spec.freshness_seconds
    return max(spec.freshness_seconds - group.read_every_seconds, spec.freshness_seconds / 2)


def _staggered(dag_id: str, seconds: float) -> StaggeredInterval:
    """Every ``seconds``, at the DAG's own phase (``timetables.py``): tables on the same clock do not all queue at
    the same instant."""
    every = timedelta(seconds=seconds)
    return StaggeredInterval(every, phase_of(dag_id, every))


def _maintenance_task(spec: TableSpec, tier: TierTableOperator, task_id: str) -> MaintainTableOperator | None:
    if not spec.maintenance.enabled:
        return None
    maintain = MaintainTableOperator(task_id=task_id, table=spec, trigger_rule="all_done")
    tier >> maintain
    return maintain


def _waiting_tier_task(
    spec: TableSpec, timeout: timedelta | float | None, poke_interval: timedelta | float, maintenance: bool
) -> tuple[TierTableOperator, MaintainTableOperator | None]:
    with TaskGroup(group_id=spec.name, tooltip=f"tier {spec.name} when due"):
        sensor = TableDueSensor(task_id="due", table=spec, timeout=timeout, poke_interval=poke_interval)
        tier = TierTableOperator(task_id="tier", table=spec)
        sensor >> tier
        maintain = _maintenance_task(spec, tier, "maintain") if maintenance else None
    return tier, maintain


def build_maintenance_dag(
    dag_id: str,
    tables: Iterable[TableSpec | Mapping[str, Any]] | str | Path,
    *,
    schedule: Any = None,
    start_date: datetime | None = None,
    max_active_tasks: int | None = None,
    tags: Iterable[str] = ("tiering", "maintenance"),
    **dag_kwargs: Any,
) -> DAG:
    """Lake maintenance of the same tables on a schedule of its own (e.g. ``"@hourly"``): one
    :class:`MaintainTableOperator` per table whose spec has ``maintenance.enabled``, independent of each other.
    Use it with ``build_tiering_dag(..., maintenance=False)``; maintenance and rounds are safe side by side."""
    specs = declare(tables).tables
    dag = DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=start_date or datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_tasks=max_active_tasks or 4,
        tags=list(tags),
        **dag_kwargs,
    )
    with dag:
        for spec in specs:
            if spec.maintenance.enabled:
                MaintainTableOperator(table=spec)
    return dag


#: ``build_database_dag``'s default schedule: every ``probe_every_seconds`` of the declaration.
EVERY_PROBE = "every probe_every_seconds"


def build_database_dag(
    dag_id: str,
    database: DatabaseSpec | Mapping[str, Any],
    *,
    schedule: Any = EVERY_PROBE,
    start_date: datetime | None = None,
    max_active_tasks: int | None = None,
    max_active_runs: int = 2,
    tags: Iterable[str] = ("tiering",),
    **dag_kwargs: Any,
) -> DAG:
    """A whole database declared once, its tables discovered when the DAG runs, each tiered by its own task instance.

    Every ``probe_every_seconds`` (the default schedule; ``schedule=None``: triggered runs only) a run's
    ``discover`` task lists the database's tables with one query, matches them against the declaration and decides
    which run now (:class:`DiscoverTablesOperator`): a new table (its first load), a table whose last run did not
    settle, a changed table once its freshness interval has passed. Its ``tier`` task is mapped over those: one
    :class:`TierTableOperator` instance per table, labelled by the table's name, with its own state, retries,
    failure and ``last_error``; an idle table starts no task. The ``tiering_summary`` task
    (:class:`DatabaseSummaryOperator`) reports every table's outcome, the skipped and dropped tables with their
    reasons, and fails the run when a table failed. The declaration is validated here (a bad one fails when the DAG
    file is parsed, the field named); parsing never reads the hot store.

    Retries and the round timeout of the mapped task are the declaration's ``table_defaults`` (Airflow schedules a
    mapped task's retries from its ``partial``); a table's overrides set the rest of its spec. Two runs at a time
    (``max_active_runs``): a slow round (a first load) does not hold back the next listing, and a table still running
    in one run starts no task in the next.
    """
    spec = DatabaseSpec.parse(database)
    defaults = TableSpec.parse(
        {**dict(spec.table_defaults), "name": "defaults", "lake": {"namespace": "d", "table": "d"},
         "source": {"conn_id": spec.conn_id, "table": "d", "cursor_column": "d"}}
    )  # fmt: skip
    asset = database_asset(spec.name, spec.lake.catalog_conn_id, spec.lake.namespace)
    dag = DAG(
        dag_id=dag_id,
        schedule=_staggered(dag_id, spec.probe_every_seconds) if schedule == EVERY_PROBE else schedule,
        start_date=start_date or datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=max_active_runs,
        max_active_tasks=max_active_tasks or 16,
        tags=list(tags),
        **dag_kwargs,
    )
    with dag:
        discover = DiscoverTablesOperator(database=spec)
        tier = TierTableOperator.partial(
            task_id=TIER_TASK_ID,
            database=spec.name,
            # A task's asset state accessors are its partial's: a streamed table reads its stream's document.
            inlets=[asset, *([stream_asset(spec.stream_group())] if spec.may_stream() else [])],
            outlets=[asset, database_events_alias(spec.name)],
            map_index_template="{{ task.table_spec.name }}",
            **({"trigger_rule": "all_done"} if spec.may_stream() else {}),
            retries=defaults.retries,
            retry_delay=timedelta(seconds=defaults.retry_delay_seconds),
            retry_exponential_backoff=defaults.retry_exponential_backoff,
            max_retry_delay=timedelta(seconds=defaults.max_retry_delay_seconds),
            execution_timeout=(
                None if defaults.round_timeout_seconds is None else timedelta(seconds=defaults.round_timeout_seconds)
            ),
        ).expand(table=discover.output)
        summary = DatabaseSummaryOperator(database=spec)
        discover >> tier >> summary
        discover >> summary
        if spec.may_stream():
            # Its tables in mode change_stream apply what its one stream's reader wrote: it reads before them, and
            # they run whatever its outcome (a failed read leaves what the change log holds to apply).
            reader = ReadDatabaseChangesOperator(stream=spec.stream_group())
            discover >> reader >> tier
            reader >> summary
    return dag
