"""Primary-key tables merged by cursor: after every round the lake holds exactly the hot table's non-deleted rows,
one per key (real SQLite and PostgreSQL, real pyiceberg; the lake is read back with pyiceberg only)."""

from __future__ import annotations

import time

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import FencedError, MergeKeyUnusable
from airflow_provider_tiering.core.maintenance import CompactionResult
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.round_result import RoundOutcome
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableStatus
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.lake.live_files import live_data_files, live_delete_files
from airflow_provider_tiering.sources.registry import build_source
from testbed.crash_round import crash_round
from testbed.lake_check import files_named, unreferenced_data_files
from testbed.mutable_tables import (
    MutableHot,
    assert_lake_equals_live_rows,
    assert_lake_equals_live_rows_in_files,
    mariadb_mutable,
    postgres_mutable,
    sqlite_mutable,
)
from testbed.rounds import lake_of

MB = 1024 * 1024


def merge_spec(name: str, *, key: list[str] | None = None, lake: dict | None = None, **extra) -> dict:
    merge: dict = {"soft_delete_column": "deleted_at"}
    if key is not None:
        merge["primary_key"] = key
    return {
        "name": name,
        "source": {"conn_id": "unused", "table": name, "cursor_column": "version"},
        "lake": {"namespace": "it", "table": name, **(lake or {})},
        "merge": merge,
        **extra,
    }


def snapshot_count(catalog_properties, name: str) -> int:
    return len(load_catalog("default", **catalog_properties).load_table(("it", name)).snapshots())


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "mariadb"])
def test_random_changes_over_rounds_leave_one_latest_row_per_key(
    kind, tmp_path, catalog_properties, local_writer, spark_writer, request
):
    name = f"merged_{kind}"
    if kind == "sqlite":
        # (tenant, id): a composite key, taken from the hot table's own primary key.
        hot: MutableHot = sqlite_mutable(tmp_path / "hot.db", name, composite_key=True, seed=11)
        spec = TableSpec.parse(merge_spec(name))
        expected_key = ["tenant", "id"]
    elif kind == "mariadb":
        # (tenant, id) from information_schema.KEY_COLUMN_USAGE.
        hot = mariadb_mutable(request.getfixturevalue("mariadb_server").url, name, composite_key=True, seed=13)
        spec = TableSpec.parse(merge_spec(name))
        expected_key = ["tenant", "id"]
    else:
        hot = postgres_mutable(request.getfixturevalue("pg_server").dsn, name, seed=12)
        spec = TableSpec.parse(
            merge_spec(name, key=["id"], lake={"namespace": "it", "table": name, "partition_by": ["bucket(4, id)"]})
        )
        expected_key = ["id"]
    hot.create()
    hot.insert(400)
    state_store = JsonFileStateStore(tmp_path / "state.json")

    def tier(writer=local_writer, round_spec=spec):
        result = run_round(
            round_spec, hot.source(round_spec.source), lake_of(round_spec, catalog_properties), writer, state_store
        )
        assert result.outcome is RoundOutcome.TIERED
        return result

    first = tier()
    assert first.metrics.rows == 400
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    schema = table.schema()
    assert sorted(schema.find_column_name(i) for i in schema.identifier_field_ids) == sorted(expected_key)
    assert all(schema.find_field(c).required for c in expected_key)

    for number in range(6):
        snapshots = snapshot_count(catalog_properties, name)
        changes = hot.random_changes(inserts=30, updates=40, deletes=15, undeletes=6)
        result = tier()
        assert result.end_offsets == {"cursor": hot.version}, changes
        assert snapshot_count(catalog_properties, name) == snapshots + 1  # one snapshot per round
        assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
        table = load_catalog("default", **catalog_properties).load_table(("it", name))
        assert all(f.content == 1 for f in live_delete_files(table)), f"round {number} wrote equality deletes"
        summary = table.current_snapshot().summary
        assert summary["tiering.epoch"] == str(result.epoch)
        assert summary["tiering.start-offsets"] != summary["tiering.end-offsets"]

    # A round of several splits: Spark tasks write the changed rows, the task process merges them.
    hot.random_changes(inserts=300, updates=60, deletes=20, undeletes=5)
    many_splits = TableSpec.parse(
        {**merge_spec(name, key=expected_key), "lake": spec.lake.model_dump(), "target_rows_per_split": 50}
    )
    result = tier(spark_writer, many_splits)
    if kind == "postgres":  # SQLite and MariaDB read a round as one split (one snapshot); Spark still writes it
        assert result.metrics.splits > 1
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []

    # Rounds of new keys only commit their files as written (a merge writes the files holding changed keys again
    # together: one file so far); compaction rewrites the merged table's files (it has no delete files); merging
    # goes on afterwards.
    for _ in range(2):
        hot.insert(40)
        assert tier().metrics.merge.files_rewritten == 0
    compacted = compact(
        lake_of(spec, catalog_properties),
        spark_writer,
        target_file_bytes=128 * MB,
        small_file_bytes=8 * MB,
        max_small_files=2,
        table_name=name,
    )
    assert compacted.outcome is CompactionResult.COMPACTED, compacted
    assert compacted.files_after < compacted.files_before
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
    hot.random_changes(inserts=10, updates=20, deletes=5, undeletes=3)
    tier()
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))


