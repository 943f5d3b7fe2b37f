"""The Tiering page and REST API under a real Airflow (api-server, scheduler, LocalExecutor): a person signed in
through the login form sees, in Airflow's own navigation and theme (light and dark), every table with its status
and the failed one's error, and a table's rounds as a chart; nobody signed out gets anything (a browser is sent to
the login page); a viewer reads but can neither reset nor trigger, from the REST API or the page's buttons, which
work for an admin; the REST list says what the asset state store says; a past error is shown as past, and lag as
what is known of it. Airflow is served under a path (``/airflow``), as behind a proxy: the page's bundle, its API
calls and its links follow it. Screenshots of each view are kept in tests/artifacts/ui/."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import httpx
import pytest

from testbed.airflow_cluster import AirflowCluster
from testbed.browser import chromium, log_in, wait_for
from testbed.hot_tables import PostgresHot
from testbed.state_documents import assets_dag_file, state_document, write_in_cluster
from testbed.tiering_env import tiering_setup

DAG_ID = "tiering_ui"
PREFIX = "/airflow"
WRONG_PASSWORD = "wrong-Secret-pw-71ad"
VIEWER = "viewer"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "ui"
# Shown as text, never run: an error text is user data.
HOSTILE_ERROR = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> & "quoted" </td></tr>'

DAG_FILE = textwrap.dedent(
    f'''
    """Three PostgreSQL tables in two namespaces; ui_broken's connection has a wrong password."""
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    def table(name, conn_id, namespace):
        return {{
            "name": name,
            "source": {{"conn_id": conn_id, "table": name, "cursor_column": "id"}},
            "lake": {{"namespace": namespace, "table": name}},
            "retries": 0,
            "max_consecutive_failures": 1,
            "freshness_seconds": 1,
        }}

    dag = build_tiering_dag(
        "{DAG_ID}",
        [table("ui_alpha", "hot_pg", "ui"), table("ui_beta", "hot_pg", "ui_other"),
         table("ui_broken", "hot_broken", "ui")],
    )
    '''
)


@dataclass
class TieredUI:
    af: AirflowCluster
    viewer_password: str
    first_run: str
    second_run: str
    work_dir: Path


@pytest.fixture(scope="module")
def ui(pg_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredUI]:
    """One cluster for the module: a failed run tiering all three tables, then a run of ui_alpha alone (its
    second round), plus a fourth table's state document whose error text is hostile HTML."""
    tmp_path = tmp_path_factory.mktemp("ui")
    hot = PostgresHot(pg_server.dsn)
    for offset, name in enumerate(("ui_alpha", "ui_beta", "ui_broken")):
        hot.create(name)
        hot.insert(name, 1, 1500 + 500 * offset)
    dags, _, env = tiering_setup(tmp_path, pg_server, DAG_FILE, WRONG_PASSWORD)
    hostile = state_document("ui_hostile", "FAILED", rows=5000, consecutive_failures=2, namespace="ui_other")
    hostile.update(last_error=HOSTILE_ERROR, last_error_time=datetime.now().astimezone().isoformat())
    (dags / "hostile_assets.py").write_text(assets_dag_file("tiering_ui_assets", [hostile]))
    users = {"core": {"simple_auth_manager_users": f"admin:admin,{VIEWER}:viewer"}}
    # Served under a path, as behind a proxy: the page's bundle, its API and its links must all follow it.
    cluster = AirflowCluster(
        home=tmp_path / "airflow", dags_folder=dags, extra_env=env, config_overrides=users, path_prefix=PREFIX
    )
    with cluster as af:
        write_in_cluster(af, [hostile], tmp_path)
        first = af.trigger_dag(DAG_ID)
        assert af.wait_for_run(DAG_ID, first, timeout=480) == "failed"
        hot.insert("ui_alpha", 10_001, 700)
        second = af.trigger_dag(DAG_ID, conf={"tables": ["ui_alpha"]})
        assert af.wait_for_run(DAG_ID, second, timeout=300) == "success"
        viewer_password = json.loads(af.passwords_file.read_text())[VIEWER]
        yield TieredUI(af, viewer_password, first, second, tmp_path)


def token(af: AirflowCluster, username: str, password: str) -> str:
    resp = af.client.post("/auth/token", json={"username": username, "password": password})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["access_token"])


def rest(
    af: AirflowCluster,
    method: str,
    path: str,
    bearer: str | None = None,
    cookies: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    with httpx.Client(base_url=af.base_url, timeout=60, trust_env=False, cookies=cookies) as client:
        return client.request(method, path, headers=headers, **kwargs)


def rows_by_table(driver: Any) -> dict[str, dict[str, str]]:
    """The list view's rows in their order: table -> {namespace, status, epoch, rows, quarantined, error}."""
    rows = driver.execute_script(
        """
        return [...document.querySelectorAll('#tables tbody tr')].map((tr) => {
          const cells = tr.querySelectorAll('td');
          return [tr.dataset.table, {
            namespace: cells[0].textContent, status: tr.querySelector('.badge').textContent,
            epoch: cells[3].textContent, rows: cells[7].textContent, quarantined: cells[9].textContent,
            error: cells[10].textContent,
          }];
        });
        """
    )
    return {table: info for table, info in rows}  # a list, not an object: WebDriver sorts an object's keys


def use_theme(driver: Any, base_url: str, theme: str) -> None:
    """Airflow's UI keeps the user's colour mode in local storage (next-themes' ``theme`` key), as its toggle does."""
    driver.get(f"{base_url}/auth/login")  # any page of the origin
    driver.execute_script("localStorage.setItem('theme', arguments[0])", theme)


def page_colours(driver: Any) -> tuple[float, float]:
    """The relative luminance (0 black .. 1 white) of what the page's text is drawn on (the first opaque background
    from a table cell up) and of that cell's text, as the browser computed and painted them."""
    script = """
        const cell = document.querySelector('#tables tbody td') || document.querySelector('#detail-view dd');
        const context = document.createElement('canvas').getContext('2d', { willReadFrequently: true });
        const rgba = (css) => {  // any CSS colour (rgb, oklch...) as the browser paints it
            context.clearRect(0, 0, 1, 1);
            context.fillStyle = css;
            context.fillRect(0, 0, 1, 1);
            return [...context.getImageData(0, 0, 1, 1).data];
        };
        const luminance = ([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
        let node = cell;
        while (node.parentElement && rgba(getComputedStyle(node).backgroundColor)[3] === 0) node = node.parentElement;
        return [luminance(rgba(getComputedStyle(node).backgroundColor)), luminance(rgba(getComputedStyle(cell).color))];
    """
    background, text = driver.execute_script(script)
    return float(background), float(text)


def open_page(driver: Any, base_url: str, query: str = "") -> None:
    """The Tiering page in Airflow's UI (``/plugin/tiering``), once its list or a table's detail has rendered."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base_url}/plugin/tiering{query}")
    ready = "#detail-view" if query else "#tables tbody tr"
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ready), 90, f"page not rendered: {ready}")


def test_page_in_airflows_ui_shows_every_table_and_a_tables_rounds_in_chromium(ui: TieredUI) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    af = ui.af
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Tall enough that a table's detail screenshot shows its chart.
    with chromium(height=1800, failure_screenshot=ARTIFACTS / "failure.png") as driver:
        log_in(driver, af.base_url, "admin", "admin")
        use_theme(driver, af.base_url, "light")

        # In Airflow's own navigation: Browse -> Tiering, from the UI's sidebar, renders in the UI's React tree.
        driver.get(f"{af.base_url}/")
        # The sidebar renders before its menus (the menus a user may see are fetched after): wait for Browse itself.
        browse = wait_for(
            driver,
            lambda d: [
                b
                for b in d.find_elements(By.CSS_SELECTOR, "[data-testid=nav-sidebar] button")
                if b.text.strip() == "Browse"
            ],
            90,
            "no Browse menu in the sidebar",
        )[0]
        browse.click()
        entry = wait_for(
            driver,
            lambda d: [a for a in d.find_elements(By.CSS_SELECTOR, "a[role=menuitem]") if a.text == "Tiering"],
            30,
            "no Tiering entry in Browse",
        )[0]
        assert urlparse(entry.get_attribute("href")).path == f"{PREFIX}/plugin/tiering"
        entry.click()
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tables tbody tr")) == 4, 60, "4 rows")
        in_ui = "return document.getElementById('root').contains(document.getElementById('tiering'))"
        assert driver.execute_script(in_ui)
        assert not driver.find_elements(By.TAG_NAME, "iframe")
        rows = rows_by_table(driver)
        assert {t: r["status"] for t, r in rows.items()} == {
            "ui_alpha": "TIERED",
            "ui_beta": "TIERED",
            "ui_broken": "FAILED",
            "ui_hostile": "FAILED",
        }
        assert "ui_broken: cannot connect" in rows["ui_broken"]["error"]  # the first line, shortened
        assert rows["ui_broken"]["quarantined"] == "yes" and rows["ui_alpha"]["quarantined"] == "no"
        assert rows["ui_alpha"]["epoch"] == "2" and rows["ui_alpha"]["rows"] == "700"
        # Hostile error text is shown as text: no element it describes exists, no script of it ran.
        assert "<img src=x" in rows["ui_hostile"]["error"]
        assert driver.execute_script("return document.querySelectorAll('#tables img, #tables script').length") == 0
        assert driver.execute_script("return window.__xss === undefined")
        driver.find_element(By.CSS_SELECTOR, "tr[data-table=ui_broken] .error-toggle").click()
        full = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-table=ui_broken] .error-full"))
        assert "password authentication failed" in full[0].text
        assert WRONG_PASSWORD not in driver.page_source
        light_background, light_text = page_colours(driver)
        assert light_background > 0.8 and light_text < 0.3, (light_background, light_text)
        driver.save_screenshot(str(ARTIFACTS / "tiering_list_light.png"))

        # Filters and sorting (a click's handler may run after the click command returns: wait for the rows).
        def shows(tables: list[str]) -> bool:
            return list(rows_by_table(driver)) == tables

        driver.find_element(By.CSS_SELECTOR, "#filter-status option[value=FAILED]").click()
        wait_for(driver, lambda d: shows(["ui_broken", "ui_hostile"]), 10, "status filter")
        driver.find_element(By.CSS_SELECTOR, "#filter-status option[value='']").click()
        driver.find_element(By.CSS_SELECTOR, "#filter-namespace option[value=ui_other]").click()
        wait_for(driver, lambda d: shows(["ui_beta", "ui_hostile"]), 10, "namespace filter")
        driver.find_element(By.CSS_SELECTOR, "#filter-namespace option[value='']").click()
        driver.find_element(By.ID, "filter-text").send_keys("bet")
        wait_for(driver, lambda d: shows(["ui_beta"]), 10, "name filter")
        driver.find_element(By.ID, "filter-text").send_keys(Keys.BACKSPACE * 3)
        wait_for(driver, lambda d: shows(["ui_alpha", "ui_beta", "ui_broken", "ui_hostile"]), 10, "by name")
        driver.find_element(By.CSS_SELECTOR, "th[data-sort=last_round_rows]").click()
        wait_for(driver, lambda d: shows(["ui_alpha", "ui_beta", "ui_hostile", "ui_broken"]), 10, "ascending")
        driver.find_element(By.CSS_SELECTOR, "th[data-sort=last_round_rows]").click()  # rows unknown: last both ways
        wait_for(driver, lambda d: shows(["ui_hostile", "ui_beta", "ui_alpha", "ui_broken"]), 10, "descending")

        # A table's detail: one bar per round (two rounds of ui_alpha), newest rows first in its table.
        driver.execute_script("window.__same_page = true")  # gone if anything below reloads the page
        driver.find_element(By.CSS_SELECTOR, "tr[data-table=ui_alpha] a.table-link").click()
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar"), 60, "no chart")
        assert urlparse(driver.current_url).query == "table=ui.ui_alpha"
        bars = driver.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")
        assert [b.get_attribute("data-rows") for b in bars] == ["1500", "700"]  # oldest first
        snapshot_id = af.asset_state_store("tiering/ui/ui_alpha")["tiering_state"]["committed"]["snapshot_id"]
        shown = driver.execute_script(
            "return [...document.querySelectorAll('dl.facts dt')]"
            ".find((dt) => dt.textContent === 'Snapshot').nextElementSibling.textContent"
        )
        assert shown == str(snapshot_id)  # all 64 bits, not a double's rounding
        # Its data age over time, from the history table: a point at the end of each round (and at the start of
        # each but the first, which had nothing to be behind), joined in time order.
        points = driver.find_elements(By.CSS_SELECTOR, "svg.data-age circle.age-point")
        assert len(points) >= 3 and driver.find_elements(By.CSS_SELECTOR, "svg.data-age polyline.age-line")
        assert all(float(p.get_attribute("data-age")) >= 0 for p in points)
        links = driver.find_elements(By.CSS_SELECTOR, "#rounds a[data-airflow-route]")
        assert [urlparse(a.get_attribute("href")).path for a in links] == [
            f"{PREFIX}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/ui_alpha"
            for run_id in (ui.second_run, ui.first_run)
        ]
        driver.save_screenshot(str(ARTIFACTS / "tiering_detail_light.png"))
        # A round's link moves Airflow's UI to that task instance, without reloading it.
        links[0].click()
        wait_for(
            driver, lambda d: urlparse(d.current_url).path.startswith(f"{PREFIX}/dags/{DAG_ID}/runs/"), 30, "no nav"
        )
        assert urlparse(driver.current_url).path.endswith("/tasks/ui_alpha")
        assert driver.execute_script("return window.__same_page === true")
        driver.back()
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar"), 60, "back: no chart")

        # It refreshes itself: a table's rounds are fetched again within its 10 s, without reloading the page.
        driver.execute_script("window.__same_page = true")
        fetches = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/history')).length"
        before = driver.execute_script(fetches)
        wait_for(driver, lambda d: d.execute_script(fetches) > before, 30, "the detail was not refreshed")
        assert driver.execute_script("return window.__same_page === true")
        assert driver.find_element(By.ID, "updated").text.startswith("updated ")

        # Dark: the UI's colour mode, followed by the page (the UI's theme tokens, no colours of its own).
        use_theme(driver, af.base_url, "dark")
        open_page(driver, af.base_url)
        assert driver.execute_script("return document.documentElement.classList.contains('dark')")
        dark_background, dark_text = page_colours(driver)
        assert dark_background < 0.2 and dark_text > 0.7, (dark_background, dark_text)
        driver.save_screenshot(str(ARTIFACTS / "tiering_list_dark.png"))
        open_page(driver, af.base_url, "?table=ui.ui_alpha")
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar"), 60, "no chart")
        driver.save_screenshot(str(ARTIFACTS / "tiering_detail_dark.png"))

        # The page's address before it joined the UI still leads to it, a table's detail included.
        driver.get(f"{af.base_url}/tiering/#table=ui_other.ui_beta")
        wait_for(driver, lambda d: urlparse(d.current_url).query == "table=ui_other.ui_beta", 60, "old link")
        wait_for(driver, lambda d: "tiering/ui_other/ui_beta" in d.find_element(By.ID, "detail-view").text, 60)

    react_apps = [a for p in af.get("/api/v2/plugins")["plugins"] for a in p["react_apps"]]
    assert {"name": "Tiering", "bundle_url": "tiering/static/tiering.js", "url_route": "tiering"}.items() <= next(
        a for a in react_apps if a["name"] == "Tiering"
    ).items()
    for query in ("", "?table=ui.ui_alpha"):
        moved = rest(af, "GET", f"/tiering/{query}", af.token(), follow_redirects=False)
        assert (moved.status_code, moved.headers["location"]) == (307, f"{PREFIX}/plugin/tiering{query}")


def test_rest_list_agrees_with_the_asset_state_store(ui: TieredUI) -> None:
    af = ui.af
    listed = rest(af, "GET", "/tiering/api/tables", af.token()).json()
    assert listed["total_entries"] == 4
    for row in listed["tables"]:
        stored = af.asset_state_store(row["asset"])["tiering_state"]
        assert row["status"] == stored["status"] and row["epoch"] == stored["epoch"]
        assert row["last_error"] == stored["last_error"]
        assert row["consecutive_failures"] == stored["consecutive_failures"]
        assert row["quarantined"] == (stored["quarantined_since"] is not None)
        assert row["committed_offsets"] == (stored["committed"] or {}).get("end_offsets")
        assert row["last_round_rows"] == (stored["last_round"] or {}).get("rows")
        for key in ("last_tiered_time", "last_error_time"):
            assert (row[key] and datetime.fromisoformat(row[key])) == (
                stored[key] and datetime.fromisoformat(stored[key])
            )
    by_name = {row["table"]: row for row in listed["tables"]}
    assert by_name["ui_alpha"]["dag_id"] == DAG_ID and by_name["ui_alpha"]["task_id"] == "ui_alpha"
    # ui_alpha's cursor is an integer: no age of its data; its last round left no rows behind.
    assert by_name["ui_alpha"]["newest_data_age_seconds"] is None and by_name["ui_alpha"]["backlog_rows"] == 0

    # The run of ui_alpha alone: its summary does not call the tables it left out idle.
    summary = af.task_log(DAG_ID, ui.second_run, "tiering_summary", 1)
    assert "NOT IN THIS RUN" in summary and "NOTHING TO TIER" not in summary, summary

    failed = rest(af, "GET", "/tiering/api/tables", af.token(), params={"status": "FAILED"}).json()
    assert sorted(t["table"] for t in failed["tables"]) == ["ui_broken", "ui_hostile"]
    other = rest(af, "GET", "/tiering/api/tables", af.token(), params={"namespace": "ui_other"}).json()
    assert sorted(t["table"] for t in other["tables"]) == ["ui_beta", "ui_hostile"]
    assert rest(af, "GET", "/tiering/api/tables", af.token(), params={"status": "NOPE"}).status_code == 422

    one = rest(af, "GET", "/tiering/api/tables/ui_broken", af.token()).json()
    assert one == by_name["ui_broken"] | {"staleness_seconds": one["staleness_seconds"]}
    assert rest(af, "GET", "/tiering/api/tables/nope", af.token()).status_code == 404
    assert rest(af, "GET", "/tiering/api/tables/nope/history", af.token()).status_code == 404

    history = rest(af, "GET", "/tiering/api/tables/ui_alpha/history", af.token(), params={"limit": 10}).json()
    events = af.asset_events("tiering/ui/ui_alpha")
    assert [r["rows"] for r in history["rounds"]] == [e["extra"]["rows"] for e in reversed(events)] == [700, 1500]
    assert [r["run_id"] for r in history["rounds"]] == [ui.second_run, ui.first_run]
    assert (
        len(rest(af, "GET", "/tiering/api/tables/ui_alpha/history", af.token(), params={"limit": 1}).json()["rounds"])
        == 1
    )

    # The data age of each round, from the lake's history table: ui_alpha's two rounds, ui_broken's failed one.
    ages = rest(af, "GET", "/tiering/api/tables/ui_alpha/data-age", af.token()).json()
    assert ages["unavailable"] is None and ages["table"] == "ui_alpha"
    tiered = [r for r in ages["rounds"] if r["outcome"] == "tiered"]
    assert [r["epoch"] for r in tiered] == [1, 2] and [r["rows_in"] for r in tiered] == [1500, 700], ages
    assert all(r["data_age_after_seconds"] is not None for r in tiered)
    broken = rest(af, "GET", "/tiering/api/tables/ui_broken/data-age", af.token()).json()["rounds"]
    assert broken and {r["outcome"] for r in broken} == {"failed"}
    assert rest(af, "GET", "/tiering/api/tables/nope/data-age", af.token()).status_code == 404
    assert rest(af, "GET", "/tiering/api/tables/ui_alpha/data-age", af.token(), params={"hours": 0}).status_code == 422

    spec = rest(af, "GET", "/tiering/openapi.json", af.token()).json()
    assert set(spec["paths"]) == {
        "/api/tables",
        "/api/tables/{table}",
        "/api/tables/{table}/history",
        "/api/tables/{table}/data-age",
        "/api/tables/{table}/reset",
        "/api/trigger",
    }


ENDPOINTS = [
    ("GET", "/tiering/", None),
    ("GET", "/tiering/static/tiering.js", None),
    ("GET", "/tiering/openapi.json", None),
    ("GET", "/tiering/api/tables", None),
    ("GET", "/tiering/api/tables/ui_alpha", None),
    ("GET", "/tiering/api/tables/ui_alpha/history", None),
    ("GET", "/tiering/api/tables/ui_alpha/data-age", None),
    ("POST", "/tiering/api/tables/ui_broken/reset", None),
    ("POST", "/tiering/api/trigger", {"tables": ["ui_alpha"]}),
]


def test_signed_out_requests_get_nothing(ui: TieredUI) -> None:
    for method, path, body in ENDPOINTS:
        for bearer in (None, "not-a-jwt"):
            resp = rest(ui.af, method, path, bearer, json=body)
            assert "ui_alpha" not in resp.text and "password" not in resp.text
            if (method, path, bearer) == ("GET", "/tiering/", None):  # a browser: to the login page, then the page
                assert resp.status_code == 307, resp.text
                assert (
                    resp.headers["location"] == f"{PREFIX}/auth/login?next={quote(PREFIX, safe='')}%2Fplugin%2Ftiering"
                )
                continue
            assert resp.status_code in (401, 403), (method, path, bearer, resp.status_code)
    assert rest(ui.af, "GET", "/tiering/api/tables", cookies={"_token": "forged"}).status_code in (401, 403)
    # A forged token is refused as Airflow refuses it (403); only a missing or expired one means "sign in".
    assert rest(ui.af, "GET", "/tiering/", cookies={"_token": "forged"}).status_code == 403


def test_viewer_reads_but_can_neither_reset_nor_trigger(ui: TieredUI) -> None:
    af = ui.af
    viewer = token(af, VIEWER, ui.viewer_password)
    for method, path, _ in ENDPOINTS[:7]:
        assert rest(af, method, path, viewer).status_code == (307 if path == "/tiering/" else 200), path
    resp = rest(af, "POST", "/tiering/api/tables/ui_broken/reset", viewer)
    assert resp.status_code == 403 and "edit access" in resp.text
    resp = rest(af, "POST", "/tiering/api/trigger", viewer, json={"tables": ["ui_alpha"]})
    assert resp.status_code == 403 and DAG_ID in resp.text
    state = af.asset_state_store("tiering/ui/ui_broken")["tiering_state"]
    assert state["quarantined_since"] is not None  # untouched
    runs = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["dag_runs"]
    assert len(runs) == 2  # nothing triggered


def test_admin_resets_a_quarantined_table_and_triggers_a_round(ui: TieredUI) -> None:
    af = ui.af
    admin = af.token()
    assert rest(af, "POST", "/tiering/api/tables/nope/reset", admin).status_code == 404
    assert rest(af, "POST", "/tiering/api/trigger", admin, json={"tables": ["nope"]}).status_code == 404
    assert rest(af, "POST", "/tiering/api/trigger", admin, json={"tables": []}).status_code == 422

    reset = rest(af, "POST", "/tiering/api/tables/ui_broken/reset", admin)
    assert reset.status_code == 200, reset.text
    assert reset.json()["quarantined"] is False and reset.json()["consecutive_failures"] == 0
    assert af.asset_state_store("tiering/ui/ui_broken")["tiering_state"]["quarantined_since"] is None

    resp = rest(af, "POST", "/tiering/api/trigger", admin, json={"tables": ["ui_beta", "ui_broken"]})
    assert resp.status_code == 200, resp.text
    (run,) = resp.json()["runs"]
    assert run["dag_id"] == DAG_ID and run["tasks"] == {"ui_beta": "ui_beta", "ui_broken": "ui_broken"}
    assert af.dag_run(DAG_ID, run["run_id"])["conf"] == {"tables": ["ui_beta", "ui_broken"]}
    assert af.wait_for_run(DAG_ID, run["run_id"], timeout=300) == "failed"
    states = af.task_instances(DAG_ID, run["run_id"])
    assert states["ui_broken"] == "failed" and states["ui_alpha"] == "skipped"  # it ran again, alone


def test_page_buttons_past_errors_lag_and_the_login_redirect_in_chromium(ui: TieredUI) -> None:
    """Runs last: it rewrites ui_hostile's state (healed: its error is past) and resets and triggers from the page."""
    from selenium.webdriver.common.by import By

    af = ui.af
    now = datetime.now(UTC)
    healed = state_document("ui_hostile", "TIERED", rows=5000, namespace="ui_other")
    healed["last_round"]["backlog_rows"] = 1_000_000
    healed["committed"]["end_offsets"] = {"cursor": (now - timedelta(minutes=90)).isoformat()}
    healed.update(last_error=HOSTILE_ERROR, last_error_time=(now - timedelta(hours=2)).isoformat())
    # As a change-stream table's round leaves it: mode, key, row changes and its slot holding WAL over the bound.
    healed["last_round"].update(inserted_rows=3, updated_rows=4, deleted_rows=5)
    healed.update(
        mode="change_stream",
        merge_key=["id"],
        change_stream={
            "slot": "tiering_ui_other_ui_hostile",
            "exists": True,
            "confirmed_flush_lsn": "0/1A2B3C",
            "retained_wal_bytes": 3 * 1024**3,
            "max_retained_wal_bytes": 1024**3,
        },
    )
    # An append table whose rows were changed in place behind the lake's back, after a change of shape it followed.
    alpha = {**af.asset_state_store("tiering/ui/ui_alpha")["tiering_state"], "namespace": "ui"}
    alpha.update(
        in_place_changes={
            "updated_since_last_round": 30,
            "deleted_since_last_round": 5,
            "updated_total": 31,
            "deleted_total": 6,
            "watched_since": (now - timedelta(hours=1)).isoformat(),
            "counters": {"updated": 31, "deleted": 6, "evicted": 0},
        },
        shape_change={"at": now.isoformat(), "changes": "renamed b -> b2; added c", "reload": None},
    )
    write_in_cluster(af, [healed, alpha], ui.work_dir)
    broken = af.asset_state_store("tiering/ui/ui_broken")["tiering_state"]
    assert broken["quarantined_since"] is not None  # failed again in the admin's run: quarantined once more

    def cell(driver: Any, table: str, css: str) -> tuple[str, str]:
        found = driver.find_element(By.CSS_SELECTOR, f"tr[data-table={table}] {css}")
        return found.text, found.get_attribute("title") or ""

    def shown(driver: Any, element_id: str) -> str:  # the banner's or the notice's text, "" while there is none
        script = "const e = document.getElementById(arguments[0]); return e ? e.textContent : ''"
        return str(driver.execute_script(script, element_id))

    def banner(driver: Any) -> str:
        return shown(driver, "banner")

    def notice(driver: Any) -> str:
        return shown(driver, "notice")

    with chromium(failure_screenshot=ARTIFACTS / "failure_buttons.png") as driver:
        # Signed out, the page's old address and the page itself send the browser to Airflow's login form.
        for path in ("/tiering/", "/plugin/tiering"):
            driver.get(f"{af.base_url}{path}")
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "input[name=username]"), 60, "no login form")
            assert urlparse(driver.current_url).path.startswith(f"{PREFIX}/auth/login"), path

        log_in(driver, af.base_url, VIEWER, ui.viewer_password)
        use_theme(driver, af.base_url, "dark")  # the viewer's page in dark mode, the admin's below in light
        open_page(driver, af.base_url)
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tables tbody tr")) == 4, 60, "4 rows")
        background, text = page_colours(driver)
        assert background < 0.2 and text > 0.7, (background, text)
        # A past error is muted and says so; what is known of lag, with what it means.
        error = driver.find_element(By.CSS_SELECTOR, "tr[data-table=ui_hostile] td.error")
        assert "past-error" in (error.get_attribute("class") or "") and error.text.startswith("past: <img src=x")
        assert cell(driver, "ui_hostile", "td.backlog")[0] == "1,000,000"
        assert cell(driver, "ui_hostile", "td.data-age")[0] == "1.5 h"
        backlog, backlog_title = cell(driver, "ui_alpha", "td.backlog")
        assert backlog == "\u2013" and "left nothing behind" in backlog_title
        age, age_title = cell(driver, "ui_alpha", "td.data-age")
        assert age == "\u2013" and "not a time cursor" in age_title
        broken_error = driver.find_element(By.CSS_SELECTOR, "tr[data-table=ui_broken] td.error")
        assert "past-error" not in (broken_error.get_attribute("class") or "")
        driver.save_screenshot(str(ARTIFACTS / "tiering_list_past_error_viewer_dark.png"))

        # A change-stream table's detail: its mode and key, its last round's row changes, its slot's retained WAL.
        open_page(driver, af.base_url, "?table=ui_other.ui_hostile")
        wait_for(driver, lambda d: d.find_elements(By.ID, "retained-wal"), 60, "no retained WAL")
        detail = driver.find_element(By.ID, "detail-view").text
        assert "change stream, key id" in detail and "3 inserted, 4 updated, 5 deleted" in detail
        assert "tiering_ui_other_ui_hostile at 0/1A2B3C" in detail
        retained = driver.find_element(By.ID, "retained-wal")
        assert retained.text == "3.0 GiB (bound 1.0 GiB) — over the bound"
        assert "error" in (retained.get_attribute("class") or "")

        # An append table's rows changed in place (with what to do about it) and its last change of shape.
        open_page(driver, af.base_url, "?table=ui.ui_alpha")
        wait_for(driver, lambda d: d.find_elements(By.ID, "in-place-changes"), 60, "no changes in place")
        changed = driver.find_element(By.ID, "in-place-changes")
        assert changed.text.startswith("30 updated, 5 deleted since the round before (31 / 6 since ")
        assert "tier it by key (merge) or change stream" in changed.text
        assert "error" in (changed.get_attribute("class") or "")
        assert driver.find_element(By.ID, "shape-change").text.startswith("renamed b -> b2; added c (")

        # A table without rounds: its detail says so, and nothing reads "null".
        open_page(driver, af.base_url, "?table=ui.ui_broken")
        wait_for(driver, lambda d: d.find_elements(By.ID, "reset-table"), 60, "no reset button")
        detail = driver.find_element(By.ID, "detail-view").text
        assert "No round has tiered rows yet." in detail and "null" not in detail
        # A viewer's reset and trigger are refused by the REST API, with its reason; nothing changes.
        driver.find_element(By.ID, "reset-table").click()
        wait_for(driver, lambda d: "edit access" in banner(d), 30, "no refusal")
        driver.find_element(By.ID, "trigger-table").click()
        wait_for(driver, lambda d: DAG_ID in banner(d) and "403" in banner(d), 30, "no refusal")
        driver.save_screenshot(str(ARTIFACTS / "tiering_detail_refused_viewer_dark.png"))
        assert af.asset_state_store("tiering/ui/ui_broken")["tiering_state"]["quarantined_since"] is not None
        runs_before = len(af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["dag_runs"])

    with chromium(failure_screenshot=ARTIFACTS / "failure_buttons_admin.png") as driver:
        log_in(driver, af.base_url, "admin", "admin")
        use_theme(driver, af.base_url, "light")
        open_page(driver, af.base_url, "?table=ui.ui_broken")
        wait_for(driver, lambda d: d.find_elements(By.ID, "reset-table"), 60, "no reset button")
        driver.find_element(By.ID, "reset-table").click()
        wait_for(driver, lambda d: "quarantine lifted" in notice(d), 30, "no reset")
        assert af.asset_state_store("tiering/ui/ui_broken")["tiering_state"]["quarantined_since"] is None
        wait_for(driver, lambda d: not d.find_elements(By.ID, "reset-table"), 30, "reset still offered")

        open_page(driver, af.base_url, "?table=ui.ui_alpha")
        wait_for(driver, lambda d: d.find_elements(By.ID, "trigger-table"), 60, "no trigger button")
        driver.find_element(By.ID, "trigger-table").click()
        wait_for(driver, lambda d: "Started run" in notice(d), 30, "no run started")
        driver.save_screenshot(str(ARTIFACTS / "tiering_detail_triggered_admin_light.png"))
        runs = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns")["dag_runs"]
        assert len(runs) == runs_before + 1
        started = next(r for r in runs if r["dag_run_id"] in notice(driver))
        assert af.dag_run(DAG_ID, started["dag_run_id"])["conf"] == {"tables": ["ui_alpha"]}
