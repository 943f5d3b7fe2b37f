"""Lake maintenance alongside tiering: compaction after many small rounds, compaction racing a round in both orders,
and snapshot expiry plus orphan removal while a round is paused mid-write."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.live_files import live_data_files
from airflow_provider_tiering.lake.orphan_files import remove_orphan_files
from airflow_provider_tiering.lake.snapshot_expiry import expire_snapshots
from airflow_provider_tiering.lake.tiering_commits import OPERATION_PROPERTY
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, SqliteHot
from testbed.lake_check import digest, lake_rows
from testbed.lake_faults import CatalogThatPausesBeforeTheSwap
from testbed.rounds import catalog, lake_of

SPEC = TableSpec.parse(
    {
        "name": "kept",
        "source": {"conn_id": "unused", "table": "kept", "cursor_column": "id"},
        "lake": {"namespace": "it", "table": "kept"},
    }
)
MB = 1024 * 1024


class Tiered:
    """A SQLite hot table ``kept`` tiered into the lake by small rounds written without Spark."""

    def __init__(self, tmp_path: Path, catalog_properties: dict[str, str], spec: TableSpec = SPEC) -> None:
        self.catalog_properties = catalog_properties
        self.spec = spec
        self.hot = SqliteHot(tmp_path / "hot.db")
        self.hot.create("kept")
        self.state = JsonFileStateStore(tmp_path / "state.json")
        self.next_id = 1
        # Rounds of one split are written by this process: no Spark session per round.
        self.round_writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    def lake(self, instrumented=None) -> IcebergLake:
        handle = None if instrumented is None else CatalogHandle.of(instrumented)
        return lake_of(self.spec, self.catalog_properties, catalog_handle=handle)

    def insert(self, rows: int) -> None:
        self.hot.insert("kept", self.next_id, rows)
        self.next_id += rows

    def round(self, lake: IcebergLake | None = None, **kwargs):
        return run_round(
            self.spec, self.hot.source(self.spec.source), lake or self.lake(), self.round_writer, self.state, **kwargs
        )

    def table(self):
        return load_catalog("default", **self.catalog_properties).load_table(("it", "kept"))

    def assert_lake_equals_hot(self) -> None:
        assert digest(lake_rows(self.catalog_properties, ("it", "kept"), COLUMNS)) == digest(self.hot.rows("kept"))


def compact_kept(tiered: Tiered, writer, lake: IcebergLake | None = None):
    return compact(
        lake or tiered.lake(),
        writer,
        target_file_bytes=128 * MB,
        small_file_bytes=8 * MB,
        max_small_files=10,
        table_name="kept",
    )


def test_compaction_after_200_small_rounds_keeps_rows_and_offsets(tmp_path, catalog_properties, spark_writer):
    tiered = Tiered(tmp_path, catalog_properties)
    for _ in range(200):
        tiered.insert(20)
        assert tiered.round().outcome == "tiered"
    before = tiered.lake().committed()
    assert len(live_data_files(tiered.table())) == 200

    result = compact_kept(tiered, spark_writer)

    assert result.outcome == "compacted" and result.files_before == 200 and result.rewritten_files == 200
    assert result.files_after == len(live_data_files(tiered.table())) <= 10
    tiered.assert_lake_equals_hot()
    after = tiered.lake().committed()
    assert (after.epoch, after.end_offsets) == (before.epoch, before.end_offsets)  # the same committed offsets
    head = tiered.table().current_snapshot()
    assert head.summary.operation.value == "overwrite" and head.summary[OPERATION_PROPERTY] == "compaction"
    # Below the threshold now: nothing to do.
    assert compact_kept(tiered, spark_writer).outcome == "below_threshold"
    # The next round starts where the last tiering round ended and tiers only the new rows.
    tiered.insert(7)
    nxt = tiered.round()
    assert nxt.start_offsets == before.end_offsets and nxt.metrics.rows == 7 and nxt.epoch == before.epoch + 1
    assert tiered.state.load().note is None  # not taken for a repair
    tiered.assert_lake_equals_hot()


def test_compaction_of_a_partitioned_table_keeps_one_partition_per_file(tmp_path, catalog_properties, spark_writer):
    spec = SPEC.model_copy(update={"lake": SPEC.lake.model_copy(update={"partition_by": ("region",)})})
    tiered = Tiered(tmp_path, catalog_properties, spec)
    for _ in range(12):
        tiered.insert(30)
        tiered.round()
    regions = {f.partition[0] for f in live_data_files(tiered.table())}
    assert len(live_data_files(tiered.table())) > 12 and len(regions) > 1

    result = compact_kept(tiered, spark_writer)

    assert result.outcome == "compacted"
    files = live_data_files(tiered.table())
    assert len(files) == len(regions) == len({f.partition[0] for f in files})  # one file per partition
    tiered.assert_lake_equals_hot()
    table = tiered.table()
    for region in regions:  # readers still prune by partition
        scanned = table.scan(row_filter=f"region == '{region}'").plan_files()
        assert [t.file.partition[0] for t in scanned] == [region]


def test_compaction_losing_to_a_round_commits_again_with_the_rounds_offsets(tmp_path, catalog_properties, spark_writer):
    tiered = Tiered(tmp_path, catalog_properties)
    for _ in range(15):
        tiered.insert(10)
        tiered.round()
    rounds = []

    def a_round_commits_first() -> None:
        tiered.insert(5)
        rounds.append(tiered.round())

    paused = tiered.lake(
        CatalogThatPausesBeforeTheSwap(catalog(catalog_properties).handle().get(), a_round_commits_first)
    )
    result = compact_kept(tiered, spark_writer, lake=paused)

    assert result.outcome == "compacted" and result.tries == 2
    committed = tiered.lake().committed()
    assert (committed.epoch, committed.end_offsets) == (rounds[0].epoch, rounds[0].end_offsets)
    tiered.assert_lake_equals_hot()
    tiered.insert(3)
    assert tiered.round().metrics.rows == 3
    tiered.assert_lake_equals_hot()


def test_round_losing_to_a_compaction_commits_on_top_of_it(tmp_path, catalog_properties, spark_writer):
    tiered = Tiered(tmp_path, catalog_properties)
    for _ in range(15):
        tiered.insert(10)
        tiered.round()
    compactions = []

    def a_compaction_commits_first() -> None:
        compactions.append(compact_kept(tiered, spark_writer))

    tiered.insert(40)
    paused = tiered.lake(
        CatalogThatPausesBeforeTheSwap(catalog(catalog_properties).handle().get(), a_compaction_commits_first)
    )
    result = tiered.round(lake=paused)

    assert compactions[0].outcome == "compacted"
    assert result.outcome == "tiered" and result.metrics.rows == 40
    table = tiered.table()
    assert table.current_snapshot().snapshot_id == result.snapshot_id
    assert table.snapshot_by_id(table.current_snapshot().parent_snapshot_id).summary[OPERATION_PROPERTY] == "compaction"
    tiered.assert_lake_equals_hot()


def test_expiry_and_orphan_removal_never_touch_a_paused_round_or_the_current_files(
    tmp_path, catalog_properties, spark_writer
):
    tiered = Tiered(tmp_path, catalog_properties)
    for _ in range(15):
        tiered.insert(10)
        tiered.round()
    compact_kept(tiered, spark_writer)  # the 15 small files are now referenced by old snapshots only
    data_dir = Path(tiered.table().location().removeprefix("file://")) / "data"
    long_ago = time.time() - 3 * 3600
    for path in data_dir.rglob("*.parquet"):  # everything so far is old enough to be an orphan candidate
        os.utime(path, (long_ago, long_ago))
    stray = data_dir / "tiering" / "epoch-0000000099" / "attempt-dead" / "split-00000.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"a dead attempt's partial file")
    os.utime(stray, (long_ago, long_ago))

    outcome = {}

    def maintain_while_paused(phase: str) -> None:
        if phase != "written":
            return
        in_flight = {str(p) for p in (data_dir / "tiering").rglob("*.parquet") if p.stat().st_mtime > long_ago + 60}
        assert in_flight, "the paused round has written its files"
        outcome["expired"] = expire_snapshots(tiered.lake(), older_than=datetime.now(UTC) + timedelta(seconds=1))
        outcome["removed"] = set(remove_orphan_files(tiered.lake(), min_age=timedelta(hours=1)))
        outcome["in_flight"] = in_flight

    tiered.insert(25)
    result = tiered.round(observe=maintain_while_paused)

    assert result.outcome == "tiered" and result.metrics.rows == 25
    assert outcome["expired"].expired > 0
    removed = outcome["removed"]
    assert str(stray) in removed and len(removed) == 16  # the stray file and the 15 replaced small files
    assert not removed & outcome["in_flight"]
    tiered.assert_lake_equals_hot()  # every current file is still there
    table = tiered.table()
    assert tiered.lake().committed().end_offsets == result.end_offsets
    assert all(Path(f.file_path.removeprefix("file://")).exists() for f in live_data_files(table))


def test_orphan_removal_deletes_the_metadata_of_expired_snapshots_and_keeps_what_the_table_reaches(
    tmp_path, catalog_properties
):
    tiered = Tiered(tmp_path, catalog_properties)
    tiered.insert(10)
    tiered.round()
    with tiered.table().transaction() as tx:  # a short metadata log, so old metadata files drop out of it
        tx.set_properties({"write.metadata.previous-versions-max": "3"})
    for _ in range(12):
        tiered.insert(10)
        tiered.round()
    expire_snapshots(tiered.lake(), older_than=datetime.now(UTC) + timedelta(seconds=1))
    metadata_dir = Path(tiered.table().location().removeprefix("file://")) / "metadata"
    long_ago = time.time() - 3 * 3600
    for path in metadata_dir.iterdir():  # everything so far is old enough to be an orphan candidate
        os.utime(path, (long_ago, long_ago))
    before = {str(p) for p in metadata_dir.iterdir()}

    table = tiered.table()  # what the table reaches, read with pyiceberg alone
    reached = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snapshot in table.snapshots():
        reached.add(snapshot.manifest_list)
        reached.update(m.manifest_path for m in snapshot.manifests(table.io))
    reached = {p.removeprefix("file://") for p in reached}
    assert reached < before and len(table.metadata.metadata_log) == 3

    removed = set(remove_orphan_files(tiered.lake(), min_age=timedelta(hours=1)))

    assert removed == before - reached  # the expired snapshots' manifests and lists, the metadata files out of the log
    assert {str(p) for p in metadata_dir.iterdir()} == reached
    tiered.assert_lake_equals_hot()
    for snapshot in tiered.table().snapshots():  # every snapshot left can still be read
        tiered.table().scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    tiered.insert(7)
    assert tiered.round().metrics.rows == 7  # the next round commits on the pruned metadata
    tiered.assert_lake_equals_hot()
