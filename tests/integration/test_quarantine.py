"""A table that keeps failing is quarantined: no endless retry loop; a reset brings it back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_provider_tiering.core.errors import QuarantinedError, SourceError
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus, utcnow
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows
from testbed.rounds import round_parts


def test_table_is_quarantined_after_consecutive_failures_and_reset_brings_it_back(
    tmp_path, catalog_properties, spark_writer
):
    spec = TableSpec.parse(
        {
            "name": "flaky",
            "source": {"conn_id": "unused", "table": "flaky", "cursor_column": "id"},
            "lake": {"namespace": "it", "table": "flaky"},
            "max_consecutive_failures": 3,
        }
    )
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("unrelated")  # the database exists, the table "flaky" not yet
    store = JsonFileStateStore(tmp_path / "state.json")

    def round_():
        parts = round_parts(spec, hot, catalog_properties, writer=spark_writer)
        return parts.run(store, retry_delay=lambda error: timedelta(seconds=30))

    for attempt in range(1, 4):  # the hot table does not exist yet
        with pytest.raises(SourceError, match="does not exist"):
            round_()
        state = store.load()
        assert state.status is TableStatus.FAILED and state.consecutive_failures == attempt
        if attempt < 3:
            assert state.next_retry_at - state.last_error_time == timedelta(seconds=30)
    assert state.quarantined_since is not None and "quarantined after 3" in state.note
    assert state.next_retry_at is None  # quarantined: nothing will retry it

    hot.create("flaky")  # fixed, but quarantined: nothing runs until a reset
    hot.insert("flaky", 1, 100)
    with pytest.raises(QuarantinedError, match="quarantined since .* after 3 consecutive failed rounds"):
        round_()
    assert store.load().consecutive_failures == 3

    state = store.load()
    state.reset(utcnow())
    store.save(state)
    result = round_()
    assert result.outcome == "tiered" and result.metrics.rows == 100
    state = store.load()
    assert state.status is TableStatus.TIERED and state.consecutive_failures == 0 and state.quarantined_since is None
    assert "does not exist" in state.last_error  # the last error stays visible after the recovery
    assert digest(lake_rows(catalog_properties, ("it", "flaky"), COLUMNS)) == digest(hot.rows("flaky"))
