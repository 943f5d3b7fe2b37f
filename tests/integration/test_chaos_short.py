"""The short chaos run of ``make test`` (``make soak`` is the long one): every kind of fault strikes a round, and
afterwards every lake table equals its hot table, with nothing lost, duplicated or left behind."""

from __future__ import annotations

import json

import pytest

from tests.chaos.faults import WarehouseMount
from tests.chaos.harness import KINDS, ChaosConfig, ChaosRun

# serial: run alone after the parallel pass (make test); its timing margins assume the machine to itself.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]


def test_short_chaos_run_loses_and_duplicates_nothing(tmp_path):
    config = ChaosConfig(
        workdir=tmp_path / "chaos",
        seconds=20,
        tables=2,
        seed=20261122,
        mean_fault_interval=2,
        until_each_kind_hits=True,
        max_seconds=120,
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
    assert report.rounds.get("tiered", 0) >= 2 * config.tables
    assert report.commit_retries >= 1 and report.competing_commits >= 1
    assert not report.unexplained_failures, report.unexplained_failures
    assert report.rows_checked > 1000
    assert report.lost == 0 and report.duplicated == 0
    for table in report.tables:
        assert table.digests_equal and table.lake_rows == table.hot_rows
        assert table.orphan_files == [] and table.state_problems == []
        assert table.acknowledged <= table.hot_rows
    assert report.consistent
