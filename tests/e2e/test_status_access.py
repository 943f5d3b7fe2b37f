"""Who sees which table, and where the states are read from, under a real Airflow (api-server, scheduler,
LocalExecutor) whose state-store backend is not Airflow's default and whose auth manager grants assets one by one.

* The backend (``testbed.file_state_backend.FileStateBackend``, configured through ``[state_store] backend``)
  keeps asset state in files, not in Airflow's ``asset_state_store`` table: real rounds write their state
  documents through it, and ``airflow tiering status``, the REST API and the page show them. Airflow's own
  state-store endpoint, which reads that table, shows nothing: whoever reads the table directly reads nothing.
* The auth manager (``testbed.asset_auth_manager.PerAssetAuthManager``: Airflow's ``SimpleAuthManager`` whose
  ``is_authorized_asset`` answers per asset for the users named in its config; no installed auth manager can
  grant single assets: SimpleAuthManager's roles are all-or-nothing and the FAB provider is not installed) lets
  alice read the assets under ``tiering/sa_east/`` and bob those under ``tiering/sa_west/``. Each sees only
  their table in the page (HTML and Chromium) and the REST API; the others' tables are not found. The CLI runs as
  the deployment's operator (it reads the metadata database; no auth manager is asked) and lists every table.
* Two DAGs tier a table named ``sa_orders``, into ``sa_east`` and ``sa_west``: by that name ``status``,
  ``history`` and ``reset`` refuse, listing both; ``namespace.table`` and the asset's name or URI pick one.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.browser import chromium, log_in, wait_for
from testbed.hot_tables import COLUMNS, PostgresHot
from testbed.lake_check import digest, lake_rows
from testbed.state_documents import assets_dag_file, state_document, write_in_cluster
from testbed.tiering_env import tiering_setup

REPO = Path(__file__).resolve().parents[2]
TABLE = "sa_orders"
EAST, WEST, HIDDEN = "sa_east", "sa_west", "sa_hidden"
DAG_EAST, DAG_WEST = "status_access_east", "status_access_west"
ROWS = {EAST: 1200, WEST: 800}
GRANTS = {"alice": [f"tiering/{EAST}/"], "bob": [f"tiering/{WEST}/"], "carol": []}
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "status_access"


def dag_file(dag_id: str, namespace: str) -> str:
    return textwrap.dedent(
        f'''
        """The hot table {TABLE}_{namespace} tiered as {TABLE} into {namespace}."""
        from airflow_provider_tiering.dag_factory import build_tiering_dag

        dag = build_tiering_dag(
            "{dag_id}",
            [{{
                "name": "{TABLE}",
                "source": {{"conn_id": "hot_pg", "table": "{TABLE}_{namespace}", "cursor_column": "id"}},
                "lake": {{"namespace": "{namespace}", "table": "{TABLE}"}},
                "retries": 0,
                "maintenance": {{"enabled": False}},
            }}],
        )
        '''
    )


@dataclass
class Deployment:
    af: AirflowCluster
    state_dir: Path
    catalog: dict[str, str]
    hot: PostgresHot
    passwords: dict[str, str]

    def asset_id(self, namespace: str, table: str = TABLE) -> int:
        return int(self.af.asset_by_name(f"tiering/{namespace}/{table}")["id"])

    def stored(self, namespace: str, table: str = TABLE) -> str:
        """The state document as the backend's file holds it (read here, not through the code under test)."""
        return (self.state_dir / str(self.asset_id(namespace, table)) / "tiering_state.json").read_text()

    def token(self, user: str) -> str:
        resp = self.af.client.post("/auth/token", json={"username": user, "password": self.passwords[user]})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["access_token"])


