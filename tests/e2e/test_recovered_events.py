"""History without holes, under a real scheduler and LocalExecutor: a tier task SIGKILLed right after its Iceberg
commit (before it records the round or announces it) leaves a commit no asset event covers; ``history`` shows it
from the lake at once, and the next round announces it (``recovered``) before its own event, so the asset's events
and ``history`` cover every committed round with no gap in offsets."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import table_function, tiering_setup
from tests.e2e.test_cli import cli

DAG_ID = "tiering_recovered"
TABLE = "r_orders"


def dag_file(kill_marker: Path) -> str:
    """One table; its task SIGKILLs itself right after the lake commit while ``kill_marker`` exists (test-only:
    this DAG file is also what the task process parses, so the patch is in force there)."""
    return table_function("rec", freshness_seconds=1, retries=0) + textwrap.dedent(
        f'''
        """One PostgreSQL table whose round can be killed right after its commit."""
        import os
        import signal
        from pathlib import Path

        from airflow_provider_tiering import build
        from airflow_provider_tiering.core.round_result import RoundPhase
        from airflow_provider_tiering.dag_factory import build_tiering_dag

        KILL_MARKER = Path({str(kill_marker)!r})
        _run = build.RoundParts.run


        def _run_killed_after_commit(self, state_store, **options):
            observe = options.get("observe") or (lambda phase: None)

            def watch(phase):
                observe(phase)
                if phase is RoundPhase.COMMITTED and KILL_MARKER.exists():
                    KILL_MARKER.unlink()
                    os.kill(os.getpid(), signal.SIGKILL)

            options["observe"] = watch
            return _run(self, state_store, **options)


        build.RoundParts.run = _run_killed_after_commit

        dag = build_tiering_dag("{DAG_ID}", [table("{TABLE}")])
        '''
    )


def history(af: AirflowCluster) -> list[dict]:
    done = cli(af, "history", TABLE, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_chained(rounds: list[dict]) -> None:
    """Epochs 1..n, each round starting where the one before ended."""
    ordered = sorted(rounds, key=lambda r: r["epoch"])
    assert [r["epoch"] for r in ordered] == list(range(1, len(ordered) + 1))
    assert ordered[0]["start_offsets"] is None
    for before, after in zip(ordered, ordered[1:], strict=False):
        assert after["start_offsets"] == before["end_offsets"], (before, after)


@pytest.mark.timeout(900)
def test_a_round_killed_after_its_commit_is_announced_by_the_next(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create(TABLE)
    hot.insert(TABLE, 1, 1000)
    marker = tmp_path / "kill-after-commit"
    dags, catalog, env = tiering_setup(tmp_path, pg_server, dag_file(marker), "unused-password")
    with AirflowCluster(home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID]) as af:
        first = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, first, timeout=400) == "success"

        hot.insert(TABLE, 1001, 500)
        marker.touch()
        killed = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, killed, timeout=400) == "failed"
        assert not marker.exists(), "the task was meant to die after its commit"
        assert len(lake_rows(catalog, ("rec", TABLE), COLUMNS)) == 1500  # the dead round did commit
        asset = f"tiering/rec/{TABLE}"
        assert [e["extra"]["epoch"] for e in af.asset_events(asset)] == [1]
        # No event covers epoch 2 yet: history reads it from the lake.
        gap_filled = history(af)
        assert [(r["epoch"], r["source"]) for r in gap_filled] == [(2, "lake"), (1, "event")]
        assert_chained(gap_filled)

        hot.insert(TABLE, 1501, 250)
        third = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, third, timeout=400) == "success"
        events = af.asset_events(asset)
        by_epoch = {e["extra"]["epoch"]: e["extra"] for e in events}
        assert sorted(by_epoch) == [1, 2, 3] and len(events) == 3
        assert by_epoch[2]["recovered"] is True and by_epoch[2]["rows"] == 500
        assert by_epoch[2]["end_offsets"] == by_epoch[3]["start_offsets"] == {"cursor": 1500}
        assert "recovered" not in by_epoch[3] and by_epoch[3]["rows"] == 250
        assert {e["source_run_id"] for e in events if e["extra"]["epoch"] in (2, 3)} == {third}
        assert_chained([e["extra"] for e in events])
        complete = history(af)
        assert [(r["epoch"], r["source"], r["recovered"]) for r in complete] == [
            (3, "event", False),
            (2, "event", True),
            (1, "event", False),
        ]
        assert sum(r["rows"] for r in complete) == 1750
        assert digest(lake_rows(catalog, ("rec", TABLE), COLUMNS)) == digest(hot.rows(TABLE))
