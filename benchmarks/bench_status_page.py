"""Benchmark: the Tiering page and its list endpoint with many tables, under a real Airflow api-server.

A real Airflow (the e2e harness ``testbed.airflow_cluster.AirflowCluster``: api-server, scheduler,
dag-processor, LocalExecutor, SQLite metadata DB) with one DAG that never runs, whose task has the tables' assets
as outlets (Airflow deletes the state of assets no DAG references); ``--tables`` state documents (default 500,
across 10 namespaces, one in ten FAILED with a multi-line error) are written straight into its asset state store,
as ``status.reset_table`` writes one. Then, ``--repeat`` times each, after one unmeasured warm-up:

* ``GET /tiering/api/tables``           the list endpoint (bearer token), wall time seen by the client;
* ``GET /tiering/static/tiering.js``    the page's bundle, wall time seen by the client;
* chromium    headless Debian Chromium, signed in through the login form, loads the page in Airflow's UI
              (``/plugin/tiering``): time to the list = the page's ``tiering-list-rendered`` performance mark
              (ms since navigation start; Airflow's UI loads, then the page's bundle, then the list), next to
              the navigation's responseEnd and domContentLoaded, when the UI asked for the page's bundle and when
              the list arrived; the page's first 50 rows are checked to be there, and its second page once.

Target: each median under 1 s. Prints a table; writes ``benchmarks/results/status_page.json``.

    python -m benchmarks.bench_status_page                 # 500 tables, 5 repeats
    python -m benchmarks.bench_status_page --tables 20 --repeat 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make ``testbed`` importable
    sys.path.insert(0, str(REPO))

from testbed.airflow_cluster import AirflowCluster, benchmark_config  # noqa: E402
from testbed.browser import chromium, log_in, wait_for  # noqa: E402
from testbed.state_documents import assets_dag_file, state_document, write_in_cluster  # noqa: E402

NAMESPACES = 10
ASSETS_DAG = "bench_status_page_assets"
BUNDLE_PATH = "/tiering/static/tiering.js"
#: The page shows this many rows at once (``PAGE_SIZE`` in plugins/www/src/TablesList.tsx).
PAGE_SIZE = 50
RENDERED = "return performance.getEntriesByName('tiering-list-rendered').length > 0"
ERROR = (
    'psycopg.OperationalError: connection failed: FATAL:  password authentication failed for user "tiering"\n'
    '  File "airflow_provider_tiering/sources/sql.py", line 120, in connect\n' * 8
)


def documents(tables: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(tables):
        failed = i % 10 == 3
        doc = state_document(
            f"table_{i:04d}",
            "FAILED" if failed else "TIERED",
            epoch=1 + i % 37,
            rows=1000 + 17 * i,
            namespace=f"ns_{i % NAMESPACES:02d}",
        )
        if failed:
            doc.update(last_error=ERROR, last_error_time=doc["last_checked_time"], consecutive_failures=1 + i % 4)
        docs.append(doc)
    return docs


def timed_get(client: httpx.Client, path: str, headers: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    resp = client.get(path, headers=headers)
    elapsed = time.perf_counter() - t0
    resp.raise_for_status()
    return elapsed, len(resp.content)


def browser_loads(af: AirflowCluster, tables: int, repeat: int) -> list[dict[str, float]]:
    """Load the page ``repeat`` times (after one warm-up) in one signed-in Chromium; per load, ms figures."""
    from selenium.webdriver.common.by import By

    loads = []
    shown = min(tables, PAGE_SIZE)
    with chromium() as driver:
        log_in(driver, af.base_url, "admin", "admin")
        for attempt in range(repeat + 1):
            driver.get(f"{af.base_url}/plugin/tiering?load={attempt}")
            wait_for(driver, lambda d: d.execute_script(RENDERED), 120, "the list never rendered")
            wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tables tbody tr")) == shown, 30)
            figures = driver.execute_script(
                """
                const nav = performance.getEntriesByType('navigation')[0];
                const resource = (end) => performance.getEntriesByType('resource').find((e) => e.name.endsWith(end));
                return {
                  first_render_ms: performance.getEntriesByName('tiering-list-rendered')[0].startTime,
                  bundle_requested_ms: resource('/static/tiering.js').startTime,
                  list_received_ms: resource('/api/tables').responseEnd,
                  response_end_ms: nav.responseEnd,
                  dom_content_loaded_ms: nav.domContentLoadedEventEnd,
                  rows: document.querySelectorAll('#tables tbody tr').length,
                };
                """
            )
            summary = driver.find_element(By.ID, "summary").text
            if figures["rows"] != shown or not summary.startswith(f"{tables} of {tables} table(s)"):
                raise AssertionError(f"the page shows {figures['rows']} rows ({summary}), expected {shown} of {tables}")
            if attempt == 0 and tables > PAGE_SIZE:  # its pages: the second one shows the next tables
                driver.find_element(By.ID, "page-next").click()
                second = f"{PAGE_SIZE + 1}\u2013{min(2 * PAGE_SIZE, tables)} of {tables}"
                wait_for(driver, lambda d, s=second: d.find_element(By.ID, "pager").text.startswith(s), 30, "no page 2")
            if attempt:
                loads.append(figures)
    return loads


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "n": len(values),
    }


def print_table(tables: int, results: dict[str, dict[str, float]], target_s: float) -> None:
    print(f"\n{tables} tables; seconds (median [min..max] of n)")
    head = f"{'measure':<44} {'median':>8} {'min..max':>17} {'n':>3} {'target':>8}"
    print(head)
    print("-" * len(head))
    for name, s in results.items():
        ok = "ok" if s["median"] < target_s else "MISSED"
        print(f"{name:<44} {s['median']:>8.3f} {s['min']:>8.3f}..{s['max']:<8.3f} {s['n']:>3} {ok:>8}")
    print(f"target: each median < {target_s:g} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--target", type=float, default=1.0, help="seconds")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "status_page.json")
    args = parser.parse_args(argv)

    docs = documents(args.tables)
    with tempfile.TemporaryDirectory(prefix="bench-status-page-") as tmp:
        work = Path(tmp)
        dags = work / "dags"
        dags.mkdir()
        (dags / "assets.py").write_text(assets_dag_file(ASSETS_DAG, docs))  # keeps the assets (and their state)
        print(f"starting Airflow in {work} ...", flush=True)
        with AirflowCluster(
            work / "airflow",
            dags,
            expected_dag_ids={ASSETS_DAG},
            parse_timeout=300,
            config_overrides=benchmark_config(),
        ) as af:
            t0 = time.perf_counter()
            write_in_cluster(af, docs, work)
            print(f"  wrote {args.tables} state documents in {time.perf_counter() - t0:.1f} s", flush=True)
            headers = {"Authorization": f"Bearer {af.token()}"}
            api: list[float] = []
            page: list[float] = []
            sizes: dict[str, int] = {}
            with httpx.Client(base_url=af.base_url, timeout=60, trust_env=False) as client:
                listed = client.get("/tiering/api/tables", headers=headers).json()  # warm-up (builds the app)
                if listed["total_entries"] != args.tables:
                    raise AssertionError(f"the list has {listed['total_entries']} tables, expected {args.tables}")
                timed_get(client, BUNDLE_PATH, headers)
                for _ in range(args.repeat):
                    elapsed, sizes["list_bytes"] = timed_get(client, "/tiering/api/tables", headers)
                    api.append(elapsed)
                    elapsed, sizes["bundle_bytes"] = timed_get(client, BUNDLE_PATH, headers)
                    page.append(elapsed)
            loads = browser_loads(af, args.tables, args.repeat)

    results = {
        "GET /tiering/api/tables (client wall)": summarize(api),
        f"GET {BUNDLE_PATH} (client wall)": summarize(page),
        "chromium: list shown (performance mark)": summarize([x["first_render_ms"] / 1000 for x in loads]),
        "chromium: UI's HTML received (responseEnd)": summarize([x["response_end_ms"] / 1000 for x in loads]),
        "chromium: page's bundle requested by the UI": summarize([x["bundle_requested_ms"] / 1000 for x in loads]),
        "chromium: list received": summarize([x["list_received_ms"] / 1000 for x in loads]),
        "chromium: DOMContentLoaded": summarize([x["dom_content_loaded_ms"] / 1000 for x in loads]),
    }
    print_table(args.tables, results, args.target)
    report = {
        "tables": args.tables,
        "repeat": args.repeat,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "target_seconds": args.target,
        "results_seconds": results,
        "sizes": sizes,
        "browser_loads_ms": loads,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")
    return 0 if all(s["median"] < args.target for s in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
