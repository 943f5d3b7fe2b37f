"""``airflow tiering status|history|trigger|reset`` run as a user would, against a real api-server, scheduler
and LocalExecutor: status agrees with the REST API, json and yaml parse, ``trigger --wait`` tiers only the
named table and its exit code tells the outcome, ``reset`` lifts a quarantine."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
import yaml

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import COLUMNS, PostgresHot, make_rows
from testbed.lake_check import digest, lake_rows
from testbed.tiering_env import table_function, tiering_setup

# Alone, after the parallel pass: its runs wait on the scheduler under 400 s bounds, which a loaded machine overran.
pytestmark = pytest.mark.serial

DAG_ID = "tiering_cli"
#: A scheduled DAG that starts paused, as a new user's DAG does: its first trigger unpauses it.
DAILY_DAG_ID = "tiering_cli_daily"

DAGS = table_function("cli", freshness_seconds=3600, retries=0) + textwrap.dedent(
    f'''
    """Two healthy tables and a broken one (wrong password) that is quarantined after one failed round; and a daily
    DAG, paused, of one table."""
    from datetime import datetime, timezone

    from airflow_provider_tiering.dag_factory import build_tiering_dag

    tiering = build_tiering_dag(
        "{DAG_ID}",
        [
            table("c_alpha", "hot_pg", source=dict(conn_id="hot_pg", table="c_alpha", cursor_column="id",
                                                   max_watermark_wait_seconds=10)),
            table("c_beta", "hot_pg"),
            table("c_bad", "hot_broken", max_consecutive_failures=1),
        ],
    )
    daily = build_tiering_dag(
        "{DAILY_DAG_ID}",
        [table("c_daily", "hot_pg")],
        schedule="@daily",
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        is_paused_upon_creation=True,
    )
    '''
)


def comparable(record: dict) -> dict:
    """A status record with times as instants (REST writes ``Z``, the CLI ``+00:00``) and no staleness (it is
    computed when asked)."""
    out = {}
    for key, value in record.items():
        if key.endswith(("_time", "_since", "_at")) and isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        out[key] = value
    return {**out, "staleness_seconds": None}


def cli(af: AirflowCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(af.airflow_bin), "tiering", *args], env=af.env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.timeout(900)
def test_cli_status_history_trigger_and_reset(pg_server, tmp_path: Path) -> None:
    hot = PostgresHot(pg_server.dsn)
    for name in ("c_alpha", "c_beta", "c_bad", "c_daily"):
        hot.create(name)
        hot.insert(name, 1, 1500)
    password = "not-the-password-8c3b"
    dags, catalog, env = tiering_setup(tmp_path, pg_server, DAGS, password)
    with AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, expected_dag_ids=[DAG_ID, DAILY_DAG_ID]
    ) as af:
        first = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, first, timeout=400) == "failed"  # c_bad fails, the others tier

        # status: the same records as the state documents behind the REST API, in every format.
        done = cli(af, "status", "-o", "json")
        assert done.returncode == 0, done.stderr
        records = {r["table"]: r for r in json.loads(done.stdout)}
        assert set(records) == {"c_alpha", "c_beta", "c_bad", "c_daily"}
        daily = records["c_daily"]  # listed as soon as its DAG is parsed, though its paused DAG has not run it
        assert (daily["status"], daily["epoch"], daily["last_tiered_time"]) == ("NEW", 0, None), daily
        assert daily["note"] == "no round has run yet" and daily["dag_id"] == DAILY_DAG_ID, daily
        assert json.loads(cli(af, "status", "c_daily", "-o", "json").stdout)["status"] == "NEW"
        for table, record in records.items():
            if table == "c_daily":
                continue
            state = af.asset_state_store(f"tiering/cli/{table}")["tiering_state"]
            assert (record["status"], record["epoch"], record["consecutive_failures"]) == (
                state["status"],
                state["epoch"],
                state["consecutive_failures"],
            )
            assert record["last_error"] == state["last_error"]
            assert record["dag_id"] == DAG_ID and record["task_id"] == table
        # ... and the very records of the plugin's REST API (staleness is computed at the time of asking).
        listed = {t["table"]: comparable(t) for t in af.get("/tiering/api/tables")["tables"]}
        assert listed == {table: comparable(r) for table, r in records.items()}
        assert records["c_alpha"]["status"] == "TIERED" and records["c_alpha"]["last_round_rows"] == 1500
        assert records["c_bad"]["status"] == "FAILED" and records["c_bad"]["quarantined"] is True
        assert "password authentication failed" in records["c_bad"]["last_error"]
        assert password not in done.stdout
        as_yaml = yaml.safe_load(cli(af, "status", "--status", "failed", "-o", "yaml").stdout)
        assert [r["table"] for r in as_yaml] == ["c_bad"]
        one = json.loads(cli(af, "status", "c_alpha", "-o", "json").stdout)
        assert one["committed_offsets"] == {"cursor": 1500}
        table_view = cli(af, "status")
        assert table_view.returncode == 0 and "c_alpha" in table_view.stdout and "TIERED" in table_view.stdout
        unknown = cli(af, "status", "c_nope")
        assert unknown.returncode == 1 and "unknown table 'c_nope'" in unknown.stderr, unknown.stderr
        typo = cli(af, "status", "c_alpah")
        assert typo.returncode == 1 and "did you mean 'c_alpha'" in typo.stderr, typo.stderr

        # trigger --wait: only c_alpha is tiered (not due by freshness, but named), c_beta skips.
        hot.insert("c_alpha", 1501, 700)
        hot.insert("c_beta", 1501, 700)
        # Named by its lake identifier, as status takes it.
        done = cli(af, "trigger", "cli.c_alpha", "--wait", "--timeout", "400", "-o", "json", timeout=500)
        assert done.returncode == 0, done.stderr + done.stdout
        assert json.loads(done.stdout) == [{"table": "c_alpha", "state": "success", "outcome": "tiered"}]
        run_id = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns", params={"order_by": "-run_after", "limit": 1})["dag_runs"][0][
            "dag_run_id"
        ]
        assert af.dag_run(DAG_ID, run_id)["conf"] == {"tables": ["c_alpha"]}
        assert af.wait_for_run(DAG_ID, run_id, timeout=120) == "success"
        assert af.task_instances(DAG_ID, run_id)["c_beta"] == "skipped"
        assert digest(lake_rows(catalog, ("cli", "c_alpha"), COLUMNS)) == digest(hot.rows("c_alpha"))
        assert len(lake_rows(catalog, ("cli", "c_beta"), COLUMNS)) == 1500

        history = json.loads(cli(af, "history", "c_alpha", "-o", "json").stdout)
        assert [(h["epoch"], h["rows"]) for h in history] == [(2, 700), (1, 1500)]
        assert history[0]["run_id"] == run_id and history[0]["end_offsets"] == {"cursor": 2200}

        # A paused DAG: --wait refuses (a wait that could not end), starting nothing; --unpause unpauses it.
        af.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": True})
        runs_before = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"]
        refused = cli(af, "trigger", "c_alpha", "--wait", "--timeout", "400")
        assert refused.returncode == 1, refused.stderr
        assert f"DAG {DAG_ID} is paused" in refused.stderr and "--unpause" in refused.stderr, refused.stderr
        assert af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"] == runs_before
        # Without --wait the run is queued until the DAG is unpaused, as `airflow dags trigger` does.
        queued = cli(af, "trigger", "c_beta", "-o", "json")
        assert queued.returncode == 0, queued.stderr
        assert f"{DAG_ID}: the DAG is paused; the run waits until it is unpaused" in queued.stderr, queued.stderr
        assert af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"] == runs_before + 1

        # The exit code tells nothing new (3) and held back (4) apart from tiered (0).
        nothing = cli(af, "trigger", "c_alpha", "--wait", "--unpause", "--timeout", "400", "-o", "json", timeout=500)
        assert nothing.returncode == 3, nothing.stderr
        assert f"{DAG_ID}: the DAG was paused; unpaused it" in nothing.stderr
        assert af.get(f"/api/v2/dags/{DAG_ID}")["is_paused"] is False
        assert json.loads(nothing.stdout) == [{"table": "c_alpha", "state": "skipped", "outcome": "nothing_new"}]
        late = psycopg.connect(pg_server.dsn)  # takes id 2201 and holds it past the round's 10 s wait
        late.execute('INSERT INTO "c_alpha" VALUES (%s, %s, %s, %s, %s)', make_rows(2201, 1)[0])
        hot.insert("c_alpha", 2202, 1)
        try:
            held = cli(af, "trigger", "c_alpha", "--wait", "--timeout", "400", "-o", "json", timeout=500)
        finally:
            late.rollback()
            late.close()
        assert held.returncode == 4 and "held back: c_alpha" in held.stderr, held.stderr
        assert json.loads(held.stdout)[0]["outcome"] == "held_back"

        # A quarantined table: trigger --wait reports its skipped task as no failure, reset lifts it,
        # then (its connection still broken) a triggered round fails and the exit code says so.
        reset = cli(af, "reset", "c_bad", "-o", "json")
        assert reset.returncode == 0, reset.stderr
        assert json.loads(cli(af, "status", "c_bad", "-o", "json").stdout)["quarantined"] is False
        failed = cli(af, "trigger", "c_bad", "--wait", "--timeout", "400", timeout=500)
        assert failed.returncode == 1 and "failed: c_bad" in failed.stderr
        assert json.loads(cli(af, "status", "c_bad", "-o", "json").stdout)["quarantined"] is True
        quarantined = cli(af, "trigger", "c_bad", "--wait", "--timeout", "400", timeout=500)
        assert quarantined.returncode == 5 and "quarantined: c_bad" in quarantined.stderr, quarantined.stderr
        nope = cli(af, "trigger", "c_nope")
        assert nope.returncode == 1 and "unknown table 'c_nope'" in nope.stderr, nope.stderr

        # A scheduled DAG that starts paused, as a new user's does. Unpausing it makes the scheduler start the run
        # of its overdue interval at once: the requested run takes that run's place, so it tiers the table itself.
        assert af.get(f"/api/v2/dags/{DAILY_DAG_ID}")["is_paused"] is True
        first = cli(af, "trigger", "c_daily", "--wait", "--unpause", "--timeout", "400", "-o", "json", timeout=500)
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout) == [{"table": "c_daily", "state": "success", "outcome": "tiered"}]
        assert "takes the place of the scheduled run" in first.stderr, first.stderr
        (only,) = af.get(f"/api/v2/dags/{DAILY_DAG_ID}/dagRuns")["dag_runs"]  # the scheduler started none beside it
        assert only["run_type"] == "manual" and only["conf"] == {"tables": ["c_daily"]}, only
        daily_history = json.loads(cli(af, "history", "c_daily", "-o", "json").stdout)
        assert [(h["rows"], h["run_id"]) for h in daily_history] == [(1500, only["dag_run_id"])]

        # A run asked for while another run of the table holds it: that run's round commits after the request (an
        # open transaction that took a smaller id holds its watermark until then), this run finds nothing new, and
        # the CLI says who tiered the rows.
        holder = psycopg.connect(pg_server.dsn)
        holder.execute('INSERT INTO "c_daily" VALUES (%s, %s, %s, %s, %s)', make_rows(1501, 1)[0])
        hot.insert("c_daily", 1502, 500)
        try:
            other = af.trigger_dag(DAILY_DAG_ID, conf={"tables": ["c_daily"]})
            deadline = time.monotonic() + 120
            while af.task_instances(DAILY_DAG_ID, other).get("c_daily") != "running":
                assert time.monotonic() < deadline, af.task_instances(DAILY_DAG_ID, other)
                time.sleep(1)
            waiting = subprocess.Popen(
                [str(af.airflow_bin), "tiering", "trigger", "c_daily", "--wait", "--timeout", "400", "-o", "json"],
                env=af.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(8)  # asked for well before the holder commits
            holder.commit()
        finally:
            holder.close()
        out, err = waiting.communicate(timeout=500)
        assert waiting.returncode == 0, err
        assert json.loads(out) == [{"table": "c_daily", "state": "skipped", "outcome": "tiered_by_another_run"}]
        assert f"c_daily: this run found nothing new: meanwhile run {other} of {DAILY_DAG_ID} tiered 501 rows" in err
        assert digest(lake_rows(catalog, ("cli", "c_daily"), COLUMNS)) == digest(hot.rows("c_daily"))
