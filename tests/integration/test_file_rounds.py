"""Rounds over a landing zone of files with real Spark and a real pyiceberg catalog; the lake is checked
against the rows of the files, computed with Python's json and csv modules."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo

from airflow_provider_tiering.core.ports import WriteTarget
from airflow_provider_tiering.core.round_result import RoundPhase
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.sources.files.offsets_log import OffsetsLog
from airflow_provider_tiering.sources.files.plans import FileSplit
from airflow_provider_tiering.spark.write_job import write_split
from testbed.lake_check import digest, lake_rows
from testbed.landing_files import AN_HOUR_AGO, COLUMNS, csv_rows, jsonl_rows, write_jsonl
from testbed.rounds import round_parts
from testbed.writers import UntouchableWriter


def make_spec(name: str, **source) -> TableSpec:
    return TableSpec.parse(
        {
            "name": name,
            "source": {"kind": "files", "settle_seconds": 60, **source},
            "lake": {"namespace": "it", "table": name},
        }
    )


def run(spec: TableSpec, catalog_properties, writer, tmp_path: Path):
    store = JsonFileStateStore(tmp_path / f"{spec.name}.json")
    return round_parts(spec, None, catalog_properties, writer=writer).run(store)


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_each_complete_file_is_tiered_once_whatever_order_it_arrives_in(catalog_properties, spark_writer, tmp_path):
    landing, archive = tmp_path / "landing", tmp_path / "archive"
    spec = make_spec(
        "events",
        path=str(landing),
        format="jsonl",
        columns=COLUMNS,
        after_commit="archive",
        archive_path=str(archive),
    )
    write_jsonl(landing / "2024-03-02.jsonl", range(0, 1500), mtime=AN_HOUR_AGO)
    write_jsonl(landing / "day" / "2024-03-03.json", range(1500, 2500), mtime=AN_HOUR_AGO + 60)
    write_jsonl(landing / "_tmp" / "2024-03-03.jsonl", range(90_000, 90_010))  # a writer's temporary folder
    being_written = write_jsonl(landing / "2024-03-04.jsonl", range(2500, 2600), mtime=None)  # fresh: not settled

    first = run(spec, catalog_properties, spark_writer, tmp_path)
    assert first.outcome == "tiered" and first.metrics.rows == 2500
    assert first.end_offsets["files"] == 2
    assert files_under(archive) == ["2024-03-02.jsonl", "day/2024-03-03.json"]
    assert files_under(landing) == ["2024-03-04.jsonl", "_tmp/2024-03-03.jsonl"]

    with being_written.open("a") as handle:  # the writer finishes the file
        handle.write(write_jsonl(tmp_path / "rest.jsonl", range(2600, 3000), mtime=None).read_text())
    os.utime(being_written, (AN_HOUR_AGO + 120, AN_HOUR_AGO + 120))
    # Moved in late, with a name and an mtime older than every tiered file.
    write_jsonl(landing / "2024-03-01.jsonl", range(3000, 3700), mtime=AN_HOUR_AGO - 3600)

    second = run(spec, catalog_properties, spark_writer, tmp_path)
    assert second.outcome == "tiered" and second.metrics.rows == 1200
    assert second.start_offsets == first.end_offsets and second.end_offsets["files"] == 4

    third = run(spec, catalog_properties, UntouchableWriter(), tmp_path)
    assert third.outcome == "nothing_to_tier" and third.snapshot_id == second.snapshot_id

    tiered = ["2024-03-01.jsonl", "2024-03-02.jsonl", "2024-03-04.jsonl", "day/2024-03-03.json"]
    assert files_under(archive) == tiered
    assert files_under(landing) == ["_tmp/2024-03-03.jsonl"]
    expected = jsonl_rows([archive / name for name in tiered])
    assert len(expected) == 3700
    assert digest(lake_rows(catalog_properties, ("it", "events"), list(COLUMNS))) == digest(expected)
    assert len(load_catalog("default", **catalog_properties).load_table(("it", "events")).snapshots()) == 2


def csv_file(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id,name,amount,at\n" + "".join(f"{line}\n" for line in lines))
    return path


def test_csv_with_markers_and_bad_rows_set_aside(catalog_properties, spark_writer, tmp_path):
    landing = tmp_path / "landing"
    spec = make_spec(
        "payments",
        path=str(landing),
        format="csv",
        columns=COLUMNS,
        marker_suffix=".ready",
        on_bad_record="side_table",
    )
    good = [f"{i},c{i},{i}.25,2024-03-01T00:00:{i % 60:02d}Z" for i in range(400)]
    a = csv_file(landing / "a.csv", [*good[:200], "200,short", "201,c,not-a-number,2024-03-01T00:00:00Z"])
    (landing / "a.csv.ready").touch()
    b = csv_file(landing / "b.csv", good[200:])  # no marker yet: its writer is still busy

    first = run(spec, catalog_properties, spark_writer, tmp_path)
    assert first.outcome == "tiered" and first.metrics.rows == 200 and first.metrics.rejected_rows == 2
    (landing / "b.csv.ready").touch()
    second = run(spec, catalog_properties, spark_writer, tmp_path)
    assert second.outcome == "tiered" and second.metrics.rows == 200 and second.end_offsets["files"] == 2

    expected = csv_rows([a, b])
    assert len(expected) == 400
    assert digest(lake_rows(catalog_properties, ("it", "payments"), list(COLUMNS))) == digest(expected)

    bad = [("a.csv", 202, "200,short"), ("a.csv", 203, "201,c,not-a-number,2024-03-01T00:00:00Z")]
    side = ("it", "payments_rejects")
    assert sorted(lake_rows(catalog_properties, side, ["source_file", "line", "record"])) == bad
    assert all("a.csv" in r[0] for r in lake_rows(catalog_properties, side, ["source_file", "reason"]))

    # A round run again over a.csv (its data commit lost after its rejects commit) replaces a.csv's rejects.
    parts = round_parts(spec, None, catalog_properties)
    source, rejects = parts.source, parts.rejects
    assert rejects is not None and rejects.lake.identifier == side
    (landed,) = [f for f in source.list_complete() if f.path == "a.csv"]
    files = write_split(
        source,
        FileSplit(0, (landed,)),
        source.schema(),
        WriteTarget(f"file://{tmp_path}/rerun", source.schema()),
        rejects_uri=rejects.staging_uri(99, "rerun"),
    )
    assert sum(f.rows for f in files if f.kind == "data") == 200
    rejects.replace([f for f in files if f.kind == "rejects"], epoch=99, table_name="payments", attempt="rerun")
    assert sorted(lake_rows(catalog_properties, side, ["source_file", "line", "record"])) == bad


def test_parquet_landing_zone_takes_its_schema_from_the_first_files(catalog_properties, spark_writer, tmp_path):
    landing = tmp_path / "landing"
    spec = make_spec("metrics", path=str(landing), format="parquet")

    empty = run(spec, catalog_properties, UntouchableWriter(), tmp_path)
    assert empty.outcome == "nothing_to_tier"
    assert not load_catalog("default", **catalog_properties).table_exists(("it", "metrics"))

    landing.mkdir()
    for part, ids in enumerate([range(0, 300), range(300, 800)]):
        path = landing / f"part-{part}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "value": [i / 4 for i in ids]}), path)
        os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    result = run(spec, catalog_properties, spark_writer, tmp_path)
    assert result.outcome == "tiered" and result.metrics.rows == 800
    expected = [(i, i / 4) for i in range(800)]
    assert digest(lake_rows(catalog_properties, ("it", "metrics"), ["id", "value"])) == digest(expected)


def test_a_column_absent_from_a_rounds_files_is_neither_dropped_nor_moved_aside(
    catalog_properties, spark_writer, tmp_path
):
    """A landing zone's round sees the columns of the files it reads: a column absent from them (and one new in
    them while another is absent) is no change of the table's shape; the values tiered before stay where they are."""
    landing = tmp_path / "landing"
    landing.mkdir()
    spec = make_spec("sparse", path=str(landing), format="parquet")
    batches = [
        pa.table({"id": pa.array([1, 2], pa.int64()), "x": ["a", "b"]}),
        pa.table({"id": pa.array([3], pa.int64())}),  # no x
        pa.table({"id": pa.array([4], pa.int64()), "y": [1.5]}),  # no x, a new y
        pa.table({"id": pa.array([5], pa.int64()), "x": ["e"]}),  # x again
    ]
    for number, batch in enumerate(batches):
        path = landing / f"part-{number}.parquet"
        pq.write_table(batch, path)
        os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
        assert run(spec, catalog_properties, spark_writer, tmp_path).outcome == "tiered"
    table = load_catalog("default", **catalog_properties).load_table(("it", "sparse"))
    assert [f.name for f in table.schema().fields] == ["id", "x", "y"]
    expected = [(1, "a", None), (2, "b", None), (3, None, None), (4, None, 1.5), (5, "e", None)]
    assert digest(lake_rows(catalog_properties, ("it", "sparse"), ["id", "x", "y"])) == digest(expected)


