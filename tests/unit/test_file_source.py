"""The landing-zone source on real files: listing, completeness, planning, offsets logs, reading, bad records."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import random
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.source_specs import FileSourceSpec
from airflow_provider_tiering.sources.files.listing import LandedFile
from airflow_provider_tiering.sources.files.plans import FilePlan, FileSplit
from airflow_provider_tiering.sources.files.source import FileSource

COLUMNS = {"id": "int64", "name": "string", "amount": "decimal128(12, 2)", "day": "date32"}
AN_HOUR_AGO = time.time() - 3600


def make_source(landing: Path, lake: Path | None = None, **overrides) -> FileSource:
    fields = {"kind": "files", "path": str(landing), "format": "jsonl", "columns": COLUMNS, "settle_seconds": 60}
    fields.update(overrides)
    source = FileSource(FileSourceSpec.model_validate(fields))
    if lake is not None:
        source.bind_lake(f"file://{lake}", {})
    return source


def land(path: Path, text: str, mtime: float | None = AN_HOUR_AGO) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def read_all(source: FileSource, files: list[LandedFile]) -> list[dict]:
    split = FileSplit(0, tuple(files))
    rows = []
    for batch in source.read_split(split, source.schema()):
        assert batch.schema == source.schema()
        rows.extend(batch.to_pylist())
    return rows


def tier(source: FileSource, committed: dict | None) -> dict:
    """Plan a round and write its offsets log, as run_round does (without Spark)."""
    watermark = source.safe_watermark(committed, None)
    assert watermark.end is not None
    return source.end_offsets(source.plan(committed, watermark.end, 1_000_000))


# -- listing and completeness --------------------------------------------------------------------
def test_listing_keeps_settled_data_files_and_ignores_hidden_temporary_and_other_files(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.jsonl", "{}\n")
    land(landing / "sub" / "deeper" / "b.json", "{}\n")
    land(landing / "c.csv", "x\n")
    land(landing / "_c.jsonl", "{}\n")
    land(landing / ".d.jsonl", "{}\n")
    land(landing / "_temporary" / "e.jsonl", "{}\n")
    land(landing / "sub" / ".staging" / "f.jsonl", "{}\n")
    land(landing / "fresh.jsonl", "{}\n", mtime=None)
    assert [f.path for f in make_source(landing).list_complete()] == ["a.jsonl", "sub/deeper/b.json"]
    assert [f.path for f in make_source(landing, recursive=False).list_complete()] == ["a.jsonl"]
    assert [f.path for f in make_source(landing, pattern="b.*").list_complete()] == ["sub/deeper/b.json"]


def test_a_missing_landing_zone_lists_nothing(tmp_path):
    assert make_source(tmp_path / "not-yet").list_complete() == []


def test_a_file_is_complete_once_its_mtime_is_settle_seconds_old(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "old.jsonl", "{}\n", mtime=time.time() - 61)
    land(landing / "young.jsonl", "{}\n", mtime=time.time() - 50)
    assert [f.path for f in make_source(landing).list_complete()] == ["old.jsonl"]
    assert [f.path for f in make_source(landing, settle_seconds=0).list_complete()] == ["old.jsonl", "young.jsonl"]


def test_with_a_marker_suffix_a_file_is_complete_when_its_marker_exists(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.jsonl", "{}\n", mtime=None)
    land(landing / "a.jsonl.done", "", mtime=None)
    land(landing / "b.jsonl", "{}\n")  # settled, but no marker
    land(landing / "c.jsonl.done", "")  # a marker alone is not data
    source = make_source(landing, marker_suffix=".done", pattern="*")
    assert [f.path for f in source.list_complete()] == ["a.jsonl"]


def test_pending_files_are_oldest_first_and_a_late_file_with_an_older_name_and_mtime_is_not_skipped(tmp_path):
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    land(landing / "2024-01-02.jsonl", "{}\n", mtime=AN_HOUR_AGO)
    land(landing / "2024-01-03.jsonl", "{}\n", mtime=AN_HOUR_AGO + 10)
    first = tier(make_source(landing, lake), None)
    assert first["files"] == 2
    land(landing / "2024-01-01.jsonl", "{}\n", mtime=AN_HOUR_AGO - 100)  # moved in late with `mv`
    land(landing / "2024-01-04.jsonl", "{}\n", mtime=AN_HOUR_AGO + 20)
    source = make_source(landing, lake)
    assert source.has_rows_after(first)
    plan = source.plan(first, source.safe_watermark(first, None).end, 1000)
    assert [f.path for f in plan.files] == ["2024-01-01.jsonl", "2024-01-04.jsonl"]
    second = source.end_offsets(plan)
    assert second["files"] == 4
    assert source.safe_watermark(second, None).end is None
    assert not make_source(landing, lake).has_rows_after(second)


def test_a_round_is_capped_at_max_files_per_round_and_counts_the_files_left(tmp_path):
    landing = tmp_path / "landing"
    for i in range(5):
        land(landing / f"f{i}.jsonl", "{}\n", mtime=AN_HOUR_AGO + i)
    source = make_source(landing, tmp_path / "lake", max_files_per_round=3)
    plan = source.plan(None, source.safe_watermark(None, None).end, 1000)
    assert [f.path for f in plan.files] == ["f0.jsonl", "f1.jsonl", "f2.jsonl"]
    assert plan.capped and plan.backlog == 2 and len(plan.files) == 3
    assert source.end_offsets(plan)["files"] == 3


# -- splits -------------------------------------------------------------------------------------
def plan_of(sizes: list[int]) -> FilePlan:
    files = tuple(LandedFile(f"f{i:03d}.jsonl", size, 1_000 + i) for i, size in enumerate(sizes))
    return FilePlan(None, {"pending_files": len(files)}, files)


def test_splits_are_bin_packed_by_bytes_into_a_multiple_of_parallelism(tmp_path):
    rng = random.Random(7)
    sizes = [rng.randint(1, 50) * 1024 * 1024 for _ in range(60)] + [300 * 1024 * 1024]
    source = make_source(tmp_path, target_bytes_per_split=128 * 1024 * 1024)
    splits = source.cut_splits(plan_of(sizes), 1, parallelism=4)
    total = sum(sizes)
    assert len(splits) % 4 == 0 and len(splits) == 4 * -(-total // (4 * 128 * 1024 * 1024))
    assert [s.index for s in splits] == list(range(len(splits)))
    assert sorted(f.path for s in splits for f in s.files) == [f"f{i:03d}.jsonl" for i in range(len(sizes))]
    loads = sorted(s.bytes for s in splits)
    assert loads[-1] == 300 * 1024 * 1024  # the huge file alone
    assert loads[-2] - loads[0] <= 50 * 1024 * 1024  # the others within one file of each other


def test_splits_are_deterministic_and_at_most_one_per_file(tmp_path):
    source = make_source(tmp_path, target_bytes_per_split=10)
    sizes = [5, 5, 5, 5, 3, 3, 9]
    plan = plan_of(sizes)
    shuffled = FilePlan(None, plan.end, tuple(random.Random(1).sample(plan.files, 7)))
    assert source.cut_splits(plan, 1, 2) == source.cut_splits(shuffled, 1, 2)
    assert len(source.cut_splits(plan_of([100, 100, 100]), 1, 2)) == 3
    assert source.cut_splits(plan_of([]), 1, 2) == []


# -- offsets log ----------------------------------------------------------------------------------
def test_offsets_log_holds_the_sorted_set_of_tiered_files_and_is_read_back(tmp_path):
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    land(landing / "b" / "x.jsonl", '{"id": 1}\n')
    land(landing / "a.jsonl", '{"id": 2}\n{"id": 3}\n')
    offsets = tier(make_source(landing, lake), None)
    text = b"a.jsonl\nb/x.jsonl\n"
    sha = hashlib.sha256(text).hexdigest()
    assert offsets == {
        "files": 2,
        "bytes": (landing / "a.jsonl").stat().st_size + (landing / "b" / "x.jsonl").stat().st_size,
        "log": f"file://{lake}/metadata/tiering-source-files/{sha}.txt.gz",
        "sha256": sha,
    }
    assert gzip.decompress((lake / "metadata" / "tiering-source-files" / f"{sha}.txt.gz").read_bytes()) == text
    assert make_source(landing).committed_files(offsets) == {"a.jsonl", "b/x.jsonl"}
    assert tier(make_source(landing, lake), None) == offsets  # written again: same name, same content


def test_a_missing_or_corrupt_offsets_log_is_a_source_error_naming_it(tmp_path):
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    land(landing / "a.jsonl", "{}\n")
    offsets = tier(make_source(landing, lake), None)
    log = Path(offsets["log"].removeprefix("file://"))
    log.write_bytes(gzip.compress(b"a.jsonl\nextra.jsonl\n"))
    with pytest.raises(SourceError, match=f"offsets log {offsets['log']} is corrupt"):
        make_source(landing).safe_watermark(offsets, None)
    log.write_bytes(b"not gzip")
    with pytest.raises(SourceError, match=f"offsets log {offsets['log']} .* missing or unreadable"):
        make_source(landing).has_rows_after(offsets)
    log.unlink()
    with pytest.raises(SourceError, match=f"offsets log {offsets['log']} .* missing or unreadable"):
        make_source(landing).safe_watermark(offsets, None)
    with pytest.raises(
        SourceError, match="are not a landing zone.s file log: the lake table was tiered by another kind of source"
    ):
        make_source(landing).has_rows_after({"cursor": 5})


def test_the_source_pickles_without_its_listings_and_filesystem(tmp_path):
    landing = tmp_path / "landing"
    for i in range(200):
        land(landing / f"file-with-a-long-name-{i:05d}.jsonl", "{}\n")
    source = make_source(landing, tmp_path / "lake")
    source.safe_watermark(None, None)
    source.filesystem()
    copy = pickle.loads(pickle.dumps(source))
    assert len(pickle.dumps(source)) < 5_000
    assert len(copy.list_complete()) == 200


# -- reading ------------------------------------------------------------------------------------
def test_jsonl_files_are_read_into_the_declared_schema(tmp_path):
    landing = tmp_path / "landing"
    land(
        landing / "a.jsonl", '{"id": 1, "name": "x", "amount": "12.50", "day": "2024-01-02", "other": [1]}\n\n{"id": 2}'
    )
    source = make_source(landing)
    assert read_all(source, source.list_complete()) == [
        {"id": 1, "name": "x", "amount": Decimal("12.50"), "day": date(2024, 1, 2)},
        {"id": 2, "name": None, "amount": None, "day": None},
    ]


BAD_JSONL = (
    '{"id": 1, "name": "a"}\n'
    "{not json\n"
    '{"id": "seven"}\n'
    "\n"
    "[1, 2]\n"
    '{"id": 6, "day": "2024-13-01"}\n'
    '{"id": 7, "name": "g"}\n'
)


def test_a_bad_jsonl_record_fails_the_read_naming_file_line_and_reason(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "sub" / "bad.jsonl", BAD_JSONL)
    source = make_source(landing)
    with pytest.raises(SourceError, match=r"file sub/bad.jsonl line 2: malformed JSON: .*\(and 3 more bad records\)"):
        read_all(source, source.list_complete())


def test_bad_jsonl_records_go_aside_and_the_good_rows_are_read(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "sub" / "bad.jsonl", BAD_JSONL)
    source = make_source(landing, on_bad_record="side_table")
    rows = read_all(source, source.list_complete())
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (7, "g")]
    rejects = source.take_rejects()
    assert [(r["source_file"], r["line"], r["record"]) for r in rejects] == [
        ("sub/bad.jsonl", 2, "{not json"),
        ("sub/bad.jsonl", 3, '{"id": "seven"}'),
        ("sub/bad.jsonl", 5, "[1, 2]"),
        ("sub/bad.jsonl", 6, '{"id": 6, "day": "2024-13-01"}'),
    ]
    assert rejects[0]["reason"].startswith("malformed JSON")
    assert "Column(/id) changed from number to string" in rejects[1]["reason"]
    assert rejects[2]["reason"] == "not a JSON object but list"
    assert "2024-13-01" in rejects[3]["reason"]
    assert source.take_rejects() == []


def test_a_rejected_record_keeps_at_most_64_kib_of_its_text(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "big.jsonl", '{"id": 1}\n{"name": "' + "x" * 100_000 + "\n")
    source = make_source(landing, on_bad_record="side_table")
    assert [r["id"] for r in read_all(source, source.list_complete())] == [1]
    (reject,) = source.take_rejects()
    assert reject["line"] == 2 and len(reject["record"]) == 64 * 1024


CSV_COLUMNS = {"id": "int64", "name": "string", "amount": "decimal128(12, 2)"}
BAD_CSV = 'amount,id,name\n1.50,1,a\n2.00,2\n"3.00",3,"multi\nline"\nnope,4,d\n5.00,5,e,extra\n6.25,6,f\n'


def test_csv_files_are_read_by_header_and_bad_rows_fail_with_their_line(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.csv", BAD_CSV)
    source = make_source(landing, format="csv", columns=CSV_COLUMNS)
    with pytest.raises(SourceError, match=r"file a.csv line 3: expected 3 columns, got 2 \(and 2 more bad records\)"):
        read_all(source, source.list_complete())


def test_bad_csv_rows_go_aside_with_their_first_line_and_quoted_newlines_survive(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.csv", BAD_CSV)
    source = make_source(landing, format="csv", columns=CSV_COLUMNS, on_bad_record="side_table")
    rows = read_all(source, source.list_complete())
    assert [(r["id"], r["name"], str(r["amount"])) for r in rows] == [
        (1, "a", "1.50"),
        (3, "multi\nline", "3.00"),
        (6, "f", "6.25"),
    ]
    rejects = source.take_rejects()
    assert [(r["line"], r["record"]) for r in rejects] == [(3, "2.00,2"), (6, "nope,4,d"), (7, "5.00,5,e,extra")]
    assert [r["reason"] for r in rejects][0::2] == ["expected 3 columns, got 2", "expected 3 columns, got 4"]
    assert "nope" in rejects[1]["reason"]


def test_csv_without_header_uses_the_declared_column_order_and_delimiter(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.csv", "1;a;1.5\n2;b;2\n")
    source = make_source(landing, format="csv", columns=CSV_COLUMNS, csv_header=False, csv_delimiter=";")
    assert [(r["id"], r["name"], str(r["amount"])) for r in read_all(source, source.list_complete())] == [
        (1, "a", "1.50"),
        (2, "b", "2.00"),
    ]


def test_a_csv_header_without_a_declared_column_is_an_error_for_the_file(tmp_path):
    landing = tmp_path / "landing"
    land(landing / "a.csv", "id,name\n1,a\n")
    source = make_source(landing, format="csv", columns=CSV_COLUMNS, on_bad_record="side_table")
    with pytest.raises(SourceError, match="file a.csv: the header has no column\\(s\\) amount"):
        read_all(source, source.list_complete())


def test_parquet_files_are_unified_and_missing_columns_read_as_nulls(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]}), landing / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.int32()), "score": [0.5]}), landing / "b.parquet")
    for name in ("a.parquet", "b.parquet"):
        os.utime(landing / name, (AN_HOUR_AGO, AN_HOUR_AGO))
    source = make_source(landing, format="parquet", columns=None)
    assert source.schema() == pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64())])
    assert read_all(source, source.list_complete()) == [
        {"id": 1, "name": "a", "score": None},
        {"id": 2, "name": "b", "score": None},
        {"id": 3, "name": None, "score": 0.5},
    ]
    declared = make_source(landing, format="parquet", columns={"id": "int64"})
    assert [r["id"] for r in read_all(declared, declared.list_complete())] == [1, 2, 3]


def test_parquet_without_files_or_columns_has_an_empty_schema(tmp_path):
    assert len(make_source(tmp_path / "landing", format="parquet", columns=None).schema()) == 0


@pytest.mark.parametrize("change", ["append", "touch", "delete"])
def test_a_file_that_changed_since_the_plan_fails_the_read(tmp_path, change):
    landing = tmp_path / "landing"
    path = land(landing / "a.jsonl", '{"id": 1}\n')
    source = make_source(landing)
    files = source.list_complete()
    if change == "append":
        with path.open("a") as handle:
            handle.write('{"id": 2}\n')
        os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    elif change == "touch":
        os.utime(path, (AN_HOUR_AGO + 1, AN_HOUR_AGO + 1))
    else:
        path.unlink()
    with pytest.raises(SourceError, match="file a.jsonl changed while being tiered"):
        read_all(source, files)


# -- housekeeping ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_after_commit_touches_only_files_in_the_committed_log(tmp_path, mode):
    landing, lake, archive = tmp_path / "landing", tmp_path / "lake", tmp_path / "archive"
    land(landing / "a.jsonl", "{}\n")
    land(landing / "sub" / "b.jsonl", "{}\n")
    land(landing / "sub" / "b.jsonl.done", "")
    offsets = tier(make_source(landing, lake), None)
    land(landing / "c.jsonl", "{}\n")  # not tiered yet
    options = {"after_commit": mode, "archive_path": str(archive) if mode == "archive" else None}
    source = make_source(landing, **options)
    assert source.after_commit(offsets) == 2
    assert sorted(p.relative_to(landing).as_posix() for p in landing.rglob("*") if p.is_file()) == [
        "c.jsonl",
        "sub/b.jsonl.done",  # not a marker in this spec: left alone
    ]
    archived = sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*") if p.is_file())
    assert archived == (["a.jsonl", "sub/b.jsonl"] if mode == "archive" else [])
    assert source.after_commit(offsets) == 0


def test_archiving_moves_the_marker_with_its_file(tmp_path):
    landing, lake, archive = tmp_path / "landing", tmp_path / "lake", tmp_path / "archive"
    land(landing / "a.jsonl", "{}\n")
    land(landing / "a.jsonl.ok", "")
    offsets = tier(make_source(landing, lake, marker_suffix=".ok"), None)
    source = make_source(landing, marker_suffix=".ok", after_commit="archive", archive_path=str(archive))
    assert source.after_commit(offsets) == 1
    assert sorted(p.name for p in archive.iterdir()) == ["a.jsonl", "a.jsonl.ok"]
    assert list(landing.iterdir()) == []


def test_an_archive_inside_the_landing_zone_must_be_hidden(tmp_path):
    with pytest.raises(SourceError, match="is inside the landing zone"):
        make_source(tmp_path, after_commit="archive", archive_path=str(tmp_path / "archive"))
    make_source(tmp_path, after_commit="archive", archive_path=str(tmp_path / "_archive"))
