"""``TableDueTrigger``: waits in the triggerer until a table is due and its hot store has new rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from importlib import import_module
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import utcnow


async def sleep_until(moment: datetime | None) -> None:
    if moment is not None:
        await asyncio.sleep(max(0.0, (moment - utcnow()).total_seconds()))


class TableDueTrigger(BaseTrigger):
    """Sleeps until ``due_at``, then probes the hot store every ``poke_interval`` seconds for rows beyond
    ``committed`` (or arrived behind it, in the ``emptied`` stretch; see ``Source.look_behind``), or a hot table
    other than ``hot_shape`` (the identity and shape the last round recorded), until there are some, ``reconcile_at``
    passes (a merge table's key reconciliation: it runs without new rows) or ``deadline``
    passes.

    Triggers have no access to the metadata database (so none to the table's state document): the
    sensor reads the state on the worker and hands over what the wait needs, the due time and the
    committed offsets. Its kwargs hold the table spec, which names connections but never holds
    credentials; the source's credentials are looked up here, through the triggerer.
    Events: ``{"status": "due"}`` (rows are waiting, or the probe failed: the round will then record
    the error), or ``{"status": "deadline"}``.
    """

    def __init__(
        self,
        table: dict[str, Any],
        due_at: str | None,
        committed: Offsets | None,
        poke_interval: float,
        deadline: str | None,
        emptied: JsonObject | None = None,
        reconcile_at: str | None = None,
        hot_shape: JsonObject | None = None,
    ) -> None:
        super().__init__()
        self.table = table
        self.due_at = due_at
        self.committed = committed
        self.emptied = emptied
        self.reconcile_at = reconcile_at
        self.hot_shape = hot_shape
        self.poke_interval = poke_interval
        self.deadline = deadline

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "due_at": self.due_at,
                "committed": self.committed,
                "emptied": self.emptied,
                "reconcile_at": self.reconcile_at,
                "hot_shape": self.hot_shape,
                "poke_interval": self.poke_interval,
                "deadline": self.deadline,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Imported off the event loop: the hook pulls in pyarrow, whose import blocks for a second.
        await asyncio.to_thread(import_module, "airflow_provider_tiering.hooks.tiering")
        from airflow_provider_tiering.hooks.tiering import TieringSourceHook  # loaded above: no wait

        spec = TableSpec.parse(self.table)
        deadline = datetime.fromisoformat(self.deadline) if self.deadline else None
        due_at = datetime.fromisoformat(self.due_at) if self.due_at else None
        if deadline is not None and due_at is not None and due_at > deadline:
            await sleep_until(deadline)
            yield TriggerEvent({"status": "deadline", "table": spec.name})
            return
        await sleep_until(due_at)
        reconcile_at = datetime.fromisoformat(self.reconcile_at) if self.reconcile_at else None
        probes, secrets, emptied = 0, [], self.emptied
        try:
            source = await TieringSourceHook(spec.source, spec.lake).aget_source()
            secrets = source.secrets()
            while True:
                probe = await asyncio.to_thread(source.probe, self.committed, emptied, self.hot_shape)
                emptied = probe.behind.emptied
                if probe.has_work:
                    if probe.changed is not None:
                        self.log.info("%s: its hot table changed since the last round: %s", spec.name, probe.changed)
                    break
                probes += 1
                now = utcnow()
                if reconcile_at is not None and now >= reconcile_at:
                    break  # the keys' reconciliation is due: the round runs without new rows
                if deadline is not None and now >= deadline:
                    yield TriggerEvent(
                        {"status": "deadline", "table": spec.name, "probes": probes, "emptied_range": emptied}
                    )
                    return
                self.log.info(
                    "%s: due, but no rows beyond %s yet; next probe in %ss",
                    spec.name,
                    self.committed,
                    self.poke_interval,
                )
                pause = self.poke_interval
                for until in (deadline, reconcile_at):
                    if until is not None:
                        pause = min(pause, (until - now).total_seconds())
                await asyncio.sleep(max(0.0, pause))
        except Exception as exc:  # the round itself records and retries source errors: hand over, don't hide
            yield TriggerEvent(
                {
                    "status": "due",
                    "table": spec.name,
                    "probe_error": describe_error(exc, secrets),
                    "emptied_range": emptied,
                }
            )
            return
        yield TriggerEvent({"status": "due", "table": spec.name, "probes": probes + 1, "emptied_range": emptied})
