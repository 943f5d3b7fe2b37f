"""What ``airflow tiering …`` does; the arguments are declared in :mod:`airflow_provider_tiering.cli.definition`.

The CLI runs where Airflow's metadata database is reachable, as its operator, like ``airflow dags list``: it sees
every tiered table (no auth manager is asked). A table is named by its name in its DAG, ``namespace.table`` or its
asset's name or URI; a name two tiered tables share is refused with the candidates listed.
"""

from __future__ import annotations

import json
import sys
import textwrap
from argparse import Namespace
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import yaml
from airflow.utils.cli import suppress_logs_and_warning
from airflow.utils.providers_configuration_loader import providers_configuration_loaded

from airflow_provider_tiering.cli import status_table
from airflow_provider_tiering.control import (
    IfPaused,
    TableOutcome,
    TriggeredRun,
    exit_code,
    other_rounds,
    table_outcomes,
    trigger_tables,
    wait_for_tables,
)
from airflow_provider_tiering.core.errors import (
    AmbiguousTable,
    DagPaused,
    InvalidRunConf,
    TableNotFound,
    TriggerFailed,
)
from airflow_provider_tiering.core.units import duration, timestamp
from airflow_provider_tiering.status import get_tiering_status, list_tiering_statuses, reset_table, tiering_history

HISTORY_COLUMNS = (
    "timestamp",
    "epoch",
    "rows",
    "files",
    "duration_seconds",
    "end_offsets",
    "run_id",
    "source",
    "recovered",
)


def _short(value: Any, width: int = 60) -> str:
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def emit(records: Sequence[dict[str, Any]] | dict[str, Any], output: str, columns: Sequence[str] = ()) -> None:
    """Print records: json and yaml whole and typed (for scripts), table and plain as chosen columns."""
    if output == "json":
        print(json.dumps(records, indent=2, default=str))
        return
    if output == "yaml":
        print(yaml.safe_dump(json.loads(json.dumps(records, default=str)), sort_keys=False), end="")
        return
    from airflow.cli.simple_table import AirflowConsole

    rows = [records] if isinstance(records, dict) else list(records)
    shown = [{c: _short(r.get(c)) for c in (columns or r.keys())} for r in rows]
    if output == "plain":
        AirflowConsole().print_as_plain_table(shown)
    else:
        AirflowConsole().print_as_table(shown)


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(1)


@suppress_logs_and_warning
@providers_configuration_loaded
def status(args: Namespace) -> None:
    if args.table:
        try:
            found = [get_tiering_status(args.table)]
        except (TableNotFound, AmbiguousTable) as exc:
            _fail(str(exc))
    else:
        found = list_tiering_statuses(namespace=args.namespace, status=args.status)
    records = [s.to_json() for s in found]
    if args.output in ("json", "yaml"):
        emit(records[0] if args.table else records, args.output)
    elif args.table:
        print(status_table.render_one(records[0]))
    elif not records:
        print("no tiered tables" + (" match" if args.namespace or args.status else ""), file=sys.stderr)
    else:
        print(status_table.render(records, header=args.output == "table"))
        if args.output == "table":
            print("\n" + textwrap.fill(status_table.LEGEND, status_table.terminal_width()))


@suppress_logs_and_warning
@providers_configuration_loaded
def database(args: Namespace) -> None:
    from airflow_provider_tiering.status.databases import COLUMNS, list_database_tables

    try:
        records = list_database_tables(args.database, args.discovery)
    except TableNotFound as exc:
        _fail(str(exc))
    if not records and args.output not in ("json", "yaml"):
        print("no tables" + (" match" if args.discovery else ""), file=sys.stderr)
        return
    emit(records, args.output, COLUMNS)


@suppress_logs_and_warning
@providers_configuration_loaded
def history(args: Namespace) -> None:
    try:
        rounds = tiering_history(args.table, limit=args.limit)
    except (TableNotFound, AmbiguousTable) as exc:
        _fail(str(exc))
    records = [r.to_json() for r in rounds]
    if args.output in ("table", "plain"):
        records = [
            {
                **r,
                "timestamp": timestamp(datetime.fromisoformat(r["timestamp"]) if r["timestamp"] else None),
                "duration_seconds": duration(r["duration_seconds"]),
            }
            for r in records
        ]
    emit(records, args.output, HISTORY_COLUMNS)