@pytest.mark.parametrize("fraction", [0.0, 0.5], ids=["copy-on-write", "merge-on-read"])
def test_a_merge_round_touches_only_the_files_holding_its_keys(tmp_path, catalog_properties, local_writer, fraction):
    """Ten rounds of inserts leave ten files; updating 200 rows of one of them (1% of its rows) rewrites that one file
    only, copy-on-write, or, by default, keeps every file and deletes those rows by position, in one delete file
    that names that file alone; the lake equals the table either way. Also measures one merge round."""
    name = f"pruned_{int(fraction * 10)}"
    hot = sqlite_mutable(tmp_path / "hot.db", name)
    hot.create()
    spec = TableSpec.parse(merge_spec(name, lake={"copy_on_write_fraction": fraction}))
    state_store = JsonFileStateStore(tmp_path / "state.json")

    def tier():
        return run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, state_store)

    for _ in range(10):
        hot.insert(2000)
        tier()
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    before = {f.file_path for f in live_data_files(table)}
    assert len(before) == 10
    third = {f.file_path for f in live_data_files(table) if f.record_count == 2000}
    for key in [(0, i) for i in range(4001, 4201)]:  # 200 rows of the third round's file
        hot.update(key)
    started = time.monotonic()
    result = tier()
    elapsed = time.monotonic() - started
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    after = {f.file_path for f in live_data_files(table)}
    assert result.metrics.rows == 200
    merged = result.metrics.merge
    assert merged is not None
    if fraction == 0:
        assert len(before - after) == 1 and len(after - before) == 2  # the third file rewritten, the updates added
        assert not live_delete_files(table) and merged.files_given_deletes == 0
    else:
        assert before < after and len(after - before) == 1  # only the updates added
        (delete_file,) = live_delete_files(table)
        assert files_named(table.io, delete_file) <= third and delete_file.record_count == 200
        assert (merged.files_rewritten, merged.files_given_deletes, merged.rows_deleted_by_position) == (0, 1, 200)
        assert table.current_snapshot().summary["total-position-deletes"] == "200"
    assert_lake_equals_live_rows_in_files(hot, catalog_properties, ("it", name))
    print(f"merge round of 200 changed rows into 20,000 in 10 files ({'deletes' if fraction else 'rewrite'}): "
          f"{elapsed:.2f}s")  # fmt: skip


