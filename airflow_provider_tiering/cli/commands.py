"""What ``airflow tiering …`` does; the arguments are declared in :mod:`airflow_provider_tiering.cli.definition`.

The CLI runs where Airflow's metadata database is reachable, as its operator, like ``airflow dags list``: it sees
every tiered table (no auth manager is asked). A table is named by its name in its DAG, ``namespace.table`` or its
asset's name or URI; a name two tiered tables share is refused with the candidates listed.
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

import yaml
from airflow.utils.cli import suppress_logs_and_warning
from airflow.utils.providers_configuration_loader import providers_configuration_loaded

from airflow_provider_tiering.control import (
    IfPaused,
    TableOutcome,
    exit_code,
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
from airflow_provider_tiering.status import get_tiering_status, list_tiering_statuses, reset_table, tiering_history

#: The columns of ``status`` as a table; json and yaml carry every field.
STATUS_COLUMNS = (
    "namespace",
    "table",
    "status",
    "epoch",
    "last_tiered_time",
    "lag_seconds",
    "backlog_rows",
    "last_round_rows",
    "consecutive_failures",
    "quarantined",
    "last_error",
    "maintenance",
)
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
    if args.table and args.output in ("json", "yaml"):
        emit(records[0], args.output)
    elif args.output in ("json", "yaml"):
        emit(records, args.output)
    else:
        emit([{**r, "maintenance": _maintenance_cell(r["maintenance"])} for r in records], args.output, STATUS_COLUMNS)


def _maintenance_cell(maintenance: dict[str, Any] | None) -> str:
    """One line for the table view: the last run, the lake's files and snapshots, an error if it failed."""
    if maintenance is None:
        return ""
    text = f"{maintenance['last_outcome']}: {maintenance['data_files']} files, {maintenance['snapshots']} snapshots"
    if maintenance["last_outcome"] == "failed":
        text = f"failed: {maintenance['last_error']}"
    return text


@suppress_logs_and_warning
@providers_configuration_loaded
def history(args: Namespace) -> None:
    try:
        rounds = tiering_history(args.table, limit=args.limit)
    except (TableNotFound, AmbiguousTable) as exc:
        _fail(str(exc))
    emit([r.to_json() for r in rounds], args.output, HISTORY_COLUMNS)


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


@suppress_logs_and_warning
@providers_configuration_loaded
def reset(args: Namespace) -> None:
    try:
        state = reset_table(args.table)
    except (TableNotFound, AmbiguousTable) as exc:
        _fail(str(exc))
    print(f"{args.table}: quarantine lifted; the next round runs", file=sys.stderr)
    emit(
        {"table": state.table, "status": state.status.value, "note": state.note},
        args.output,
        ("table", "status", "note"),
    )
