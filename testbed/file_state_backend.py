"""A state-store backend that keeps asset state in files, for tests that need a backend other than Airflow's default.

Configured as Airflow's own extension point is (``[state_store] backend``), in every process of a cluster::

    [state_store]
    backend = testbed.file_state_backend.FileStateBackend

    [testbed_state]
    directory = /some/dir

Asset state goes to ``<directory>/<asset id>/<key>.json`` (the JSON text Airflow hands the backend, verbatim;
written to a temporary file and renamed, so a reader never sees half a value); task state stays in the metadata
database through Airflow's default backend. Nothing of an asset's state is in Airflow's ``asset_state_store``
table, so whoever reads that table instead of asking the backend reads nothing.

It is not a ``MetastoreBackend`` subclass on purpose: Airflow's execution API writes through
``MetastoreBackend.set_asset_state_store`` when the backend is one (to record the writer), and through the
backend's ``set`` otherwise.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.configuration import conf
from airflow.state import AssetScope, BaseStoreBackend, StoreScope
from airflow.state.metastore import MetastoreBackend

SECTION = "testbed_state"


def state_directory() -> Path:
    return Path(conf.get(SECTION, "directory"))


def stored_value(asset_id: int, key: str) -> str | None:
    """What the backend holds for an asset's key, read straight from its file (for tests' own checks)."""
    path = state_directory() / str(asset_id) / f"{key}.json"
    return path.read_text() if path.exists() else None


class FileStateBackend(BaseStoreBackend):
    """Asset state in files under ``[testbed_state] directory``; task state in Airflow's default backend."""

    def __init__(self) -> None:
        self.tasks = MetastoreBackend()

    def _path(self, scope: AssetScope, key: str) -> Path:
        if scope.asset_id is None:  # the API server's routes resolve names and URIs to ids before calling
            raise ValueError(f"{type(self).__name__} needs the asset's id, got {scope}")
        if "/" in key or key.startswith("."):
            raise ValueError(f"unusable key {key!r}")
        return state_directory() / str(scope.asset_id) / f"{key}.json"

    def get(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        if not isinstance(scope, AssetScope):
            return self.tasks.get(scope, key, session=session)
        path = self._path(scope, key)
        return path.read_text() if path.exists() else None

    def set(
        self, scope: StoreScope, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        if not isinstance(scope, AssetScope):
            self.tasks.set(scope, key, value, expires_at=expires_at, session=session)
            return
        path = self._path(scope, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as fh:
            fh.write(value)
        os.replace(tmp, path)

    def delete(self, scope: StoreScope, key: str, *, session: Any = None) -> None:
        if not isinstance(scope, AssetScope):
            self.tasks.delete(scope, key, session=session)
            return
        self._path(scope, key).unlink(missing_ok=True)

    def clear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        if not isinstance(scope, AssetScope):
            self.tasks.clear(scope, all_map_indices=all_map_indices, session=session)
            return
        folder = self._path(scope, "x").parent
        for path in folder.glob("*.json"):
            path.unlink(missing_ok=True)

    async def aget(self, scope: StoreScope, key: str, *, session: Any = None) -> str | None:
        if not isinstance(scope, AssetScope):
            return await self.tasks.aget(scope, key, session=session)
        return self.get(scope, key)

    async def aset(
        self, scope: StoreScope, key: str, value: str, *, expires_at: datetime | None = None, session: Any = None
    ) -> None:
        if not isinstance(scope, AssetScope):
            await self.tasks.aset(scope, key, value, expires_at=expires_at, session=session)
            return
        self.set(scope, key, value)

    async def adelete(self, scope: StoreScope, key: str, *, session: Any = None) -> None:
        if not isinstance(scope, AssetScope):
            await self.tasks.adelete(scope, key, session=session)
            return
        self.delete(scope, key)

    async def aclear(self, scope: StoreScope, *, all_map_indices: bool = False, session: Any = None) -> None:
        if not isinstance(scope, AssetScope):
            await self.tasks.aclear(scope, all_map_indices=all_map_indices, session=session)
            return
        self.clear(scope)
