"""The plugin as Airflow loads it (light to import in every process), and the Tiering page it adds to the UI: a
React app bundle built for Airflow's UI, whose types agree with the REST API's records."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from airflow_provider_tiering.plugins.addresses import BUNDLE, URL_PREFIX
from airflow_provider_tiering.plugins.tiering_plugin import LazyTieringApp, TieringPlugin

WWW = Path(__file__).resolve().parents[2] / "airflow_provider_tiering" / "plugins" / "www"


def test_plugin_mounts_one_app_and_adds_a_react_app_to_the_nav() -> None:
    from airflow.api_fastapi.app import RESERVED_URL_PREFIXES
    from airflow.plugins_manager import is_valid_plugin

    assert is_valid_plugin(TieringPlugin)
    (app,) = TieringPlugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX == "/tiering"
    assert not any(URL_PREFIX.startswith(prefix) for prefix in RESERVED_URL_PREFIXES)
    assert isinstance(app["app"], LazyTieringApp)
    assert TieringPlugin.external_views == []
    (page,) = TieringPlugin.react_apps
    assert page["destination"] == "nav" and page["url_route"] == "tiering" and page["category"] == "browse"
    # Relative to the UI's base URL, and served by the plugin's own app.
    assert page["bundle_url"] == f"tiering/static/{BUNDLE}"


def test_importing_the_plugin_loads_neither_fastapi_nor_the_api_servers_security() -> None:
    # Task processes import plugins too; the app is built on the API server's first request instead.
    code = (
        "import sys, airflow_provider_tiering.plugins.tiering_plugin; "
        "print(sorted(m for m in ('fastapi', 'airflow.api_fastapi.core_api.security') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_built_bundle_uses_the_hosts_react_and_chakra_and_bundles_neither() -> None:
    """A UMD bundle that leaves its component on ``globalThis.AirflowPlugin`` (where Airflow's UI looks for it) and
    takes React, the router and Chakra UI from the globals the UI sets: one React tree, the UI's theme."""
    from airflow_provider_tiering.plugins.page import bundle

    body, etag = bundle()
    text = body.decode()
    assert "t.AirflowPlugin=" in text.replace(" ", "")[:1000]
    for host_global in ("React", "ReactJSXRuntime", "ChakraUI", "ReactRouterDOM"):
        assert f".{host_global}" in text[:1000], host_global
    # React's or Chakra's own code would be hundreds of KB and carry their markers.
    assert len(body) < 100_000 and "react.production" not in text and "createSystem" not in text
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag)


def test_the_bundle_is_built_from_its_current_sources() -> None:
    import runpy

    build_page = runpy.run_path(str(WWW / "build_page.py"))
    assert not build_page["is_stale"](), "the page's sources changed since its bundle was built: make setup"


def _interface_fields(source: str, name: str) -> set[str]:
    body = re.search(rf"export interface {name} \{{(.*?)\n\}}", source, re.S)
    assert body, name
    return set(re.findall(r"^  (\w+)\??:", body.group(1), re.M))


@pytest.mark.parametrize(
    ("interface", "model"),
    [("TieredTable", "TableStatusRecord"), ("TieringRound", "TieringRound"), ("Maintenance", "MaintenanceRecord")],
)
def test_the_pages_types_name_only_fields_the_rest_api_returns(interface: str, model: str) -> None:
    import dataclasses

    from airflow_provider_tiering.status import records

    declared = _interface_fields((WWW / "src" / "api.ts").read_text(), interface)
    record = getattr(records, model)
    is_model = issubclass(record, BaseModel)
    returned = set(record.model_fields) if is_model else {f.name for f in dataclasses.fields(record)}
    assert declared and declared <= returned, declared - returned
