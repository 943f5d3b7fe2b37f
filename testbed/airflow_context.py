"""A task context for calling operators' ``execute`` in-process: the asset state store accessor is a dict
(under a real scheduler the same operators run in tests/e2e)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from airflow_provider_tiering.core.state import TableState
from airflow_provider_tiering.hooks.asset_state import STATE_KEY


class DictAccessor:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))


def task_context(asset: Any, state: TableState | None, conf: dict | None = None, try_number: int = 1) -> dict:
    accessor = DictAccessor()
    if state is not None:
        accessor.set(STATE_KEY, state.to_json())
    return {
        "asset_state_store": {asset: accessor},
        "dag_run": SimpleNamespace(conf=conf or {}),
        "ti": SimpleNamespace(try_number=try_number, dag_id="tiering_test", task_id=str(asset.name)),
        "logical_date": None,
        "outlet_events": {asset: SimpleNamespace(extra={})},
    }


def saved_state(context: dict, asset: Any) -> TableState:
    return TableState.from_json(context["asset_state_store"][asset].get(STATE_KEY))
