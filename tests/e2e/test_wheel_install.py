"""The provider as a user gets it: the wheel built from the repository, installed as the README's "Install" section
says into a fresh virtualenv (no repository file on its path), the connections created as the README shows, the
README's DAG example in a dags folder, and a real PostgreSQL table tiered under that virtualenv's own scheduler
(LocalExecutor).

First without the ``postgres`` extra: the table's task fails naming the extra to install, and the failure does
not count towards the quarantine. Then the extra is installed into the same virtualenv (cheaper than a second one:
the base install is most of this test's time) and the next run tiers the table; the lake, read back with pyiceberg,
equals the hot table. Install times are printed (``-s`` shows them).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import load_catalog

from testbed.airflow_cluster import AirflowCluster
from testbed.hot_tables import make_rows
from testbed.lake_check import digest
from testbed.pg_server import PostgresServer
from tests.integration.test_readme_examples import README, Block, of, python_kind, shell_commands

REPO = Path(__file__).resolve().parents[2]
ROWS = 500
HOT_COLUMNS = ("order_id", "region", "amount", "created_at", "note")
#: What the README's hot-store connection points at, and what stands in for it here.
PG_FIELDS = ("host", "port", "login", "password", "schema")


def install_section() -> str:
    text = (REPO / "README.md").read_text()
    match = re.search(r"^## Install\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Install' section"
    return match.group(1)


def in_install_section(block: Block) -> bool:
    return block.text in install_section()


def readme_requirements(wheel: Path, with_extras: bool) -> list[str]:
    """The README's first ``pip install`` (its extras applied to the wheel) and the Airflow version it names."""
    install = next(
        words
        for block in of("bash", (README,))
        if in_install_section(block)
        for words in shell_commands(block)
        if words[:2] == ["pip", "install"]
    )
    name, _, extras = install[2].partition("[")
    assert name == "airflow-provider-tiering" and extras, install
    airflow = re.search(r"\bAirflow (\d+\.\d+)\b", install_section())
    assert airflow, "the README's Install section names no Airflow version"
    return [f"{wheel}[{extras}" if with_extras else str(wheel), f"apache-airflow=={airflow.group(1)}.*"]


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the project's sources as git holds them: setuptools writes ``build/``
    and ``*.egg-info`` next to the sources it builds, which must not be the repository. The Tiering page is neither
    built nor installed in the copy: building the wheel builds it (npm, from the lock file)."""
    src = out / "src"
    src.mkdir(parents=True)
    shutil.copytree(
        REPO / "airflow_provider_tiering",
        src / "airflow_provider_tiering",
        ignore=shutil.ignore_patterns("__pycache__", "node_modules", "dist"),
    )
    sources = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]
    for path in [*(REPO / name for name in sources), *REPO.glob("LICEN[CS]E*"), *REPO.glob("NOTICE*")]:
        shutil.copy2(path, src / path.name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(out / "dist")], cwd=out)
    (wheel,) = (out / "dist").glob("airflow_provider_tiering-*.whl")
    with zipfile.ZipFile(wheel) as packed:
        names = packed.namelist()
    page = [n for n in names if "/plugins/www/" in n]
    assert page == ["airflow_provider_tiering/plugins/www/dist/tiering.js"], page  # the built page, no sources
    return wheel


def plain_env(**extra: str) -> dict[str, str]:
    """This process's environment without the repository on the path or Airflow settings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("AIRFLOW", "PYTEST"))}
    env.update(extra)
    return env


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(command, cwd=cwd, env=env or plain_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def substitute_pg(conn: dict[str, Any], pg: PostgresServer, dbname: str) -> dict[str, Any]:
    return {**conn, "host": "127.0.0.1", "port": pg.port, "login": pg.user, "password": pg.password, "schema": dbname}


def substitute_paths(value: str, data: Path) -> str:
    """The README's ``/data/...`` paths, under this test's folder."""
    return value.replace("/data/", f"{data}/")


def readme_env_connections(pg: PostgresServer, dbname: str, data: Path) -> dict[str, str]:
    """The README's ``export AIRFLOW_CONN_…`` lines, pointed at the test server and folder."""
    env = {}
    for block in of("bash", (README,)):
        for words in shell_commands(block):
            if words[0] != "export" or not in_install_section(block):
                continue
            key, _, value = words[1].partition("=")
            conn = json.loads(value)
            if conn["conn_type"] == "postgres":
                conn = substitute_pg(conn, pg, dbname)
            env[key] = substitute_paths(json.dumps(conn), data)
    assert {"AIRFLOW_CONN_SALES_PG", "AIRFLOW_CONN_ICEBERG_DEFAULT"} <= set(env), env.keys()
    return env


def readme_cli_connections(pg: PostgresServer, dbname: str, data: Path, conn_ids: set[str]) -> list[list[str]]:
    """The README's ``airflow connections add`` commands of ``conn_ids``, pointed at the test server and folder."""
    commands = []
    stand_ins = dict(zip([f"--conn-{f}" for f in PG_FIELDS], substitute_pg({}, pg, dbname).values(), strict=True))
    for block in of("bash", (README,)):
        for words in shell_commands(block):
            if words[:3] != ["airflow", "connections", "add"] or words[3] not in conn_ids:
                continue
            words = [substitute_paths(w, data) for w in words]
            if "--conn-type" in words and words[words.index("--conn-type") + 1] == "postgres":
                words = [str(stand_ins[words[i - 1]]) if words[i - 1] in stand_ins else w for i, w in enumerate(words)]
            commands.append(words)
    assert {c[3] for c in commands} == conn_ids, commands
    return commands


def readme_dag(dags: Path) -> tuple[str, dict[str, Any]]:
    """Write the README's first DAG file into ``dags``; the id of the DAG that tiers its (only) table, and its spec
    (``build_table_dags`` names the table's own DAG ``<group>.<table>``)."""
    block = next(b for b in of("python", (README,)) if python_kind(b) == "dag file" and b.file_name)
    (dags / Path(block.file_name).name).write_text(block.text)
    call = next(n for n in ast.walk(ast.parse(block.text)) if isinstance(n, ast.Call) and n.args)
    (table,) = ast.literal_eval(call.args[1])
    name = ast.literal_eval(call.args[0])
    per_table = isinstance(call.func, ast.Name) and call.func.id == "build_table_dags"
    return (f"{name}.{table['name']}" if per_table else name), table


def run_dag(af: AirflowCluster, dag_id: str, timeout: float = 420) -> tuple[str, str]:
    """Trigger a run and wait for it and for any other run of the DAG (its cron schedule may add one)."""
    run_id = af.trigger_dag(dag_id)
    state = af.wait_for_run(dag_id, run_id, timeout=timeout)
    for other in af.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]:
        af.wait_for_run(dag_id, other["dag_run_id"], timeout=timeout)
    return run_id, state


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """Where the fresh virtualenv goes; removed afterwards (1.2 GB, mostly pyspark; the logs stay)."""
    yield tmp_path / "venv"
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)


