"""Where a table's state document is kept. Airflow's asset state store is the production one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Protocol

from airflow_provider_tiering.core.state import TableState


class StateStore(Protocol):
    """Loads and saves one table's state document; a save replaces the whole document atomically."""

    def load(self) -> TableState | None: ...

    def save(self, state: TableState) -> None: ...


class JsonFileStateStore:
    """A state document in a local JSON file, for running rounds without Airflow (scripts, tests).

    Written by rename so a killed process leaves either the old or the new document.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> TableState | None:
        try:
            return TableState.from_json(json.loads(self.path.read_text()))
        except FileNotFoundError:
            return None

    def save(self, state: TableState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        with os.fdopen(fd, "w") as handle:
            json.dump(state.to_json(), handle)
        os.replace(tmp, self.path)
