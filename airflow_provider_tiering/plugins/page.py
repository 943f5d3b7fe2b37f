"""The Tiering page: server-rendered HTML carrying the first list of tables, plus its script and stylesheet.

The table list is embedded in the page as JSON, so the first render needs no second request; the script then
renders it, refreshes it from the REST API every few seconds, and shows one table's rounds under ``#table=<name>``.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_tiering import __version__
from airflow_provider_tiering.plugins.access import GetUserDep, can_read
from airflow_provider_tiering.plugins.api import list_tables
from airflow_provider_tiering.plugins.tiering_plugin import URL_PREFIX

router = APIRouter(dependencies=[can_read], include_in_schema=False)

STATIC_FILES = {"tiering.js": "text/javascript", "tiering.css": "text/css"}
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Tiering</title>
<link rel="stylesheet" href="{app}/static/tiering.css?v={version}">
</head>
<body data-api="{app}/api" data-airflow="{airflow}" data-refresh-seconds="10">
<header>
  <h1><a href="#" id="home-link">Tiering</a></h1>
  <form id="filters" role="search" onsubmit="return false">
    <label>Status <select id="filter-status"><option value="">all</option></select></label>
    <label>Namespace <select id="filter-namespace"><option value="">all</option></select></label>
    <label>Table <input id="filter-text" type="search" placeholder="name contains"></label>
  </form>
  <span id="updated" aria-live="polite"></span>
</header>
<div id="banner" role="alert" hidden></div>
<div id="notice" role="status" hidden></div>
<main id="list-view">
  <p id="summary"></p>
  <table id="tables">
    <thead><tr>
      <th data-sort="namespace">Namespace</th>
      <th data-sort="table">Table</th>
      <th data-sort="status">Status</th>
      <th data-sort="epoch" class="num">Epoch</th>
      <th data-sort="last_tiered_time">Last tiered</th>
      <th data-sort="backlog_rows" class="num"
          title="Rows waiting beyond the committed offsets, as far as known: what the last round left for later (its
max_rows_per_round cap), or held back by open transactions. Rows that arrived since the last round are not counted."
          >Backlog (rows)</th>
      <th data-sort="newest_data_age_seconds" class="num"
          title="How old the newest tiered row is now; time cursors only (an integer cursor says nothing about time)"
          >Newest data age</th>
      <th data-sort="last_round_rows" class="num">Rows (last round)</th>
      <th data-sort="consecutive_failures" class="num">Failures</th>
      <th data-sort="quarantined">Quarantined</th>
      <th data-sort="last_error_time">Last error</th>
    </tr></thead>
    <tbody></tbody>
  </table>
</main>
<section id="detail-view" hidden></section>
<script type="application/json" id="initial-data">{data}</script>
<script src="{app}/static/tiering.js?v={version}"></script>
</body>
</html>
"""


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element or open markup inside it."""
    return json.dumps(value, separators=(",", ":")).translate(_JSON_ESCAPES)


def _roots(request: Request) -> tuple[str, str]:
    """The app's own path (``.../tiering``) and the Airflow UI's root path, from where the app is mounted."""
    app_root = str(request.scope.get("root_path", "")).rstrip("/")
    airflow_root = app_root.removesuffix(URL_PREFIX) if app_root.endswith(URL_PREFIX) else ""
    return app_root, airflow_root


def send_browsers_to_login(app: FastAPI) -> None:
    """A browser that opens the page signed out (no bearer token; no cookie, or an expired one) is sent to Airflow's
    login page, which brings it back here; every other 401 (the REST API, a bad bearer token) stays a 401."""

    @app.exception_handler(StarletteHTTPException)
    async def login_instead_of_401(request: Request, exc: StarletteHTTPException) -> Response:
        app_root, airflow_root = _roots(request)
        on_page = request.method == "GET" and request.scope["path"].removeprefix(app_root) in ("", "/")
        if exc.status_code != status.HTTP_401_UNAUTHORIZED or not on_page or "authorization" in request.headers:
            return await http_exception_handler(request, exc)
        from airflow.api_fastapi.app import get_auth_manager

        login = get_auth_manager().get_url_login(next_url=f"{airflow_root}{URL_PREFIX}/")
        if login.startswith("/") and not login.startswith(airflow_root + "/"):
            login = airflow_root + login  # the auth manager's own path, under Airflow's base URL
        return RedirectResponse(login, status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/", response_class=HTMLResponse)
def tiering_page(request: Request, user: GetUserDep) -> HTMLResponse:
    app_root, airflow_root = _roots(request)
    tables = list_tables(user, namespace=None, table_status=None)  # only the tables ``user`` may read
    page = PAGE.format(
        app=html.escape(app_root, quote=True),
        airflow=html.escape(airflow_root, quote=True),
        version=html.escape(__version__, quote=True),
        data=_json_for_script(tables.model_dump(mode="json")),
    )
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})


@router.get("/static/{name}")
def static_file(name: str) -> Response:
    media_type = STATIC_FILES.get(name)
    if media_type is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    body = resources.files("airflow_provider_tiering.plugins").joinpath("static", name).read_bytes()
    return Response(body, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})
