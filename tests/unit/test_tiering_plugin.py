"""The plugin as Airflow loads it (light to import in every process) and the page's embedding of its data."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_provider_tiering.plugins.tiering_plugin import URL_PREFIX, LazyTieringApp, TieringPlugin


def test_plugin_mounts_one_app_and_adds_a_nav_view() -> None:
    from airflow.api_fastapi.app import RESERVED_URL_PREFIXES
    from airflow.plugins_manager import is_valid_plugin

    assert is_valid_plugin(TieringPlugin)
    (app,) = TieringPlugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX == "/tiering"
    assert not any(URL_PREFIX.startswith(prefix) for prefix in RESERVED_URL_PREFIXES)
    assert isinstance(app["app"], LazyTieringApp)
    (view,) = TieringPlugin.external_views
    assert view["destination"] == "nav" and view["url_route"] == "tiering" and view["href"] == "/tiering/"


def test_importing_the_plugin_loads_neither_fastapi_nor_the_api_servers_security() -> None:
    # Task processes import plugins too; the app is built on the API server's first request instead.
    code = (
        "import sys, airflow_provider_tiering.plugins.tiering_plugin; "
        "print(sorted(m for m in ('fastapi', 'airflow.api_fastapi.core_api.security') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_data_embedded_in_the_page_cannot_close_its_script_element() -> None:
    from airflow_provider_tiering.plugins.page import _json_for_script

    hostile = {"last_error": "</script><script>alert(1)</script> <!-- & \u2028"}
    text = _json_for_script(hostile)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == hostile
