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
ARG_TABLES = Arg(("tables",), help="names of the tiered tables to tier now", nargs="+")
ARG_NAMESPACE = Arg(("--namespace",), help="only tables of this lake namespace")
ARG_STATUS = Arg(
    ("--status",),
    help="only tables in this status, e.g. FAILED",
    type=str.upper,
    choices=("NEW", "INITIALIZED", "SCHEDULED", "PENDING", "TIERING", "TIERED", "FAILED"),
)
ARG_LIMIT = Arg(("--limit",), help="how many recent rounds (default: 20)", type=int, default=20)
ARG_WAIT = Arg(
    ("--wait",), help="return when the tables' rounds have finished; exit 1 if one failed", action="store_true"
)
ARG_TIMEOUT = Arg(
    ("--timeout",), help="with --wait: give up after this many seconds (exit 2)", type=float, default=None
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
                    args=(ARG_TABLES, ARG_WAIT, ARG_TIMEOUT, ARG_OUTPUT, ARG_VERBOSE),
                ),
                ActionCommand(
                    name="reset",
                    help="Lift a table's quarantine so that its next round runs",
                    func=lazy_load_command(f"{_COMMANDS}.reset"),
                    args=(ARG_TABLE, ARG_OUTPUT, ARG_VERBOSE),
                ),
            ),
        )
    ]
