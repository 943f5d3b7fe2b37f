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
from testbed.rounds import catalog, lake_of

pytestmark = [pytest.mark.integration]

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