@pytest.mark.timeout(1800)
def test_wheel_installed_as_the_readme_says_tiers_a_postgres_table(
    pg_server: PostgresServer, tmp_path: Path, venv: Path
) -> None:
    timings: dict[str, float] = {}
    started = time.monotonic()
    build_existed = (REPO / "build").exists()
    wheel = build_wheel(tmp_path / "wheel")
    timings["build wheel"] = time.monotonic() - started
    assert (REPO / "build").exists() == build_existed

    # The hot table the README's DAG example tiers (public.orders of the database "sales", here one of its own).
    dbname = f"sales_{uuid.uuid4().hex[:8]}"
    with pg_server.connect(autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    with pg_server.connect(dbname) as conn:
        conn.execute(
            "CREATE TABLE public.orders (order_id bigint PRIMARY KEY, region text NOT NULL, amount numeric(12,2), "
            "created_at timestamp, note text)"
        )
        conn.cursor().executemany("INSERT INTO public.orders VALUES (%s, %s, %s, %s, %s)", make_rows(1, ROWS))

    work = tmp_path / "work"  # every command's cwd: nothing of the repository is importable from it
    work.mkdir()
    python311 = shutil.which("python3.11")
    assert python311, "python3.11 is not on the PATH"
    t0 = time.monotonic()
    run([python311, "-m", "venv", str(venv)], cwd=work)
    timings["create venv"] = time.monotonic() - t0
    # --no-compile: the same files installed; Python compiles what it imports when it imports it, instead of pip
    # compiling every module of Airflow, pyspark and their dependencies up front.
    lock = str(REPO / "requirements.lock")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c", lock]
    t0 = time.monotonic()
    run([*pip, *readme_requirements(wheel, with_extras=False)], cwd=work)
    timings["install without extras"] = time.monotonic() - t0
    where = run([str(venv / "bin" / "python"), "-c", "import airflow_provider_tiering as p; print(p.__file__)"], work)
    assert Path(where.strip()).is_relative_to(venv / "lib"), where
    # Beside Airflow's Iceberg provider (a dependency), whose "iceberg" connection type it uses: no second
    # registration of the type, no warning.
    listed = subprocess.run(
        [str(venv / "bin" / "airflow"), "providers", "list"], cwd=work, env=plain_env(), capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "apache-airflow-providers-apache-iceberg" in listed.stdout and "airflow-provider-tiering" in listed.stdout
    assert "already registered" not in listed.stdout + listed.stderr, listed.stderr[-3000:]
    assert "warning" not in listed.stderr.lower(), listed.stderr[-3000:]

    data = tmp_path / "data"
    data.mkdir()
    dags = tmp_path / "dags"
    dags.mkdir()
    dag_id, table = readme_dag(dags)
    namespace, lake_table = table["lake"]["namespace"], table["lake"]["table"]
    asset = f"tiering/{namespace}/{lake_table}"
    install = "pip install 'airflow-provider-tiering[postgres]'"
    af = AirflowCluster(
        home=tmp_path / "airflow",
        dags_folder=dags,
        # Without the postgres extra `connections add --conn-type postgres` stores "generic" (the README says so):
        # this run takes the README's environment-variable form, which keeps the type.
        extra_env=readme_env_connections(pg_server, dbname, data),
        config_overrides={"core": {"max_active_runs_per_dag": "1"}},  # the cron schedule's run waits its turn
        venv=venv,
    )
    try:
        t0 = time.monotonic()
        af.start()
        timings["start airflow (1)"] = time.monotonic() - t0
        t0 = time.monotonic()
        run_id, state = run_dag(af, dag_id)
        timings["failing run"] = time.monotonic() - t0
        assert state == "failed"
        # Failed without Airflow's retries (the spec asks for 2; they would run on the same installation).
        assert af.task_instances(dag_id, run_id)[table["name"]] == "failed"
        assert install in af.task_log(dag_id, run_id, table["name"], 1)
        failed = af.asset_state_store(asset)["tiering_state"]
        assert failed["status"] == "FAILED" and install in failed["last_error"], failed
        assert failed["consecutive_failures"] == 0 and failed["quarantined_since"] is None, failed
        af.stop()

        t0 = time.monotonic()
        run([*pip, *readme_requirements(wheel, with_extras=True)], cwd=work)
        timings["install the extra"] = time.monotonic() - t0
        # The same deployment restarted on the installation with the extra; its connections now as the README
        # creates them with the CLI.
        af.extra_env = {}
        t0 = time.monotonic()
        af.start()
        timings["start airflow (2)"] = time.monotonic() - t0
        needed = {table["source"]["conn_id"], table["lake"].get("catalog_conn_id", "iceberg_default"), "spark_default"}
        t0 = time.monotonic()
        for words in readme_cli_connections(pg_server, dbname, data, needed):
            run([str(venv / "bin" / "airflow"), *words[1:]], cwd=work, env=af.env())
        timings["airflow connections add (3)"] = time.monotonic() - t0
        t0 = time.monotonic()
        run_id, state = run_dag(af, dag_id)
        timings["tiering run"] = time.monotonic() - t0
        assert state == "success", af.task_log(dag_id, run_id, table["name"], 1)[-3000:]
        tiered = af.asset_state_store(asset)["tiering_state"]
        # Tiered by this run, or by a run of the DAG's 10-minute schedule that came first (this run then finds the
        # table not due and leaves it SCHEDULED): either way a round tiered it and none failed since.
        assert tiered["status"] in ("TIERED", "SCHEDULED") and tiered["last_tiered_time"] is not None, tiered
        assert tiered["epoch"] >= 1 and tiered["consecutive_failures"] == 0, tiered
        # The README's iceberg_default connection serves Airflow's own Iceberg hook too (given as the README's
        # environment variable: outside a task, Airflow 3's SDK reads no connection from the metadata database).
        catalog_env = {"AIRFLOW_CONN_ICEBERG_DEFAULT": readme_env_connections(pg_server, dbname, data)[
            "AIRFLOW_CONN_ICEBERG_DEFAULT"]}  # fmt: skip
        official = run(
            [str(venv / "bin" / "python"), "-c",
             "from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook; "
             f"print(IcebergHook('iceberg_default').list_tables({namespace!r}))"],
            cwd=work, env=plain_env(**catalog_env),
        )  # fmt: skip
        assert f"{namespace}.{lake_table}" in official, official
    finally:
        af.stop()

    catalog_conn = json.loads(readme_env_connections(pg_server, dbname, data)["AIRFLOW_CONN_ICEBERG_DEFAULT"])
    # The product names a catalog without "name" after its connection id (a SQL catalog keys its tables by it).
    catalog = load_catalog("iceberg_default", **catalog_conn["extra"])
    lake = catalog.load_table((namespace, lake_table)).scan(selected_fields=HOT_COLUMNS).to_arrow()
    with pg_server.connect(dbname) as conn:
        hot = conn.execute(f"SELECT {', '.join(HOT_COLUMNS)} FROM public.orders").fetchall()
    lake_rows = list(zip(*(lake.column(c).to_pylist() for c in HOT_COLUMNS), strict=True))
    assert len(hot) == ROWS and digest(lake_rows) == digest(hot)
    timings["total"] = time.monotonic() - started
    print("wheel install e2e timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()))