@suppress_logs_and_warning
@providers_configuration_loaded
def trigger(args: Namespace) -> None:
    # A paused DAG queues the run, as `airflow dags trigger` does; a wait for it could not end, so --wait refuses.
    if_paused = IfPaused.UNPAUSE if args.unpause else IfPaused.REFUSE if args.wait else IfPaused.QUEUE
    try:
        runs = trigger_tables(args.tables, triggered_by="cli", if_paused=if_paused)
    except (TableNotFound, AmbiguousTable, DagPaused, InvalidRunConf, TriggerFailed) as exc:
        _fail(str(exc))
    for run in runs:
        if run.unpaused:
            print(f"{run.dag_id}: the DAG was paused; unpaused it", file=sys.stderr)
        if run.in_place_of_scheduled is not None:
            print(
                f"{run.dag_id}: this run takes the place of the scheduled run of "
                f"{run.in_place_of_scheduled.isoformat()} that unpausing would have started beside it",
                file=sys.stderr,
            )
        print(f"{run.dag_id}: started run {run.run_id} for {', '.join(run.tasks)}", file=sys.stderr)
        if run.paused:
            print(
                f"{run.dag_id}: the DAG is paused; the run waits until it is unpaused "
                f"(airflow dags unpause {run.dag_id})",
                file=sys.stderr,
            )
    if not args.wait:
        emit([{"dag_id": r.dag_id, "run_id": r.run_id, "tables": list(r.tasks)} for r in runs], args.output)
        return
    states = wait_for_tables(
        runs,
        timeout=args.timeout or None,
        on_change=lambda table, state: print(f"{table}: {state or 'not scheduled yet'}", file=sys.stderr),
    )
    outcomes = table_outcomes(runs, states)
    for run in runs:
        for table in run.tasks:
            if outcomes.get(table) is TableOutcome.TIERED_BY_ANOTHER_RUN:
                print(f"{table}: this run found nothing new: {_rounds_meanwhile(run, table)}", file=sys.stderr)
    emit([{"table": t, "state": s, "outcome": outcomes[t].value} for t, s in states.items()], args.output)
    unfinished = [t for t, o in outcomes.items() if o is TableOutcome.UNFINISHED]
    if unfinished:
        print(f"timed out waiting for {', '.join(unfinished)}", file=sys.stderr)
    for outcome in (TableOutcome.FAILED, TableOutcome.QUARANTINED, TableOutcome.HELD_BACK):
        named = [t for t, o in outcomes.items() if o is outcome]
        if named:
            print(f"{outcome.value.replace('_', ' ')}: {', '.join(named)}", file=sys.stderr)
    code = exit_code(outcomes.values())
    if code:
        raise SystemExit(code)


def _rounds_meanwhile(run: TriggeredRun, table: str) -> str:
    """What other runs of ``table`` tiered since ``run`` was asked for, in words."""
    rounds = other_rounds(run, table)
    said = "; ".join(
        f"run {r.run_id} of {r.dag_id} tiered {r.rows:,} rows at {r.timestamp.strftime('%H:%M:%S')} (epoch {r.epoch})"
        for r in rounds
    )
    return f"meanwhile {said}" if said else "another run tiered its rows meanwhile"


@suppress_logs_and_warning
@providers_configuration_loaded
def reset(args: Namespace) -> None:
    adopt = bool(getattr(args, "adopt_hot_table", False))
    try:
        state = reset_table(args.table, adopt_hot_table=adopt)
    except (TableNotFound, AmbiguousTable, ValueError) as exc:
        _fail(str(exc))
    then = "tiers the new hot table from its start, keeping the lake's rows" if adopt else "runs"
    print(f"{args.table}: quarantine lifted; the next round {then}", file=sys.stderr)
    emit(
        {"table": state.table, "status": state.status.value, "note": state.note},
        args.output,
        ("table", "status", "note"),
    )
