"""Reading across tiers: the lake snapshot plus the hot rows beyond its offsets is every written row exactly once,
between rounds, while rows are inserted, while a round commits, and after tiered rows left the hot store."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from airflow_provider_tiering.across_tiers import read_across_tiers
from airflow_provider_tiering.build import build_writer
from airflow_provider_tiering.core.round import run_round
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.lake.catalog import CatalogHandle
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.spark.session import SparkSettings
from testbed.hot_tables import COLUMNS, ConcurrentInserter, PostgresHot, SqliteHot
from testbed.lake_check import digest, view_rows
from testbed.pg_server import drop_table_slot
from testbed.rounds import catalog, lake_of

SPEC = TableSpec.parse(
    {
        "name": "across",
        "source": {"conn_id": "unused", "table": "across", "cursor_column": "id", "max_watermark_wait_seconds": 2},
        "lake": {"namespace": "it", "table": "across"},
    }
)


def test_the_view_holds_every_row_once_while_rows_arrive_and_rounds_commit(
    pg_server, tmp_path: Path, catalog_properties
) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create("across")
    hot.insert("across", 1, 500)
    source = hot.source(SPEC.source)
    lake = lake_of(SPEC, catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    writer_of_rounds = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)

    # Before the first round: everything is hot.
    before = read_across_tiers(source, lake)
    assert before.snapshot_id is None and digest(view_rows(before, COLUMNS)) == digest(hot.rows("across"))

    writer = ConcurrentInserter(pg_server.dsn, 501)
    writer.start()
    checks = 0
    try:
        for _ in range(6):
            run_round(SPEC, source, lake, writer_of_rounds, state)
            for _ in range(3):  # between rounds, with the writer inserting
                acknowledged = writer.acknowledged
                view = read_across_tiers(source, lake)
                ids = [r[0] for r in view_rows(view, COLUMNS)]
                assert len(ids) == len(set(ids)), "a row is in both tiers"
                assert set(range(1, acknowledged)) <= set(ids), "a committed row is missing"
                assert view.snapshot_id is not None and len(view.hot) < len(ids)
                checks += 1
        # While a round runs: its commit lands between the view's hot snapshot and its lake load.
        seen = []

        def read_during(phase: str) -> None:
            if phase in ("written", "committed"):
                acknowledged = writer.acknowledged
                seen.append((acknowledged, read_across_tiers(source, lake)))

        run_round(SPEC, source, lake, writer_of_rounds, state, observe=read_during)
        for acknowledged, view in seen:
            ids = [r[0] for r in view_rows(view, COLUMNS)]
            assert len(ids) == len(set(ids)) and set(range(1, acknowledged)) <= set(ids)
    finally:
        writer.stop.set()
        writer.join()
    final = read_across_tiers(source, lake)
    assert digest(view_rows(final, COLUMNS)) == digest(hot.rows("across"))  # content, not only ids
    assert checks == 18 and len(seen) == 2

    # Tiered rows leave the hot store (as eviction would): the view still holds every row once.
    committed = lake.committed().end_offsets["cursor"]
    everything = hot.rows("across")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        deleted = conn.execute("DELETE FROM across WHERE id <= %s", (committed,)).rowcount
    assert deleted > 0
    assert digest(view_rows(read_across_tiers(source, lake), COLUMNS)) == digest(everything)


class LakeLoadedAroundARound(IcebergLake):
    """Runs ``interfere`` once, right before or right after the view loads the lake table."""

    def __init__(self, catalog: CatalogHandle, interfere, after: bool) -> None:
        super().__init__(catalog, SPEC.lake.namespace, SPEC.lake.table)
        self.interfere, self.after = interfere, after

    def load_table(self):
        if not self.after and self.interfere:
            self.interfere, todo = None, self.interfere
            todo()
        table = super().load_table()
        if self.after and self.interfere:
            self.interfere, todo = None, self.interfere
            todo()
        return table


@pytest.mark.parametrize("after", [False, True], ids=["before-the-lake-loads", "after-the-lake-loads"])
def test_a_round_and_eviction_during_the_read_lose_and_double_nothing(
    pg_server, tmp_path: Path, catalog_properties, after: bool
) -> None:
    hot = PostgresHot(pg_server.dsn)
    hot.create("across")
    hot.insert("across", 1, 400)
    source = hot.source(SPEC.source)
    handle = catalog(catalog_properties).handle()
    state = JsonFileStateStore(tmp_path / "state.json")
    writer_of_rounds = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    run_round(SPEC, source, lake_of(SPEC, catalog_properties, catalog_handle=handle), writer_of_rounds, state)
    hot.insert("across", 401, 300)
    everything = hot.rows("across")

    def round_then_evict() -> None:
        result = run_round(
            SPEC, source, lake_of(SPEC, catalog_properties, catalog_handle=handle), writer_of_rounds, state
        )
        assert result.outcome == "tiered" and result.end_offsets == {"cursor": 700}
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            assert conn.execute("DELETE FROM across WHERE id <= 700").rowcount == 700

    lake = LakeLoadedAroundARound(handle, interfere=round_then_evict, after=after)
    view = read_across_tiers(source, lake)

    assert lake.interfere is None  # it ran
    assert view.committed_offsets == ({"cursor": 400} if after else {"cursor": 700})
    assert digest(view_rows(view, COLUMNS)) == digest(everything)


def test_the_view_as_a_spark_dataframe_and_on_sqlite(tmp_path: Path, catalog_properties, spark_writer) -> None:
    hot = SqliteHot(tmp_path / "hot.db")
    hot.create("across")
    hot.insert("across", 1, 300)
    source = hot.source(SPEC.source)
    lake = lake_of(SPEC, catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    run_round(SPEC, source, lake, spark_writer, state)
    hot.insert("across", 301, 40)

    view = read_across_tiers(source, lake)
    assert len(view.hot) == 40 and view.committed_offsets == {"cursor": 300}
    frame = view.to_spark(spark_writer.spark)
    spark_rows = [tuple(r[c] for c in COLUMNS) for r in frame.select(*COLUMNS).collect()]
    assert digest(spark_rows) == digest(view_rows(view, COLUMNS)) == digest(hot.rows("across"))


def _by_key(rows, key_columns, columns):
    from testbed.lake_check import _normal

    found = {}
    for row in rows:
        values = tuple(_normal(row[c]) for c in columns)
        key = tuple(row[c] for c in key_columns)
        assert key not in found, f"key {key} is in the view twice"
        found[key] = values
    return found


def test_a_merge_table_reads_the_latest_version_per_key(pg_server, tmp_path: Path, catalog_properties, spark_writer):
    """Lake rows whose key the hot tail has are replaced by the hot version; a soft-deleted hot row hides its key.
    Hard deletes and changed keys since the lake's round still show their lake row, until a reconciling round."""
    from testbed.mutable_tables import MUTABLE_COLUMNS, postgres_mutable

    name = "across_merge"
    spec = TableSpec.parse(
        {
            "name": name,
            "source": {"conn_id": "unused", "table": name, "cursor_column": "version"},
            "lake": {"namespace": "it", "table": name},
            "merge": {"soft_delete_column": "deleted_at", "reconcile_keys_every_seconds": 0},
        }
    )
    hot = postgres_mutable(pg_server.dsn, name, composite_key=True, seed=17)
    hot.create()
    hot.insert(200)
    source = hot.source(spec.source)
    lake = lake_of(spec, catalog_properties)
    state = JsonFileStateStore(tmp_path / "state.json")
    writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
    run_round(spec, source, lake, writer, state)
    stored = {(r[0], r[1]): r for r in hot.live_rows()}

    keys = hot.keys(deleted=False)
    for key in keys[:20]:
        hot.update(key)
    for key in keys[20:25]:
        hot.soft_delete(key)
    hot.insert(7)
    hot.hard_delete(keys[30])
    moved = hot.change_key(keys[31])
    hot.reinsert(keys[32])
    key_columns = ("tenant", "id")

    def expected_now():
        live = {(r[0], r[1]): r for r in hot.live_rows()}
        # Not known to the view: the hard-deleted key and the changed key's old key, from the lake.
        live[keys[30]] = stored[keys[30]]
        live[keys[31]] = stored[keys[31]]
        return _by_key([dict(zip(MUTABLE_COLUMNS, r)) for r in live.values()], key_columns, MUTABLE_COLUMNS)

    view = read_across_tiers(source, lake, soft_delete_column="deleted_at")
    assert view.merge_key == key_columns and view.hot.num_rows == 20 + 5 + 7 + 2
    arrow = _by_key(view.to_arrow().to_pylist(), key_columns, MUTABLE_COLUMNS)
    assert arrow == expected_now()
    assert moved in arrow and not set(keys[20:25]) & set(arrow)
    frame = view.to_spark(spark_writer.spark)
    spark_rows = _by_key([r.asDict() for r in frame.select(*MUTABLE_COLUMNS).collect()], key_columns, MUTABLE_COLUMNS)
    assert spark_rows == arrow

    # A reconciling round: the view is the hot table's live rows exactly.
    run_round(spec, source, lake, writer, state)
    view = read_across_tiers(source, lake, soft_delete_column="deleted_at")
    live = _by_key([dict(zip(MUTABLE_COLUMNS, r)) for r in hot.live_rows()], key_columns, MUTABLE_COLUMNS)
    assert _by_key(view.to_arrow().to_pylist(), key_columns, MUTABLE_COLUMNS) == live
    assert view.hot.num_rows == 0