def test_a_merge_rewrites_its_files_at_the_tables_target_size(tmp_path, catalog_properties, local_writer, pg_server):
    """The files a merge rewrites are cut at ``target_file_size_mb``, as every other file the table's rounds write."""
    import psycopg

    name = "merge_target_size"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, version bigint NOT NULL, pad text)")
        conn.execute(
            f"INSERT INTO {name} SELECT g, g, md5(g::text) || md5((g * 7)::text) || md5((g * 13)::text) "
            "FROM generate_series(1, 60000) g"
        )
    connection = ConnectionInfo.from_uri(pg_server.dsn)
    store = JsonFileStateStore(tmp_path / "state.json")

    def tier(target_mb: int) -> None:
        spec = TableSpec.parse(
            {
                "name": name,
                "source": {"conn_id": "unused", "table": name, "cursor_column": "version"},
                "lake": {"namespace": "it", "table": name, "copy_on_write_fraction": 0},  # rewrites only
                "merge": {"primary_key": ["id"]},
                "target_file_size_mb": target_mb,
            }
        )
        run_round(spec, build_source(spec.source, connection), lake_of(spec, catalog_properties), local_writer, store)

    tier(128)
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    (whole,) = live_data_files(table)
    assert whole.file_size_in_bytes > 2 * MB  # one file, larger than the target below
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {name} SET version = 60001, pad = 'changed' WHERE id = 30000")
    tier(1)
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    rewritten = [f for f in live_data_files(table) if f.record_count > 1]
    # Cut once past the target, a row group of at most the target at a time: at most about twice the target each.
    assert len(rewritten) >= 2 and all(f.file_size_in_bytes <= 2.2 * MB for f in rewritten), [
        f.file_size_in_bytes for f in rewritten
    ]
    assert sum(f.record_count for f in live_data_files(table)) == 60000


def test_stale_merge_attempt_is_fenced_and_commits_nothing(tmp_path, catalog_properties, local_writer):
    name = "fenced_merge"
    hot = sqlite_mutable(tmp_path / "hot.db", name, seed=3)
    hot.create()
    hot.insert(500)
    spec = TableSpec.parse(merge_spec(name))
    state_store = JsonFileStateStore(tmp_path / "state.json")

    def round_of(**options):
        return run_round(
            spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, state_store, **options
        )

    round_of()
    hot.random_changes(inserts=20, updates=50, deletes=10, undeletes=0)
    newer: dict[str, object] = {}

    def newer_round_first(phase: str) -> None:
        # The stale attempt has written its rows; a newer attempt merges more changes before it commits.
        if phase == "written" and not newer:
            hot.random_changes(inserts=5, updates=20, deletes=5, undeletes=3)
            newer["result"] = round_of()
            newer["snapshot"] = (
                load_catalog("default", **catalog_properties).load_table(("it", name)).current_snapshot()
            )

    with pytest.raises(FencedError, match="nothing was committed"):
        round_of(observe=newer_round_first)
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    assert table.current_snapshot().snapshot_id == newer["snapshot"].snapshot_id
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []  # the stale attempt's files are gone
    state = state_store.load()
    assert state.status is TableStatus.TIERED and state.committed.snapshot_id == newer["snapshot"].snapshot_id


