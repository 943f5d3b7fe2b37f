"""A stream group's DAG file for the e2e tests: a DAG per table and one for the group's reader (``build_table_dags``),
each on a clock of an hour, so that the test runs them itself, the reader then the tables it changed, back to back;
and kill switches in the DAG file itself, so that the task processes Airflow starts (which parse it) SIGKILL
themselves at a phase while a marker file says so: the reader's task at ``kill-reader-<phase>``, a table's task at
``kill-<table>-<phase>`` (each marker is used once)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The reader's phases (``group_reader.py``) and a round's (``RoundPhase``) a test may kill a task at.
READER_PHASES = ("read", "intent", "committed", "released", "recorded", "expired")
ROUND_PHASES = ("planned", "acquired", "written", "committed", "recorded", "cleaned")


def dag_file(
    dag_group: str,
    group: Mapping[str, Any],
    tables: Sequence[Mapping[str, Any]],
    markers: Path,
) -> str:
    """The DAG file: ``tables`` (their ``source.stream`` names ``group``) and ``group``, DAGs ``<dag_group>.<table>``
    and ``<dag_group>.<group name>`` (the reader), with kill switches watching ``markers``."""
    return textwrap.dedent(
        f'''
        """A stream group's tables, its reader first (with kill switches for the tests)."""
        import os
        import signal
        from pathlib import Path

        from datetime import timedelta

        from airflow_provider_tiering.dag_factory import build_table_dags
        from airflow_provider_tiering.operators.read_changes import ReadChangesOperator
        from airflow_provider_tiering.operators.tier_table import TierTableOperator

        MARKERS = Path({str(markers)!r})


        def _die_at(name):
            marker = MARKERS / name
            if marker.exists():
                marker.unlink()
                os.kill(os.getpid(), signal.SIGKILL)


        def _install_kill_switches():
            """In the task process only (parsing the DAG file imports neither the lake nor the reader)."""
            from airflow_provider_tiering import build
            from airflow_provider_tiering.sources.change_stream import group_reader

            read, run = group_reader.GroupReader.run, build.RoundParts.run
            if getattr(read, "kill_switch", False):
                return

            def read_killed(self):
                observe = self.observe
                self.observe = lambda phase: (observe(phase), _die_at(f"kill-reader-{{phase}}"))
                return read(self)

            def run_killed(self, state_store, **options):
                observe = options.get("observe") or (lambda phase: None)
                table = self.spec.name
                options["observe"] = lambda phase: (observe(phase), _die_at(f"kill-{{table}}-{{phase}}"))
                return run(self, state_store, **options)

            read_killed.kill_switch = True
            group_reader.GroupReader.run, build.RoundParts.run = read_killed, run_killed


        for _operator in (ReadChangesOperator, TierTableOperator):
            _execute = _operator.execute

            def _execute_killable(self, context, _execute=_execute):
                _install_kill_switches()
                return _execute(self, context)

            _operator.execute = _execute_killable

        build_table_dags(
            {dag_group!r}, {[dict(t) for t in tables]!r}, streams=[{dict(group)!r}],
            status_schedule=timedelta(hours=1),
        )
        '''
    )
