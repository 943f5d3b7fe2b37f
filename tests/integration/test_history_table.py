"""The lake's history table (``lake/history_table.py``) on a real pyiceberg SQL catalog: rows appended from many
writers at once are all kept (every write committed only onto the snapshot it read), read back by pyiceberg and by
DuckDB; a tidy (a run's summary's, or every so many commits an append's) rewrites a day of many files into one, keeping
every row, and deletes the days past the retention."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_tiering.core.round_history import HistoryRow
from airflow_provider_tiering.lake import history_table
from airflow_provider_tiering.lake.history_table import LakeHistoryTable
from testbed.lake_check import duckdb_lake_rows
from testbed.rounds import catalog


def row(table: str, epoch: int, ended: datetime, outcome: str = "tiered") -> HistoryRow:
    return HistoryRow(
        database_name="shop", table_name=table, tiered_table=table, airflow_dag_id="d", airflow_run_id=f"r{epoch}",
        tiering_epoch=epoch, started_at=ended - timedelta(seconds=3), ended_at=ended, outcome=outcome,
        rows_in=10 * epoch, rows_inserted=None, rows_updated=None, rows_deleted=None, bytes_written=100,
        snapshot_id=epoch, data_age_before_seconds=30.0, data_age_after_seconds=0.0,
        error="boom" if outcome == "failed" else None,
    )  # fmt: skip


def files_of(table: LakeHistoryTable) -> list[str]:
    return [task.file.file_path for task in table.catalog.get().load_table(table.identifier).scan().plan_files()]


def appended_at_once(catalog_properties: dict[str, str], writers: int, epochs: int, now: datetime) -> None:
    """``writers`` threads at once, each appending ``epochs`` rounds of its own table ``t<n>``, a row per append."""
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
        try:
            for epoch in range(1, epochs + 1):
                table.append([row(f"t{number}", epoch, now)], now=now)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_appends_from_many_writers_at_once_are_all_kept_and_read_by_two_readers(catalog_properties) -> None:
    appended_at_once(catalog_properties, writers=4, epochs=5, now=datetime.now(UTC))
    found = LakeHistoryTable(catalog(catalog_properties).handle(), "sys").rows()
    expected = sorted((f"t{n}", e) for n in range(4) for e in range(1, 6))
    assert sorted(zip(found["table_name"].to_pylist(), found["tiering_epoch"].to_pylist(), strict=True)) == expected
    read = duckdb_lake_rows(catalog_properties, ("sys", "lake_tiering_history"), ["table_name", "tiering_epoch"])
    assert sorted(read) == expected


def test_compactions_beside_appends_keep_every_row_once_and_leave_few_files(
    catalog_properties, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's tidy runs while the next run's rounds append: a compaction replaces exactly the files it read,
    committed onto the appends made meanwhile, which it leaves alone."""
    monkeypatch.setattr(history_table, "COMPACT_AFTER_FILES", 3)
    now = datetime.now(UTC)
    appending = threading.Event()

    def tidier() -> None:
        table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
        while appending.is_set():
            table.tidy()
            time.sleep(0.05)

    LakeHistoryTable(catalog(catalog_properties).handle(), "sys").append([row("t0", 0, now)], now=now)
    appending.set()
    tidying = threading.Thread(target=tidier)
    tidying.start()
    try:
        appended_at_once(catalog_properties, writers=3, epochs=8, now=now)
    finally:
        appending.clear()
        tidying.join()
    table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
    table.tidy()
    expected = sorted([("t0", 0), *((f"t{n}", e) for n in range(3) for e in range(1, 9))])
    found = table.rows()
    assert sorted(zip(found["table_name"].to_pylist(), found["tiering_epoch"].to_pylist(), strict=True)) == expected
    assert len(files_of(table)) <= 3


