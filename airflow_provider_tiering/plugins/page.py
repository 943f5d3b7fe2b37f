"""The Tiering page's bundle, and ``/tiering/`` as a way into the page.

The page itself is a React app Airflow's UI renders (``react_apps``, built from ``plugins/www``): the UI loads the
bundle served here and shows it at ``/plugin/tiering``, in its own navigation and theme. ``/tiering/`` (the page's
address before it joined the UI, kept for bookmarks) sends a browser there; one that is signed
out is sent to Airflow's login page, which brings it back.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_tiering.plugins.access import GetUserDep, can_read
from airflow_provider_tiering.plugins.addresses import BUNDLE, PAGE_ROUTE, URL_PREFIX

router = APIRouter(include_in_schema=False)


class BundleMissing(RuntimeError):
    """The provider was installed from a source tree whose page was never built (``npm run build``)."""


def _roots(request: Request) -> tuple[str, str]:
    """The app's own path (``.../tiering``) and the Airflow UI's root path, from where the app is mounted."""
    app_root = str(request.scope.get("root_path", "")).rstrip("/")
    airflow_root = app_root.removesuffix(URL_PREFIX) if app_root.endswith(URL_PREFIX) else ""
    return app_root, airflow_root


def page_path(airflow_root: str, table: str | None = None) -> str:
    """The Tiering page's path in Airflow's UI, or one table's detail on it."""
    path = f"{airflow_root}/plugin/{PAGE_ROUTE}"
    return path if table is None else f"{path}?table={quote(table, safe='')}"


def send_browsers_to_login(app: FastAPI) -> None:
    """A browser that opens ``/tiering/`` signed out (no bearer token; no cookie, or an expired one) is sent to
    Airflow's login page, which brings it back; every other 401 (the REST API, a bad bearer token) stays a 401."""

    @app.exception_handler(StarletteHTTPException)
    async def login_instead_of_401(request: Request, exc: StarletteHTTPException) -> Response:
        app_root, airflow_root = _roots(request)
        on_page = request.method == "GET" and request.scope["path"].removeprefix(app_root) in ("", "/")
        if exc.status_code != status.HTTP_401_UNAUTHORIZED or not on_page or "authorization" in request.headers:
            return await http_exception_handler(request, exc)
        from airflow.api_fastapi.app import get_auth_manager

        login = get_auth_manager().get_url_login(next_url=page_path(airflow_root))
        if login.startswith("/") and not login.startswith(airflow_root + "/"):
            login = airflow_root + login  # the auth manager's own path, under Airflow's base URL
        return RedirectResponse(login, status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/", dependencies=[can_read])
def tiering_page(request: Request, table: str | None = None) -> RedirectResponse:
    """To the page in Airflow's UI (``?table=`` to one table's detail)."""
    _, airflow_root = _roots(request)
    return RedirectResponse(page_path(airflow_root, table), status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@cache
def bundle() -> tuple[bytes, str]:
    """The built page from the installed package, and its ETag (read once per process: an installed file does not
    change under it)."""
    found = resources.files("airflow_provider_tiering.plugins").joinpath("www", "dist", BUNDLE)
    if not found.is_file():
        raise BundleMissing(
            f"the Tiering page's bundle www/dist/{BUNDLE} is missing from this installation: install the provider "
            "from its wheel, or build the page in the source tree (npm ci && npm run build in "
            "airflow_provider_tiering/plugins/www)"
        )
    body = found.read_bytes()
    return body, f'"{hashlib.sha256(body).hexdigest()[:32]}"'


@router.get(f"/static/{BUNDLE}")
def page_bundle(request: Request, _: GetUserDep) -> Response:
    """The page's code, for any signed-in user: it holds no data (the REST API decides what each user may read).
    Revalidated on every load by its content's hash, so an upgraded provider's page is never an old cached one."""
    try:
        body, etag = bundle()
    except BundleMissing as err:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(err)) from err
    headers = {"Cache-Control": "private, no-cache", "ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(body, media_type="text/javascript", headers=headers)
