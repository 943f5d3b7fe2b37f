"""``TableTieredTrigger``: polls an Iceberg table, from the triggerer, until its tiering snapshot reaches a cursor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib import import_module
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.offsets import cursor_reached

#: Consecutive failed polls (catalog unreachable, …) after which the trigger gives up and reports the error.
MAX_FAILED_POLLS = 3


class TableTieredTrigger(BaseTrigger):
    """Fires ``{"status": "reached", ...commit}`` once the lake table's latest tiering snapshot has end offsets
    at or beyond ``cursor_value``, or ``{"status": "error", "error": ...}`` after repeated failed polls.

    It reads the lake (the single source of truth for committed offsets), not the state document: the
    triggerer has no metadata-database access, but it can look up the catalog's Airflow connection.
    """

    def __init__(
        self, catalog_conn_id: str, namespace: str, table: str, cursor_value: Any, poke_interval: float
    ) -> None:
        super().__init__()
        self.catalog_conn_id = catalog_conn_id
        self.namespace = namespace
        self.table = table
        self.cursor_value = cursor_value
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "catalog_conn_id": self.catalog_conn_id,
                "namespace": self.namespace,
                "table": self.table,
                "cursor_value": self.cursor_value,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Imported off the event loop: the hook pulls in pyarrow and pyiceberg, whose imports block for a second.
        await asyncio.to_thread(import_module, "airflow_provider_tiering.hooks.iceberg_catalog")
        from airflow_provider_tiering.build import build_lake
        from airflow_provider_tiering.core.spec import LakeSpec
        from airflow_provider_tiering.hooks.iceberg_catalog import IcebergCatalogHook  # loaded above: no wait
        from airflow_provider_tiering.lake.iceberg import IcebergLake

        hook = IcebergCatalogHook(self.catalog_conn_id)
        lake: IcebergLake | None = None
        failures = 0
        while True:
            try:
                if lake is None:
                    spec = LakeSpec(catalog_conn_id=self.catalog_conn_id, namespace=self.namespace, table=self.table)
                    lake = build_lake(spec, (await hook.acatalog_config()).handle())
                commit = await asyncio.to_thread(lake.committed)  # loads the catalog on first use, off the loop
                if commit is not None and cursor_reached(commit.end_offsets, self.cursor_value):
                    yield TriggerEvent(
                        {
                            "status": "reached",
                            "snapshot_id": commit.snapshot_id,
                            "epoch": commit.epoch,
                            "end_offsets": commit.end_offsets,
                            "committed_at": commit.committed_at.isoformat(),
                        }
                    )
                    return
                failures = 0
                self.log.info(
                    "%s.%s is at %s, waiting for cursor %r",
                    self.namespace,
                    self.table,
                    None if commit is None else commit.end_offsets,
                    self.cursor_value,
                )
            except Exception as exc:
                failures += 1
                message = describe_error(exc, hook.secrets())
                if failures >= MAX_FAILED_POLLS:
                    yield TriggerEvent({"status": "error", "error": message})
                    return
                self.log.warning(
                    "polling %s.%s failed (%d/%d): %s", self.namespace, self.table, failures, MAX_FAILED_POLLS, message
                )
            await asyncio.sleep(self.poke_interval)