def test_a_day_of_many_files_is_compacted_and_days_past_the_retention_are_deleted(
    catalog_properties, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_table, "COMPACT_AFTER_FILES", 4)
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys", retention=timedelta(days=3))
    old = now - timedelta(days=5)
    table.append([row("t", 1, old)], now=old)
    for epoch in range(2, 8):  # six appends of today: past four files
        table.append([row("t", epoch, now, "failed" if epoch == 3 else "tiered")], now=now)
    assert len(files_of(table)) == 7  # an append only appends: a run's summary tidies
    table.tidy(now)  # today is rewritten into one file, the 5-day-old round deleted
    assert len(files_of(table)) == 1
    found = table.rows()
    assert sorted(found["tiering_epoch"].to_pylist()) == list(range(2, 8))  # the 5-day-old round is gone
    assert [(r["tiering_epoch"], r["error"]) for r in found.to_pylist() if r["outcome"] == "failed"] == [(3, "boom")]


def test_rounds_without_a_summary_tidy_the_table_themselves_every_so_many_commits(
    catalog_properties, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_table, "COMPACT_AFTER_FILES", 2)
    monkeypatch.setattr(history_table, "TIDY_EVERY_COMMITS", 5)
    monkeypatch.setattr(history_table, "EXPIRE_AFTER", timedelta(0))
    now = datetime.now(UTC)
    table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
    counts = []
    for epoch in range(1, 8):
        table.append([row("t", epoch, now)])  # the tidy's clock is the machine's: snapshots expire right away
        counts.append(len(files_of(table)))
    assert counts == [1, 2, 3, 4, 1, 2, 3]  # the fifth commit's append compacted the day
    assert sorted(table.rows()["tiering_epoch"].to_pylist()) == list(range(1, 8))
    kept = table.catalog.get().load_table(table.identifier).snapshots()
    assert len(kept) <= history_table.KEEP_SNAPSHOTS + 2  # the tidy expired the older ones


def test_the_documented_slo_query_reads_the_history_with_duckdb(catalog_properties) -> None:
    """docs/operations.md's DuckDB query of the worst data age per table and hour, on the table as rounds leave it."""
    import re
    from pathlib import Path

    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
    table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
    rows = [row("a", 1, now), row("a", 2, now + timedelta(minutes=5), "failed"), row("b", 1, now)]
    table.append([rows[0], rows[2]])
    table.append([HistoryRow(**{**rows[1].__dict__, "data_age_before_seconds": 95.0})])
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    query = re.search(r"An SLO chart.*?```sql\n(.*?)```", doc, re.S).group(1)  # type: ignore[union-attr]
    metadata = table.catalog.get().load_table(table.identifier).metadata_location.removeprefix("file://")
    query = query.replace("<warehouse>/sys.db/lake_tiering_history/metadata/<latest>.metadata.json", metadata)
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for package in (duckdb_extension_avro, duckdb_extension_iceberg):
        connection.execute(f"LOAD '{next(Path(package.__file__).parent.rglob('*.duckdb_extension'))}'")
    found = [(r[0], r[2], r[3]) for r in connection.execute(query).fetchall()]
    assert found == [("a", 95.0, 1), ("b", 30.0, 0)], found


def test_one_tables_recent_rounds_are_read_oldest_first_for_the_pages_chart(catalog_properties) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    table = LakeHistoryTable(catalog(catalog_properties).handle(), "sys")
    assert table.rounds_of("orders", now - timedelta(hours=1), 10) == []  # no history table yet
    table.append([row("orders", 1, now - timedelta(days=2)), row("orders", 2, now - timedelta(minutes=30))], now=now)
    table.append([row("orders", 3, now - timedelta(minutes=20), "failed"), row("items", 1, now)], now=now)
    table.append([row("orders", 4, now - timedelta(minutes=10))], now=now)
    found = table.rounds_of("orders", now - timedelta(hours=1), 10)
    assert [(r["tiering_epoch"], r["outcome"]) for r in found] == [(2, "tiered"), (3, "failed"), (4, "tiered")]
    assert found[0]["ended_at"] == now - timedelta(minutes=30) and found[0]["data_age_before_seconds"] == 30.0
    assert [r["tiering_epoch"] for r in table.rounds_of("orders", now - timedelta(hours=1), 2)] == [3, 4]