def test_a_change_stream_table_reads_its_whole_hot_table_through_its_connections(
    pg_server, tmp_path: Path, catalog_properties, monkeypatch
) -> None:
    """``read_table_across_tiers`` of a ``postgres_cdc`` spec: the hot table in one snapshot (it holds every live
    row), nothing from the lake, with the changes the lake has yet to get (deletes, changed keys)."""
    import json

    from airflow_provider_tiering.across_tiers import read_table_across_tiers
    from airflow_provider_tiering.sources.registry import build_source
    from testbed.changing_table import COLUMNS as CDC_COLUMNS
    from testbed.changing_table import ChangingTable
    from testbed.tiering_env import pg_conn

    name = "across_cdc"
    data = {
        "name": name,
        "source": {"kind": "postgres_cdc", "conn_id": "hot_across_cdc", "table": name},
        "lake": {"namespace": "it", "table": name, "catalog_conn_id": "iceberg_across_cdc"},
    }
    spec = TableSpec.parse(data)
    monkeypatch.setenv("AIRFLOW_CONN_HOT_ACROSS_CDC", pg_conn(pg_server, pg_server.password))
    catalog_conn = json.dumps({"conn_type": "iceberg", "extra": {"name": "default", **catalog_properties}})
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_ACROSS_CDC", catalog_conn)
    hot = ChangingTable(pg_server.dsn, name, seed=3)
    try:
        hot.create()
        hot.insert(150)
        writer = build_writer(SparkSettings(master="spark://127.0.0.1:9"), local_single_split=True)
        run_round(
            spec,
            build_source(spec.source, hot.connection()),
            lake_of(spec, catalog_properties),
            writer,
            JsonFileStateStore(tmp_path / "state.json"),
        )
        hot.random_changes(60)  # updates, key updates, deletes, re-inserts: not tiered yet
        assert hot.counts["delete"] and hot.counts["key_update"], hot.counts
        view = read_table_across_tiers(data)
        assert view.snapshot_id is not None and view.lake_files == () and view.lake().num_rows == 0
        rows = view.to_arrow()
        found = {r["id"]: tuple(r[c] for c in CDC_COLUMNS) for r in rows.to_pylist()}
        assert len(found) == rows.num_rows  # one row per key
        expected = hot.hot_by_key()
        from testbed.changing_table import _normal_value

        normal = {k: tuple(_normal_value(v) for v in row) for k, row in found.items()}
        assert normal == expected
        assert digest(normal.values()) == digest(expected.values())
    finally:
        hot.close()
        drop_table_slot(pg_server.dsn, name)
