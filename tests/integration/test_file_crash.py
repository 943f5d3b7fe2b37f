"""SIGKILL a landing-zone round after its commit, before its state is recorded: no file is tiered twice."""

from __future__ import annotations

from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from testbed.crash_round import crash_round
from testbed.lake_check import digest, lake_rows, unreferenced_data_files
from testbed.landing_files import COLUMNS, jsonl_rows, write_jsonl
from testbed.rounds import round_parts


def test_round_killed_after_its_commit_tiers_no_file_twice(tmp_path, catalog_properties, spark_writer):
    landing, archive = tmp_path / "landing", tmp_path / "archive"
    spec_data = {
        "name": "landed",
        "source": {
            "kind": "files",
            "path": str(landing),
            "format": "jsonl",
            "columns": COLUMNS,
            "settle_seconds": 60,
            "after_commit": "archive",
            "archive_path": str(archive),
        },
        "lake": {"namespace": "it", "table": "landed"},
    }
    spec = TableSpec.parse(spec_data)
    state_store = JsonFileStateStore(tmp_path / "state.json")

    def round_in_process():
        return round_parts(spec, None, catalog_properties, writer=spark_writer).run(state_store)

    write_jsonl(landing / "a.jsonl", range(0, 1000))
    first = round_in_process()
    write_jsonl(landing / "b.jsonl", range(1000, 3000))
    write_jsonl(landing / "sub" / "c.jsonl", range(3000, 4000))

    crashed = crash_round(tmp_path, catalog_properties, "committed", spec_data)
    assert crashed.returncode == -9, f"not killed: {crashed.returncode}\n{crashed.stdout}\n{crashed.stderr[-3000:]}"
    assert "phase committed" in crashed.stdout
    table = load_catalog("default", **catalog_properties).load_table(("it", "landed"))
    assert table.current_snapshot().snapshot_id != first.snapshot_id  # the dead attempt did commit
    dead = state_store.load()
    assert dead.status is TableStatus.TIERING and dead.committed.snapshot_id == first.snapshot_id
    # Killed before its housekeeping: the files it tiered are still in the landing zone.
    assert sorted(p.name for p in landing.rglob("*.jsonl")) == ["b.jsonl", "c.jsonl"]

    write_jsonl(landing / "0-late.jsonl", range(4000, 4300), mtime=None)  # not settled yet
    write_jsonl(landing / "d.jsonl", range(4300, 4500))
    recovered = round_in_process()

    assert recovered.outcome == "tiered" and recovered.metrics.rows == 200  # d.jsonl only
    assert recovered.start_offsets["files"] == 3 and recovered.end_offsets["files"] == 4
    state = state_store.load()
    assert state.status is TableStatus.TIERED and state.committed.snapshot_id == recovered.snapshot_id
    # Housekeeping caught up with the crashed round's files too; the unsettled file stays.
    assert sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*.jsonl")) == [
        "a.jsonl",
        "b.jsonl",
        "d.jsonl",
        "sub/c.jsonl",
    ]
    assert [p.name for p in landing.rglob("*.jsonl")] == ["0-late.jsonl"]
    expected = jsonl_rows(sorted(archive.rglob("*.jsonl")))
    assert len(expected) == 4200
    assert digest(lake_rows(catalog_properties, ("it", "landed"), list(COLUMNS))) == digest(expected)
    assert unreferenced_data_files(catalog_properties, ("it", "landed")) == []
