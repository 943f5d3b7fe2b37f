"""Where a table's state document (and a stream group's) is kept. Airflow's asset state store is the production
one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from airflow_provider_tiering.core.state import TableState
from airflow_provider_tiering.core.stream_state import StreamGroupState


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
        found = _read(self.path)
        return None if found is None else TableState.from_json(found)

    def save(self, state: TableState) -> None:
        _write(self.path, state.to_json())


class JsonFileStreamStateStore:
    """A stream group's state document in a local JSON file (see :class:`JsonFileStateStore`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> StreamGroupState | None:
        found = _read(self.path)
        return None if found is None else StreamGroupState.from_json(found)

    def save(self, state: StreamGroupState) -> None:
        _write(self.path, state.to_json())


def _read(path: Path) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return found


def _write(path: Path, document: dict[str, Any]) -> None:
    """Written by rename, so a killed process leaves either the old or the new document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle)
    os.replace(tmp, path)
