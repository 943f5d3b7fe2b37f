"""``airflow tiering status|history|trigger|reset``: the provider's CLI commands (``cli`` in provider info).

Only argument definitions live here: ``airflow`` builds its parser from them at every start, so the
commands themselves are imported lazily, when run.
"""

from __future__ import annotations

from airflow.cli.cli_config import ARG_VERBOSE, ActionCommand, Arg, GroupCommand, lazy_load_command

_COMMANDS = "airflow_provider_tiering.cli.commands"
OUTPUTS = ("table", "json", "yaml", "plain")

ARG_OUTPUT = Arg(("-o", "--output"), help="output format (default: table)", choices=OUTPUTS, default="table")
_TABLE_HELP = (
    "a tiered table: its name (its task in the DAG), <namespace>.<table>, or its asset's name or URI; "
    "a name two tiered tables share is refused"
)
ARG_TABLE_OPTIONAL = Arg(("table",), help=f"{_TABLE_HELP}; all tables when left out", nargs="?", default=None)
ARG_TABLE = Arg(("table",), help=_TABLE_HELP)
ARG_TABLES = Arg(
    ("tables",),
    help="the tiered tables to tier now: names in their DAG, <namespace>.<table>, or asset names or URIs",
    nargs="+",
)
ARG_NAMESPACE = Arg(("--namespace",), help="only tables of this lake namespace")
ARG_STATUS = Arg(
    ("--status",),
    help="only tables in this status, e.g. FAILED",
    type=str.upper,
    choices=("NEW", "INITIALIZED", "SCHEDULED", "PENDING", "TIERING", "TIERED", "FAILED"),
)
ARG_DATABASE = Arg(("database",), help="a declared database's name; all of them when left out", nargs="?", default=None)
ARG_DISCOVERY = Arg(
    ("--discovery",), help="only tables of this place in their database", choices=("tiered", "skipped", "dropped")
)
ARG_LIMIT = Arg(("--limit",), help="how many recent rounds (default: 20)", type=int, default=20)
#: How long ``trigger --wait`` waits by default: a round's own default deadline (``round_timeout_seconds``).
DEFAULT_WAIT_TIMEOUT = 3600.0
ARG_WAIT = Arg(
    ("--wait",),
    help=(
        "return when the tables' rounds have finished, with an exit code telling the worst outcome (0 tiered, by "
        "this run or another one since the trigger, 1 failed, 2 timed out, 3 nothing new, 4 held back, "
        "5 quarantined); a paused DAG is refused (exit 1) unless --unpause is given"
    ),
    action="store_true",
)
ARG_TIMEOUT = Arg(
    ("--timeout",),
    help=f"with --wait: give up after this many seconds, exit 2 (default: {DEFAULT_WAIT_TIMEOUT:g}; 0: no limit)",
    type=float,
    default=DEFAULT_WAIT_TIMEOUT,
)
ARG_UNPAUSE = Arg(
    ("--unpause",),
    help="unpause the tables' DAGs if they are paused (a new DAG starts paused unless configured otherwise); the "
    "run takes the place of the scheduled run the unpause would start beside it",
    action="store_true",
)

ARG_ADOPT_HOT_TABLE = Arg(
    ("--adopt-hot-table",),
    help="after a round refused the hot table as another one (dropped and created again, truncated and reloaded): "
    "keep the lake's rows as history and tier the new table from its start",
    action="store_true",
)


def get_tiering_cli_commands() -> list[GroupCommand]:
    return [
        GroupCommand(
            name="tiering",
            help="See and steer tiered tables",
            subcommands=(
                ActionCommand(
                    name="status",
                    help="Show the tiering status of every table, or of one",
                    func=lazy_load_command(f"{_COMMANDS}.status"),
                    args=(ARG_TABLE_OPTIONAL, ARG_NAMESPACE, ARG_STATUS, ARG_OUTPUT, ARG_VERBOSE),
                ),
                ActionCommand(
                    name="history",
                    help="Show a table's recent rounds (from its asset events)",
                    func=lazy_load_command(f"{_COMMANDS}.history"),
                    args=(ARG_TABLE, ARG_LIMIT, ARG_OUTPUT, ARG_VERBOSE),
                ),
                ActionCommand(
                    name="trigger",
                    help="Tier these tables now: one DAG run per DAG, tiering only them",
                    func=lazy_load_command(f"{_COMMANDS}.trigger"),
                    args=(ARG_TABLES, ARG_WAIT, ARG_TIMEOUT, ARG_UNPAUSE, ARG_OUTPUT, ARG_VERBOSE),
                ),
                ActionCommand(
                    name="database",
                    help="Show the tables of declared databases: tiered, skipped or dropped, with the reason",
                    func=lazy_load_command(f"{_COMMANDS}.database"),
                    args=(ARG_DATABASE, ARG_DISCOVERY, ARG_OUTPUT, ARG_VERBOSE),
                ),
                ActionCommand(
                    name="reset",
                    help="Lift a table's quarantine so that its next round runs",
                    func=lazy_load_command(f"{_COMMANDS}.reset"),
                    args=(ARG_TABLE, ARG_ADOPT_HOT_TABLE, ARG_OUTPUT, ARG_VERBOSE),
                ),
            ),
        )
    ]