def test_partitioned_landing_zone_writes_one_partition_per_file(catalog_properties, spark_writer, tmp_path):
    landing = tmp_path / "landing"
    spec = TableSpec.parse(
        {
            "name": "visits",
            "source": {"kind": "files", "path": str(landing), "format": "jsonl", "columns": COLUMNS},
            "lake": {"namespace": "it", "table": "visits", "partition_by": ["day(at)", "bucket(4, id)"]},
        }
    )
    paths = [write_jsonl(landing / f"{n}.jsonl", range(n * 300, n * 300 + 300)) for n in range(3)]
    result = run(spec, catalog_properties, spark_writer, tmp_path)
    assert result.outcome == "tiered" and result.metrics.rows == 900
    assert digest(lake_rows(catalog_properties, ("it", "visits"), list(COLUMNS))) == digest(jsonl_rows(paths))

    table = load_catalog("default", **catalog_properties).load_table(("it", "visits"))
    fields = table.spec().fields
    assert [str(f.transform) for f in fields] == ["day", "bucket[4]"]
    tasks = list(table.scan().plan_files())
    for task in tasks:
        for position, field in enumerate(fields):
            source = table.schema().find_field(field.source_id)
            reference = field.transform.transform(source.field_type)  # pyiceberg's pure-Python transform
            values = pq.read_table(task.file.file_path.removeprefix("file://"), columns=[source.name]).column(0)
            expected = {reference(_micros(v) if source.name == "at" else v) for v in values.to_pylist()}
            assert expected == {task.file.partition[position]}
    assert len({task.file.partition[0] for task in tasks}) == 28  # days of March in the records
    pruned = list(table.scan(row_filter=EqualTo("id", 7)).plan_files())
    assert 0 < len(pruned) < len(tasks) / 3  # one bucket of four, one day


