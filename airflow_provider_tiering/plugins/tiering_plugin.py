"""The Airflow plugin: mounts the tiering app at ``/tiering`` and adds the Tiering page to the UI's navigation.

The page is a React app (``react_apps``): Airflow's UI loads its bundle from the tiering app and renders it inside
its own layout, theme and router, at ``/plugin/tiering``.

Airflow imports plugins in every process, task processes included (for macros and listeners), so this module
stays light: the FastAPI app, which needs the API server's security module and the ORM, is built on the first
request the API server sends it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_tiering.plugins import preload
from airflow_provider_tiering.plugins.addresses import BUNDLE, PAGE_ROUTE, URL_PREFIX
from airflow_provider_tiering.timetables import StaggeredInterval

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyTieringApp:
    """An ASGI app that builds :func:`airflow_provider_tiering.plugins.app.create_app` when first called."""

    def __init__(self) -> None:
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._lock = threading.Lock()

    def get_app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from airflow_provider_tiering.plugins.app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.get_app()(scope, receive, send)

    def __repr__(self) -> str:
        return "airflow_provider_tiering.plugins.app:create_app"


class TieringPlugin(AirflowPlugin):
    """Every tiered table's status in the Airflow UI (Browse → Tiering) and as JSON under ``/tiering/api``; the
    timetable of the tables' own DAGs (``timetables.py``), which Airflow finds only through a plugin; and the
    listener that has the scheduler import a round's modules for its LocalExecutor's task processes."""

    name = "tiering"
    fastapi_apps = [{"name": "tiering", "app": LazyTieringApp(), "url_prefix": URL_PREFIX}]
    react_apps = [
        {
            "name": "Tiering",
            # Relative: the UI resolves it against its own base URL, so it holds under a path prefix too.
            "bundle_url": f"{URL_PREFIX.lstrip('/')}/static/{BUNDLE}",
            "destination": "nav",
            "url_route": PAGE_ROUTE,
            "category": "browse",
        }
    ]
    timetables = [StaggeredInterval]
    # The scheduler of a LocalExecutor imports a round's modules before it forks its workers (preload.py).
    listeners = [preload]
