"""A round's log is an account of its phases, with rows, files, sizes and times in human units (``core/round.py``):
a SQLite table tiered by a real round (one split, written by this process) into a real Iceberg table."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows
from testbed.rounds import lake_of

SPEC = TableSpec.parse(
    {
        "name": "told",
        "source": {"conn_id": "unused", "table": "told", "cursor_column": "id"},
        "lake": {"namespace": "it", "table": "told"},
        "max_rows_per_round": 1_500,
    }
)


def test_the_round_log_tells_its_phases(tmp_path: Path, catalog_properties, caplog: pytest.LogCaptureFixture) -> None:
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("told")
    hot.insert("told", 1, 2_000)
    state = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)  # never started

    def round_messages() -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="airflow_provider_tiering"):
            run_round(SPEC, hot.source(SPEC.source), lake_of(SPEC, catalog_properties), writer, state)
        return [r.getMessage() for r in caplog.records if r.name == "airflow_provider_tiering.core.round"]

    first = round_messages()
    assert [m.split(":")[1].split()[0] for m in first] == ["planned", "read", "committed", "recorded"], first
    planned, written, committed, recorded = first
    assert planned == (
        "told: planned epoch 1: the start -> {'cursor': 1500} in 1 split; 500 more left for later rounds "
        "(max_rows_per_round)"
    )
    assert re.fullmatch(
        r"told: read and written 1,500 rows in 1 files \([\d.]+ KiB\) by this process in [\d.]+s", written
    ), written
    snapshot = lake_of(SPEC, catalog_properties).committed()
    assert snapshot is not None and committed.startswith(f"told: committed snapshot {snapshot.snapshot_id} in ")
    assert re.fullmatch(
        r"told: recorded epoch 1: 1,500 rows tiered, the lake now at \{'cursor': 1500\}; round took [\d.]+s", recorded
    ), recorded

    second = round_messages()
    assert second[0] == "told: planned epoch 2: {'cursor': 1500} -> {'cursor': 2000} in 1 split"
    assert "500 rows tiered" in second[-1]
    assert round_messages() == ["told: nothing to tier (lake at epoch 2, offsets {'cursor': 2000})"]
    assert digest(lake_rows(catalog_properties, ("it", "told"), COLUMNS)) == digest(hot.rows("told"))