@pytest.mark.parametrize("kill_at", ["written", "swap"])
def test_merge_round_killed_before_its_commit_leaves_the_lake_unchanged(
    kill_at, tmp_path, catalog_properties, spark_writer
):
    """SIGKILL after the changed rows are written ("written"), or inside the commit with the rewrites of the lake's
    files written too ("swap"): the lake is unchanged, and the next round converges and deletes the dead files."""
    name = "crashy_merge"
    hot = sqlite_mutable(tmp_path / "hot.db", name, seed=5)
    hot.create()
    hot.insert(3000)
    spec_data = merge_spec(name)
    spec = TableSpec.parse(spec_data)
    state_store = JsonFileStateStore(tmp_path / "state.json")
    first = run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), spark_writer, state_store)
    hot.random_changes(inserts=100, updates=300, deletes=50, undeletes=0)

    crashed = crash_round(tmp_path, catalog_properties, kill_at, spec_data)
    assert crashed.returncode == -9, f"not killed: {crashed.returncode}\n{crashed.stdout}\n{crashed.stderr[-3000:]}"
    assert f"phase {kill_at}" in crashed.stdout
    table = load_catalog("default", **catalog_properties).load_table(("it", name))
    assert table.current_snapshot().snapshot_id == first.snapshot_id
    dead_files = unreferenced_data_files(catalog_properties, ("it", name))
    assert dead_files, "expected the dead attempt's files"
    if kill_at == "swap":  # the merge's own files: position deletes (300 updates of 3,000 rows: no file rewritten)
        assert any("/merge-0/deletes/" in f for f in dead_files), dead_files

    hot.random_changes(inserts=10, updates=10, deletes=5, undeletes=5)
    recovered = run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), spark_writer, state_store)
    assert recovered.outcome is RoundOutcome.TIERED and recovered.epoch == first.epoch + 2
    assert recovered.start_offsets == first.end_offsets
    assert_lake_equals_live_rows(hot, catalog_properties, ("it", name))
    assert unreferenced_data_files(catalog_properties, ("it", name)) == []
    assert "ended without recording" in state_store.load().last_error


def test_merge_key_the_hot_table_cannot_give_fails_the_first_round_without_retry(
    tmp_path, catalog_properties, local_writer
):
    hot = sqlite_mutable(tmp_path / "hot.db", "keyless")
    hot.create(primary_key=False)
    hot.insert(10)
    spec = TableSpec.parse(merge_spec("keyless"))
    state_store = JsonFileStateStore(tmp_path / "state.json")
    with pytest.raises(MergeKeyUnusable, match="has no primary key to merge by: declare merge.primary_key"):
        run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, state_store)
    state = state_store.load()
    assert state.quarantined_since is not None and state.next_retry_at is None

    nullable = sqlite_mutable(tmp_path / "nullable.db", "nullable")
    nullable.create(primary_key=False, nullable_key=True)
    spec = TableSpec.parse(merge_spec("nullable", key=["id"]))
    with pytest.raises(MergeKeyUnusable, match=r"merge key column\(s\) \['id'\] are nullable"):
        run_round(
            spec,
            nullable.source(spec.source),
            lake_of(spec, catalog_properties),
            local_writer,
            JsonFileStateStore(tmp_path / "nullable.json"),
        )
    assert not load_catalog("default", **catalog_properties).table_exists(("it", "nullable"))


def test_a_keyless_mariadb_table_fails_the_first_round_asking_for_a_merge_key(
    tmp_path, catalog_properties, local_writer, mariadb_server
):
    """MariaDB reads its key from information_schema (as eviction does): no key is the merge's error, not
    eviction's."""
    hot = mariadb_mutable(mariadb_server.url, "keyless_maria")
    hot.create(primary_key=False)
    hot.insert(10)
    spec = TableSpec.parse(merge_spec("keyless_maria"))
    state_store = JsonFileStateStore(tmp_path / "state.json")
    with pytest.raises(MergeKeyUnusable, match="has no primary key to merge by: declare merge.primary_key"):
        run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, state_store)
    state = state_store.load()
    assert state.quarantined_since is not None and state.next_retry_at is None


def test_declaring_a_key_on_a_table_tiered_without_one_is_refused(tmp_path, catalog_properties, local_writer):
    hot = sqlite_mutable(tmp_path / "hot.db", "was_append")
    hot.create()
    hot.insert(10)
    append = merge_spec("was_append")
    del append["merge"]
    state_store = JsonFileStateStore(tmp_path / "state.json")
    spec = TableSpec.parse(append)
    run_round(spec, hot.source(spec.source), lake_of(spec, catalog_properties), local_writer, state_store)
    merged = TableSpec.parse(merge_spec("was_append"))
    with pytest.raises(MergeKeyUnusable, match="holds rows keyed by nothing"):
        run_round(merged, hot.source(merged.source), lake_of(merged, catalog_properties), local_writer, state_store)