@pytest.fixture(scope="module")
def deployment(pg_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Both DAGs' first rounds run (states written through the file backend), plus a third table's state document
    (FAILED, quarantined) that neither alice nor bob may read."""
    tmp_path = tmp_path_factory.mktemp("status_access")
    hot = PostgresHot(pg_server.dsn)
    for namespace, rows in ROWS.items():
        hot.create(f"{TABLE}_{namespace}")
        hot.insert(f"{TABLE}_{namespace}", 1, rows)
    dags, catalog, env = tiering_setup(tmp_path, pg_server, dag_file(DAG_EAST, EAST), "unused-password")
    (dags / "tiering_west.py").write_text(dag_file(DAG_WEST, WEST))
    hidden = state_document("sa_secret", "FAILED", consecutive_failures=3, namespace=HIDDEN)
    hidden.update(last_error="boom", quarantined_since=hidden["last_checked_time"])
    (dags / "hidden_assets.py").write_text(assets_dag_file("status_access_assets", [hidden]))
    state_dir = tmp_path / "state-files"
    config = {
        "core": {
            "auth_manager": "testbed.asset_auth_manager.PerAssetAuthManager",
            "simple_auth_manager_users": "admin:admin,alice:viewer,bob:viewer,carol:viewer",
        },
        "testbed_auth": {"asset_grants": json.dumps(GRANTS)},
        "state_store": {"backend": "testbed.file_state_backend.FileStateBackend"},
        "testbed_state": {"directory": str(state_dir)},
    }
    # Every component imports the auth manager and the backend from testbed/.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with AirflowCluster(
        home=tmp_path / "airflow",
        dags_folder=dags,
        extra_env=env,
        config_overrides=config,
        expected_dag_ids=[DAG_EAST, DAG_WEST, "status_access_assets"],
    ) as af:
        write_in_cluster(af, [hidden], tmp_path)
        runs = {dag_id: af.trigger_dag(dag_id) for dag_id in (DAG_EAST, DAG_WEST)}
        for dag_id, run_id in runs.items():
            assert af.wait_for_run(dag_id, run_id, timeout=480) == "success"
        passwords = json.loads(af.passwords_file.read_text())
        yield Deployment(af, state_dir, catalog, hot, passwords)


def cli(dep: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(dep.af.airflow_bin), "tiering", *args], env=dep.af.env(), capture_output=True, text=True, timeout=300
    )


def cli_json(dep: Deployment, *args: str) -> Any:
    done = cli(dep, *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rest(dep: Deployment, method: str, path: str, user: str = "admin", **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {dep.token(user)}"}
    with httpx.Client(base_url=dep.af.base_url, timeout=60, trust_env=False) as client:
        return client.request(method, path, headers=headers, **kwargs)


def places(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((r["namespace"], r["table"]) for r in records)


def test_status_reads_the_states_a_round_wrote_through_the_configured_backend(deployment: Deployment) -> None:
    dep = deployment
    everything = cli_json(dep, "status")
    assert places(everything) == [(EAST, TABLE), (HIDDEN, "sa_secret"), (WEST, TABLE)]
    listed = {(t["namespace"], t["table"]): t for t in rest(dep, "GET", "/tiering/api/tables").json()["tables"]}
    assert set(listed) == {(HIDDEN, "sa_secret"), (EAST, TABLE), (WEST, TABLE)}
    for namespace, rows in ROWS.items():
        stored = json.loads(dep.stored(namespace))
        assert stored["status"] == "TIERED" and stored["epoch"] == 1
        assert stored["committed"]["end_offsets"] == {"cursor": rows}
        one = cli_json(dep, "status", f"{namespace}.{TABLE}")
        for record in (one, listed[(namespace, TABLE)]):
            assert (record["status"], record["epoch"], record["last_round_rows"]) == ("TIERED", 1, rows)
            assert record["committed_offsets"] == {"cursor": rows}
            assert record["snapshot_id"] == stored["committed"]["snapshot_id"]
            assert record["dag_id"] == (DAG_EAST if namespace == EAST else DAG_WEST)
        # The lake holds what the state says: every hot row, once.
        assert digest(lake_rows(dep.catalog, (namespace, TABLE), COLUMNS)) == digest(
            dep.hot.rows(f"{TABLE}_{namespace}")
        )
        # Airflow's own state-store endpoint reads the default backend's table, which holds nothing here.
        assert dep.af.asset_state_store(f"tiering/{namespace}/{TABLE}") == {}
    hidden = listed[(HIDDEN, "sa_secret")]
    assert hidden["status"] == "FAILED" and hidden["quarantined"] is True and hidden["last_error"] == "boom"


def test_each_user_sees_only_the_tables_whose_assets_they_may_read(deployment: Deployment) -> None:
    from selenium.webdriver.common.by import By

    dep = deployment
    own = {"alice": EAST, "bob": WEST}
    for user, namespace in own.items():
        body = rest(dep, "GET", "/tiering/api/tables", user).json()
        assert places(body["tables"]) == [(namespace, TABLE)] and body["total_entries"] == 1, user
        # The bare name is theirs alone to them; the other tables do not exist for them.
        assert rest(dep, "GET", f"/tiering/api/tables/{TABLE}", user).json()["namespace"] == namespace
        other = WEST if namespace == EAST else EAST
        for hidden in (f"{other}.{TABLE}", f"tiering/{other}/{TABLE}", f"{HIDDEN}.sa_secret", "sa_secret"):
            assert rest(dep, "GET", f"/tiering/api/tables/{hidden}", user).status_code == 404, (user, hidden)
        assert rest(dep, "GET", f"/tiering/api/tables/{other}.{TABLE}/history", user).status_code == 404
        assert rest(dep, "GET", f"/tiering/api/tables/{other}.{TABLE}/data-age", user).status_code == 404
        history = rest(dep, "GET", f"/tiering/api/tables/{TABLE}/history", user).json()["rounds"]
        assert [r["rows"] for r in history] == [ROWS[namespace]]
        # The page's code holds no data: what it shows comes from the list above.
        page = rest(dep, "GET", "/tiering/static/tiering.js", user)
        assert page.status_code == 200 and TABLE not in page.text and HIDDEN not in page.text
    # A user who may read no asset at all gets nothing.
    for path in ("/tiering/", "/tiering/api/tables", f"/tiering/api/tables/{EAST}.{TABLE}"):
        assert rest(dep, "GET", path, "carol").status_code == 403, path
    admin_sees = places(rest(dep, "GET", "/tiering/api/tables").json()["tables"])
    assert admin_sees == [(EAST, TABLE), (HIDDEN, "sa_secret"), (WEST, TABLE)]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium(failure_screenshot=ARTIFACTS / "failure.png") as driver:
        for user, namespace in own.items():
            driver.delete_all_cookies()
            log_in(driver, dep.af.base_url, user, dep.passwords[user])
            driver.get(f"{dep.af.base_url}/plugin/tiering")
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#tables tbody tr"), 60, "no rows")
            rows = driver.find_elements(By.CSS_SELECTOR, "#tables tbody tr")
            shown = [(r.find_elements(By.TAG_NAME, "td")[0].text, r.get_attribute("data-table")) for r in rows]
            assert shown == [(namespace, TABLE)], user
            options = [
                o.get_attribute("value") for o in driver.find_elements(By.CSS_SELECTOR, "#filter-namespace option")
            ]
            assert options == ["", namespace]
            # Its detail view, reached by the row's link (the lake identifier: the bare name is ambiguous).
            driver.find_element(By.CSS_SELECTOR, "a.table-link").click()
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar"), 60, "no chart")
            bars = driver.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")
            assert [b.get_attribute("data-rows") for b in bars] == [str(ROWS[namespace])]
            assert driver.execute_script("return window.location.search") == f"?table={namespace}.{TABLE}"
            driver.save_screenshot(str(ARTIFACTS / f"page_{user}.png"))
        # A user who may read no asset sees the page say so (the REST API's 403), and no table.
        driver.delete_all_cookies()
        log_in(driver, dep.af.base_url, "carol", dep.passwords["carol"])
        driver.get(f"{dep.af.base_url}/plugin/tiering")
        banner = wait_for(driver, lambda d: d.find_elements(By.ID, "banner"), 60, "no refusal shown")[0]
        assert "403" in banner.text and "read access to assets" in banner.text
        assert not driver.find_elements(By.CSS_SELECTOR, "#tables")
        driver.save_screenshot(str(ARTIFACTS / "page_carol.png"))

    # The CLI runs as the deployment's operator: every table.
    assert places(cli_json(dep, "status")) == admin_sees


def test_an_ambiguous_name_is_refused_and_a_qualified_one_picks_the_table(deployment: Deployment) -> None:
    dep = deployment
    before = {namespace: dep.stored(namespace) for namespace in ROWS}

    for command in ("status", "history", "reset"):
        done = cli(dep, command, TABLE)
        assert done.returncode == 1, (command, done.stdout)
        for namespace, dag_id in ((EAST, DAG_EAST), (WEST, DAG_WEST)):
            assert f"{namespace}.{TABLE}" in done.stderr and dag_id in done.stderr, done.stderr
    for method, path in (
        ("GET", f"/tiering/api/tables/{TABLE}"),
        ("GET", f"/tiering/api/tables/{TABLE}/history"),
        ("GET", f"/tiering/api/tables/{TABLE}/data-age"),
        ("POST", f"/tiering/api/tables/{TABLE}/reset"),
    ):
        resp = rest(dep, method, path)
        assert resp.status_code == 400 and f"{EAST}.{TABLE}" in resp.text and f"{WEST}.{TABLE}" in resp.text, path
    assert {namespace: dep.stored(namespace) for namespace in ROWS} == before  # nothing was reset

    # Qualified: namespace.table, the asset's name, its URI.
    for ref, namespace in (
        (f"{WEST}.{TABLE}", WEST),
        (f"tiering/{EAST}/{TABLE}", EAST),
        (f"iceberg://iceberg_default/{WEST}/{TABLE}", WEST),
    ):
        assert cli_json(dep, "status", ref)["namespace"] == namespace, ref
        # In a URL, a name or URI with slashes is percent-encoded, or not: the route takes the rest of the path.
        for in_path in (ref, quote(ref, safe="")):
            assert rest(dep, "GET", f"/tiering/api/tables/{in_path}").json()["namespace"] == namespace, in_path
    history = cli_json(dep, "history", f"{EAST}.{TABLE}")
    assert [(h["epoch"], h["rows"]) for h in history] == [(1, ROWS[EAST])]
    rounds = rest(dep, "GET", f"/tiering/api/tables/{quote(f'tiering/{WEST}/{TABLE}', safe='')}/history").json()[
        "rounds"
    ]
    assert [(r["epoch"], r["rows"]) for r in rounds] == [(1, ROWS[WEST])]

    # reset by the lake identifier writes that table's document through the backend, and only that one.
    done = cli(dep, "reset", f"{EAST}.{TABLE}")
    assert done.returncode == 0, done.stderr
    assert json.loads(dep.stored(EAST))["note"].startswith("reset at ")
    assert dep.stored(WEST) == before[WEST]
    resp = rest(dep, "POST", f"/tiering/api/tables/{WEST}.{TABLE}/reset")
    assert resp.status_code == 200 and resp.json()["namespace"] == WEST, resp.text
    assert json.loads(dep.stored(WEST))["note"].startswith("reset at ")