def _micros(value) -> int:
    from pyiceberg.utils.datetime import datetime_to_micros

    return datetime_to_micros(value)


def test_offsets_log_that_cannot_be_written_fails_the_round_and_is_recorded(
    catalog_properties, spark_writer, tmp_path, monkeypatch
):
    """The offsets log is written once the round has its epoch: a full disk there is the round's recorded error."""
    landing = tmp_path / "landing"
    spec = make_spec("full_disk", path=str(landing), format="jsonl", columns=COLUMNS)
    write_jsonl(landing / "a.jsonl", range(0, 100), mtime=AN_HOUR_AGO)
    real_write_log = OffsetsLog.write

    def disk_full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(OffsetsLog, "write", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run(spec, catalog_properties, spark_writer, tmp_path)
    state = JsonFileStateStore(tmp_path / "full_disk.json").load()
    assert state.status.value == "FAILED" and "No space left on device" in state.last_error
    assert state.consecutive_failures == 1
    table = load_catalog("default", **catalog_properties).load_table(("it", "full_disk"))
    assert table.current_snapshot() is None

    monkeypatch.setattr(OffsetsLog, "write", real_write_log)
    again = run(spec, catalog_properties, spark_writer, tmp_path)
    assert again.outcome == "tiered" and again.metrics.rows == 100
    assert digest(lake_rows(catalog_properties, ("it", "full_disk"), list(COLUMNS))) == digest(
        jsonl_rows([landing / "a.jsonl"])
    )


def test_a_failed_attempts_rejects_files_are_removed_by_the_next_committed_round(
    catalog_properties, spark_writer, tmp_path
):
    """An attempt that wrote its bad records and failed before committing them leaves their files in the side
    table's staging area; the next round that commits removes them, as it removes the main table's."""
    landing = tmp_path / "landing"
    spec = make_spec("refunds", path=str(landing), format="csv", columns=COLUMNS, on_bad_record="side_table")
    csv_file(landing / "a.csv", ["1,c1,1.25,2024-03-01T00:00:01Z", "2,short"])
    os.utime(landing / "a.csv", (AN_HOUR_AGO, AN_HOUR_AGO))
    store = JsonFileStateStore(tmp_path / "refunds.json")

    def fail_once_written(phase: RoundPhase) -> None:
        if phase is RoundPhase.WRITTEN:
            raise RuntimeError("the task process lost its catalog after writing")

    parts = round_parts(spec, None, catalog_properties, writer=spark_writer)
    with pytest.raises(RuntimeError, match="lost its catalog"):
        parts.run(store, observe=fail_once_written)
    side = ("it", "refunds_rejects")
    side_location = load_catalog("default", **catalog_properties).load_table(side).location()
    left = [p for p in Path(side_location.removeprefix("file://")).rglob("*.parquet") if "attempt-" in str(p)]
    assert left, "the failed attempt wrote no rejects file: the test checks nothing"

    result = run(spec, catalog_properties, spark_writer, tmp_path)
    assert result.outcome == "tiered" and result.metrics.rows == 1 and result.metrics.rejected_rows == 1
    assert not [p for p in left if p.exists()], "the failed attempt's rejects files were left behind"
    assert [r[:2] for r in lake_rows(catalog_properties, side, ["source_file", "line"])] == [("a.csv", 3)]


def test_a_rounds_lineage_names_the_columns_it_read_though_its_files_are_deleted_after_the_commit(
    catalog_properties, local_writer, tmp_path
):
    """The operator's lineage takes the columns the round read (``RoundResult.read_schema``): the caller's source
    would look at the landing zone again after the round, where ``after_commit="delete"`` left no file to read a
    Parquet schema from."""
    from airflow_provider_tiering.operators.tier_table import TierTableOperator

    landing = tmp_path / "landing"
    landing.mkdir()
    path = landing / "part-0.parquet"
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64()), "value": [i / 4 for i in range(10)]}), path)
    os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    spec = make_spec("gone", path=str(landing), format="parquet", after_commit="delete")
    parts = round_parts(spec, None, catalog_properties, writer=local_writer)
    result = parts.run(JsonFileStateStore(tmp_path / "gone.json"))
    assert result.outcome == "tiered" and list(landing.iterdir()) == []
    operator = TierTableOperator(table=spec.model_dump(mode="json", exclude_none=True))
    operator._keep_lineage(parts, result)
    assert operator._lineage is not None
    assert operator._lineage.input.fields == (("id", "int64"), ("value", "double"))
