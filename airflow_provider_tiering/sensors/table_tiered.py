"""``TableTieredSensor``: waits, deferred, until a table's lake holds its data up to a cursor value or time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_provider_tiering.core.errors import InvalidTableSpec, TieringError
from airflow_provider_tiering.core.offsets import cursor_reached
from airflow_provider_tiering.core.spec import LakeSpec, TableSpec
from airflow_provider_tiering.triggers.table_tiered import TableTieredTrigger


def _lake_of(table: TableSpec | LakeSpec | Mapping[str, Any]) -> LakeSpec:
    if isinstance(table, LakeSpec):
        return table
    if not isinstance(table, TableSpec) and "source" not in table:
        return LakeSpec.model_validate(table)
    spec = TableSpec.parse(table)
    if spec.source.cursor() is None:  # refused here rather than waiting forever
        raise InvalidTableSpec(
            f"table {spec.name!r} is a {spec.source.describe()}: it has no cursor to wait for; schedule on its "
            "asset instead"
        )
    return spec.lake


class TableTieredSensor(BaseSensorOperator):
    """Succeeds once the Iceberg table of a tiered table holds every row up to ``cursor_value``: its latest
    tiering snapshot's end offset is at or beyond it. The value is compared with the source's cursor column:
    a number for integer cursors, a datetime/date or ISO string for time cursors (naive values are UTC).
    ``cursor_value`` is templated, e.g. ``"{{ data_interval_end }}"``.

    ``table`` is the tiered table's spec (as given to the DAG factory) or just its lake part
    (``{"catalog_conn_id": ..., "namespace": ..., "table": ...}``). Deferrable by default: the lake is
    polled from the triggerer every ``poke_interval`` seconds. Returns the reaching commit (snapshot id,
    epoch, end offsets) as the task's XCom.
    """

    template_fields = ("cursor_value",)
    ui_color = "#e6f0fa"

    def __init__(
        self,
        *,
        table: TableSpec | LakeSpec | Mapping[str, Any],
        cursor_value: Any,
        deferrable: bool = True,
        poke_interval: timedelta | float = 30,
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, **kwargs)
        self.lake = _lake_of(table)
        self.cursor_value = cursor_value
        self.deferrable = deferrable

    @property
    def _target(self) -> Any:
        value = self.cursor_value
        return value.isoformat() if isinstance(value, (datetime, date)) else value

    def _check(self) -> dict[str, Any] | None:
        from airflow_provider_tiering.hooks.tiering import lake_of

        commit = lake_of(self.lake).committed()
        try:
            if commit is None or not cursor_reached(commit.end_offsets, self._target):
                return None
        except TieringError as exc:
            raise AirflowException(f"{self.lake.namespace}.{self.lake.table}: {exc}") from exc
        return {
            "snapshot_id": commit.snapshot_id,
            "epoch": commit.epoch,
            "end_offsets": commit.end_offsets,
            "committed_at": commit.committed_at.isoformat(),
        }

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        reached = self._check()
        if reached is not None:
            return reached
        self.defer(
            trigger=TableTieredTrigger(
                catalog_conn_id=self.lake.catalog_conn_id,
                namespace=self.lake.namespace,
                table=self.lake.table,
                cursor_value=self._target,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "reached":
            raise AirflowException(f"{self.lake.namespace}.{self.lake.table}: {event.get('error', event)}")
        self.log.info("%s.%s reached %r: %s", self.lake.namespace, self.lake.table, self.cursor_value, event)
        return {k: v for k, v in event.items() if k != "status"}

    def poke(self, context: Any) -> PokeReturnValue:
        reached = self._check()
        return PokeReturnValue(is_done=reached is not None, xcom_value=reached)
