"""The FastAPI app Airflow's API server mounts at ``/tiering``: the page, its assets and the REST API."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from airflow_provider_tiering import __version__


def create_app() -> FastAPI:
    """Build the tiering app. Its OpenAPI document is served at ``/tiering/openapi.json`` to authenticated readers
    (FastAPI's own docs pages are off: they load their scripts from a CDN, and every route here needs a user)."""
    from airflow_provider_tiering.plugins import api, page
    from airflow_provider_tiering.plugins.access import can_read

    app = FastAPI(
        title="Airflow tiering",
        version=__version__,
        description=(
            "Every tiered table's status, its recent rounds, and on-demand reset and trigger. "
            "Authenticate as for Airflow's own API: a bearer token from `POST /auth/token`, or the UI's cookie."
        ),
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(api.router)
    app.include_router(page.router)
    page.send_browsers_to_login(app)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[can_read])
    def openapi() -> dict[str, Any]:
        return app.openapi()

    return app
