"""The short chaos run of ``make test`` (``make soak`` is the long one): every kind of fault strikes a round, a
change-stream table's round among them, and afterwards every lake table equals its hot table (the change-stream
table by key, after inserts, updates of values and keys, deletes and re-inserts), with nothing lost, duplicated or
left behind, and the replication slot never ahead of the lake."""

from __future__ import annotations

import json

import pytest

from tests.chaos.faults import WarehouseMount
from tests.chaos.harness import KINDS, ChaosConfig, ChaosRun

# serial: run alone after the parallel pass (make test); its timing margins assume the machine to itself.
pytestmark = pytest.mark.serial


def test_short_chaos_run_loses_and_duplicates_nothing(tmp_path):
    config = ChaosConfig(
        workdir=tmp_path / "chaos",
        seconds=20,
        tables=1,  # and one change-stream table: two tables, as before it joined (the run's time follows)
        cdc_tables=1,
        seed=20261122,
        mean_fault_interval=2,
        until_each_kind_hits=True,
        max_seconds=180,  # a bound for a slow machine; the faults stop as soon as every kind has struck
        progress=print,
    )
    report = ChaosRun(config).run()
    print(report.text())
    (tmp_path / "report.json").write_text(json.dumps(report.to_json(), indent=2, default=str))

    expected = set(KINDS)
    if WarehouseMount.available() is not None:  # not root: no tmpfs to fill
        expected.discard("disk_full")
        assert "disk_full" in report.skipped_kinds
    hit = {kind for kind, info in report.faults.items() if info["rounds_hit"]}
    assert hit >= expected, f"faults that never struck a round: {sorted(expected - hit)}"
    hit_cdc = {kind for kind, info in report.faults.items() if info["cdc_rounds_hit"]}
    assert hit_cdc >= expected, f"faults that never struck a change-stream round: {sorted(expected - hit_cdc)}"
    assert report.rounds.get("tiered", 0) >= 2 * (config.tables + config.cdc_tables)
    assert report.commit_retries >= 1 and report.competing_commits >= 1
    assert not report.unexplained_failures, report.unexplained_failures
    assert report.rows_checked > 1000
    assert report.lost == 0 and report.duplicated == 0
    for table in report.tables:
        assert table.digests_equal and table.lake_rows == table.hot_rows
        assert table.orphan_files == [] and table.state_problems == []
        assert table.acknowledged <= table.hot_rows
    (cdc,) = report.cdc_tables
    assert report.cdc_rounds.get("tiered", 0) >= 2
    assert all(cdc.changes[kind] for kind in ("insert", "update", "key_update", "delete", "reinsert")), cdc.changes
    assert (cdc.lost_keys, cdc.extra_keys, cdc.differing_keys, cdc.duplicated_keys) == (0, 0, 0, 0)
    assert cdc.digests_equal and cdc.parquet_digests_equal and cdc.lake_rows == cdc.hot_rows
    assert cdc.slot_lsn is not None and cdc.lake_lsn is not None and not cdc.slot_ahead
    assert cdc.orphan_files == [] and cdc.state_problems == []
    assert report.extra == 0 and report.differing == 0
    assert report.consistent
