"""``ReadChangesOperator``: one run of a stream group's reader, as one Airflow task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_tiering.assets import DISCOVER_TASK_ID, stream_asset
from airflow_provider_tiering.core.errors import NotRetryable
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec

#: The XCom key under which a declared database's discovery lists its tables in mode ``change_stream``.
STREAMED_KEY = "streamed"


class ReadChangesOperator(BaseOperator):
    """Read a hot database's log once for every table of a stream group, and write each table's changes to the
    group's change log (``sources/change_stream/group_reader.py``): one slot and one publication on PostgreSQL, one
    binlog dump on MariaDB, whatever the number of tables. The tables' own tasks apply their changes from there.

    The task id defaults to ``read_changes``; ``retries`` and ``retry_delay`` to the group's. The group's state
    document (its position, lag, last error, each table's backlog) lives in the asset state store of the group's
    asset, which each run announces. A run that fails records its error there, shown on every table of
    the group, and fails this task only: the tables keep applying what the log holds. An error no retry cures (the
    slot dropped, the binlog purged, a missing privilege) fails it without retries. A slot holding back more WAL than
    ``max_retained_wal_mb`` fails the task with an alert after the run wrote what it read."""

    ui_color = "#d8eefc"

    def __init__(
        self,
        *,
        stream: StreamGroupSpec | Mapping[str, Any],
        tables: Sequence[TableSpec | Mapping[str, Any]],
        **kwargs: Any,
    ) -> None:
        group = StreamGroupSpec.parse(stream)
        asset = stream_asset(group)
        kwargs.setdefault("task_id", "read_changes")
        kwargs.setdefault("retries", group.retries)
        kwargs.setdefault("retry_delay", timedelta(seconds=group.retry_delay_seconds))
        kwargs.setdefault("max_active_tis_per_dag", 1)
        # Before its tables' tasks when they queue at once: their first rounds wait for it to take them in.
        kwargs.setdefault("priority_weight", 100)
        kwargs["outlets"] = [*kwargs.get("outlets", []), asset]
        super().__init__(**kwargs)
        self.stream = group
        self.tables = [TableSpec.parse(t) for t in tables]
        self.stream_asset = asset

    def execute(self, context: Any) -> dict[str, Any]:
        # Imported here: DAG files are parsed often and need none of pyarrow or pyiceberg.
        from airflow_provider_tiering.hooks.stream_group import AssetStreamStateStore, StreamReaderHook

        store = AssetStreamStateStore(context["asset_state_store"][self.stream_asset])
        reader = StreamReaderHook(self.stream, self.members()).build(store)
        try:
            run = reader.run()
        except NotRetryable as exc:  # recorded in the group's document: no retry can help
            raise AirflowFailException(str(exc)) from exc
        if run.alert is not None:
            raise AirflowFailException(run.alert)
        context["outlet_events"][self.stream_asset].extra = run.to_json()
        return run.to_json()

    def members(self) -> list[TableSpec]:
        """The group's tables."""
        return self.tables


class ReadDatabaseChangesOperator(ReadChangesOperator):
    """A declared database's change stream (``build_database_dag``): its members are the tables in mode
    ``change_stream`` that this run's discovery found (its XCom ``streamed``: their specs as JSON)."""

    def __init__(
        self, *, stream: StreamGroupSpec | Mapping[str, Any], discover_task_id: str = DISCOVER_TASK_ID, **kwargs: Any
    ) -> None:
        super().__init__(stream=stream, tables=[], **kwargs)
        self.discover_task_id = discover_task_id
        self._members: list[TableSpec] = []

    def execute(self, context: Any) -> dict[str, Any]:
        found = context["ti"].xcom_pull(task_ids=self.discover_task_id, key=STREAMED_KEY) or []
        self._members = [TableSpec.parse(doc) for doc in found]
        return super().execute(context)

    def members(self) -> list[TableSpec]:
        return self._members
