"""The hot table changes shape or identity: the lake follows it or refuses, never diverges (``core/follow_shape.py``).

Real PostgreSQL 15 (``wal_level=logical``), MariaDB and SQLite; rounds written by the test process (the local
writer); the lake read back with pyiceberg and with DuckDB's Iceberg reader, and compared with the hot table row for
row (by key where there is one), by content hash and by null counts. A writer thread keeps inserting (and, for tables
whose rows change, updating and deleting) rows before, during and after each change; it is paused only for the
round whose lake is compared.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog

from airflow_provider_tiering.core.errors import (
    AmbiguousColumnChange,
    HotTableReplaced,
    NotRetryable,
    SchemaConflict,
    TableTruncated,
)
from airflow_provider_tiering.core.round_result import RoundOutcome, RoundResult
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state_store import JsonFileStateStore
from airflow_provider_tiering.core.table_task import TableTask, TaskEnd
from airflow_provider_tiering.sources.registry import build_source
from testbed.lake_check import assert_lake_equals_rows, digest, lake_rows
from testbed.rounds import round_parts
from testbed.shape_tables import MariaDBShapeTable, PostgresShapeTable, ShapeTable, SqliteShapeTable, Writer

NAMESPACE = "shape"
#: Changes each store and mode follows, in the order a table goes through them (the lake is compared after each).
FOLLOWED = {
    ("postgres", "append"): ["add_constant", "add_now", "add_plain", "rename", "drop", "promote", "drop_and_add",
                             "truncate_same"],
    ("postgres", "merge"): ["add_constant", "add_now", "add_plain", "rename", "drop", "promote", "add_volatile",
                            "promote_using", "drop_and_add", "add_then_fill", "truncate_same", "truncate_other"],
    ("postgres", "change_stream"): ["add_constant", "add_now", "add_plain", "rename", "drop", "promote",
                                    "add_volatile", "promote_using", "drop_and_add", "add_then_fill",
                                    "rename_and_rewrite"],
    ("mariadb", "append"): ["add_constant", "add_now", "add_plain", "rename", "drop", "promote"],
    ("mariadb", "merge"): ["add_constant", "add_now", "add_plain", "rename", "drop", "promote", "add_volatile",
                           "truncate_other", "recreate"],
    ("sqlite", "append"): ["add_constant", "add_plain", "rename", "drop"],
    ("sqlite", "merge"): ["add_constant", "add_plain", "rename", "drop", "recreate"],
}  # fmt: skip
#: Changes a store and mode refuses, with the error and words its message must hold (the change and a way out).
REFUSED = [
    ("postgres", "append", "add_volatile", SchemaConflict, ["'u'", "value of its own", "merge"]),
    ("postgres", "append", "promote_using", SchemaConflict, ["'q'", "other values", "drop lake table"]),
    ("postgres", "append", "add_then_fill", SchemaConflict, ["'filled'", "value of its own"]),
    ("postgres", "append", "retype", SchemaConflict, ["'q'", "cannot be written", "drop lake table"]),
    ("postgres", "append", "recreate", HotTableReplaced, ["dropped and created again", "--adopt-hot-table"]),
    ("postgres", "append", "truncate_other", HotTableReplaced, ["truncated", "--adopt-hot-table"]),
    ("postgres", "merge", "retype", SchemaConflict, ["'q'", "cannot be written"]),
    ("postgres", "merge", "recreate", HotTableReplaced, ["dropped and created again", "--adopt-hot-table"]),
    ("postgres", "change_stream", "retype", SchemaConflict, ["'q'", "cannot be written"]),
    ("postgres", "change_stream", "recreate", HotTableReplaced, ["dropped and created again", "--adopt-hot-table"]),
    ("postgres", "change_stream", "truncate_other", TableTruncated, ["truncated", "--adopt-hot-table"]),
    ("mariadb", "append", "add_volatile", SchemaConflict, ["'u'", "value of its own"]),
    ("mariadb", "append", "retype", SchemaConflict, ["'q'", "cannot be written"]),
    ("mariadb", "append", "recreate", HotTableReplaced, ["differ from the lake's", "--adopt-hot-table"]),
    ("mariadb", "append", "rename", AmbiguousColumnChange, ["['b']", "['b2']", "source.renamed_columns"]),
    ("mariadb", "merge", "retype", SchemaConflict, ["'q'", "cannot be written"]),
    ("sqlite", "append", "rename", AmbiguousColumnChange, ["['b']", "['b2']", "source.dropped_columns"]),
    ("sqlite", "append", "recreate", HotTableReplaced, ["--adopt-hot-table"]),
    ("sqlite", "merge", "rename", AmbiguousColumnChange, ["['b']", "['b2']", "source.renamed_columns"]),
]


def _spec(store: str, mode: str, table: str, *, declare_rename: bool = True, **lake: object) -> TableSpec:
    if mode == "change_stream":
        source: dict[str, object] = {"kind": "postgres_cdc", "conn_id": "hot", "table": table}
    else:
        source = {"conn_id": "hot", "table": table, "cursor_column": "id" if mode == "append" else "ver"}
        source["max_watermark_wait_seconds"] = 5
        if store != "postgres" and declare_rename:
            source["renamed_columns"] = {"b": "b2"}  # these stores keep no column ids: a rename is declared
    document: dict[str, object] = {
        "name": table,
        "source": source,
        "lake": {"namespace": NAMESPACE, "table": table, **lake},
    }
    if mode == "merge":
        document["merge"] = {"primary_key": ["id"]}
    return TableSpec.parse(document)


@pytest.fixture
def make_table(request, tmp_path):
    made: list[ShapeTable] = []

    def make(store: str, name: str) -> ShapeTable:
        if store == "postgres":
            table: ShapeTable = PostgresShapeTable(request.getfixturevalue("pg_server").dsn, name)
        elif store == "mariadb":
            table = MariaDBShapeTable(request.getfixturevalue("mariadb_server").url, name)
        else:
            table = SqliteShapeTable(tmp_path / "hot.db", name)
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()


class Rounds:
    """A table's rounds, as its task would run them (the builder's parts, state in a JSON file)."""

    def __init__(
        self, spec: TableSpec, hot: ShapeTable, catalog_properties, writer, tmp_path: Path, *, reuse: bool = False
    ) -> None:
        self.spec, self.hot, self.catalog_properties, self.writer = spec, hot, catalog_properties, writer
        self.store = JsonFileStateStore(tmp_path / f"{spec.name}.json")
        #: ``reuse``: one set of parts runs every round (as a long-lived worker or a hook would keep them).
        self.parts = round_parts(spec, hot, catalog_properties, writer=writer) if reuse else None

    def __call__(self) -> RoundResult:
        parts = self.parts or round_parts(self.spec, self.hot, self.catalog_properties, writer=self.writer)
        return parts.run(self.store)

    @property
    def identifier(self) -> tuple[str, str]:
        return (NAMESPACE, self.spec.lake.table)

    def snapshot_id(self) -> int | None:
        table = load_catalog("default", **self.catalog_properties).load_table(self.identifier)
        snapshot = table.current_snapshot()
        return None if snapshot is None else snapshot.snapshot_id


def assert_lake_equals_hot(rounds: Rounds, *, by_key: bool) -> None:
    """The lake holds the hot table's rows in its current columns (``testbed.lake_check.assert_lake_equals_rows``)."""
    columns = rounds.hot.columns()
    assert_lake_equals_rows(
        rounds.catalog_properties, rounds.identifier, columns, rounds.hot.rows(columns), by_key=by_key
    )


def _until_settled(rounds: Rounds) -> None:
    """Rounds until one finds nothing to tier (a capped or held-back round leaves some for the next)."""
    for _ in range(5):
        if rounds().outcome is RoundOutcome.NOTHING_TO_TIER:
            return
    raise AssertionError("the table kept having rows to tier with its writer paused")


@pytest.mark.parametrize(("store", "mode"), list(FOLLOWED), ids=[f"{s}-{m}" for s, m in FOLLOWED])
def test_the_lake_follows_each_change_with_a_writer_running(
    store, mode, make_table, catalog_properties, local_writer, tmp_path
):
    name = f"follow_{store}_{mode}"[:40]
    hot = make_table(store, name)
    hot.create(120)
    rounds = Rounds(_spec(store, mode, name), hot, catalog_properties, local_writer, tmp_path)
    by_key = mode != "append"
    assert rounds().outcome is RoundOutcome.TIERED
    with Writer(hot, updates=by_key, deletes=mode == "change_stream") as writer:
        for change in FOLLOWED[(store, mode)]:
            rounds()  # before the change, the writer running
            hot.change(change)
            rounds()  # during: the change applied, the writer still running
            writer.pause()
            _until_settled(rounds)
            try:
                assert_lake_equals_hot(rounds, by_key=by_key)
            except AssertionError as exc:
                raise AssertionError(f"after {change}: {exc}") from exc
            state = rounds.store.load()
            assert state.quarantined_since is None and state.consecutive_failures == 0, state.last_error
            writer.resume()
        assert writer.steps > 0
    _until_settled(rounds)
    assert_lake_equals_hot(rounds, by_key=by_key)
    schema = load_catalog("default", **catalog_properties).load_table(rounds.identifier).schema()
    if "rename" in FOLLOWED[(store, mode)]:  # the same field, renamed: its values kept (compared above)
        assert schema.find_field("b2").field_id == 3
    if "drop" in FOLLOWED[(store, mode)]:  # a dropped column stays in the lake, optional
        assert not schema.find_field("f").required


REUSED = [("sqlite", "merge"), ("postgres", "change_stream")]


@pytest.mark.parametrize(("store", "mode"), REUSED, ids=[f"{s}-{m}" for s, m in REUSED])
def test_parts_reused_round_after_round_follow_each_change(
    store, mode, make_table, catalog_properties, local_writer, tmp_path
):
    """Each round reads the hot table afresh, even on the source an earlier round used (``Source.for_round``). A
    source that kept the columns its first round read followed no change after: the lake never gained an added
    column (rows without it read as tiered), or every round failed its check before the commit."""
    name = f"reuse_{store}_{mode}"[:40]
    hot = make_table(store, name)
    hot.create(60)
    rounds = Rounds(_spec(store, mode, name), hot, catalog_properties, local_writer, tmp_path, reuse=True)
    assert rounds().outcome is RoundOutcome.TIERED
    for change in ("add_constant", "rename", "drop"):
        hot.change(change)
        _until_settled(rounds)
        assert_lake_equals_hot(rounds, by_key=True)


@pytest.mark.parametrize(
    ("store", "mode", "change", "error", "words"),
    REFUSED,
    ids=[f"{s}-{m}-{c}" for s, m, c, _, _ in REFUSED],
)
def test_a_change_the_lake_cannot_follow_is_refused_loudly_and_commits_nothing(
    store, mode, change, error, words, make_table, catalog_properties, local_writer, tmp_path
):
    name = f"refuse_{store}_{mode}_{change}"[:50]
    hot = make_table(store, name)
    hot.create(80)
    spec = _spec(store, mode, name, declare_rename=False)
    rounds = Rounds(spec, hot, catalog_properties, local_writer, tmp_path)
    assert rounds().outcome is RoundOutcome.TIERED
    with Writer(hot, updates=mode != "append", deletes=mode == "change_stream") as writer:
        rounds()
        hot.change(change)
        time.sleep(0.1)  # the writer writes after the change too
        writer.pause()
    before = rounds.snapshot_id()
    with pytest.raises(error) as refused:
        rounds()
    assert isinstance(refused.value, NotRetryable)
    message = str(refused.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    assert rounds.snapshot_id() == before  # nothing committed
    state = rounds.store.load()
    assert state.quarantined_since is not None and state.next_retry_at is None  # no retry: the next round refuses
    assert words[0] in state.last_error or words[1] in state.last_error


@pytest.mark.parametrize("mode", ["append", "merge", "change_stream"])
def test_a_recreated_table_adopted_keeps_the_lake_rows_and_tiers_the_new_table_from_its_start(
    mode, make_table, catalog_properties, local_writer, tmp_path
):
    """The second way out of a re-created table: reset with ``adopt_hot_table``; the next round reads the new table
    from its start, and the lake keeps the old table's rows (by key, the new table's version wins)."""
    name = f"adopt_{mode}"
    hot = make_table("postgres", name)
    hot.create(60)
    rounds = Rounds(_spec("postgres", mode, name), hot, catalog_properties, local_writer, tmp_path)
    rounds()
    old = {row[0]: row for row in hot.rows(["id", "b"])}
    hot.change("recreate")  # ids 1..40 again, other values
    with pytest.raises(HotTableReplaced):
        rounds()
    state = rounds.store.load()
    state.reset(state.last_error_time, adopt_hot_table=True)
    rounds.store.save(state)
    assert rounds().outcome is RoundOutcome.TIERED
    hot.insert_full(5)  # the new table goes on: its ids beyond what it had
    _until_settled(rounds)
    found = lake_rows(catalog_properties, rounds.identifier, ["id", "b"])
    new = {row[0]: row for row in hot.rows(["id", "b"])}
    if mode == "append":  # history and the new table, side by side
        assert digest(found) == digest([*old.values(), *new.values()])
    else:  # by key: the new table's rows, and the old ones it does not have
        assert digest(found) == digest([*new.values(), *(row for key, row in old.items() if key not in new)])
    state = rounds.store.load()
    assert state.adopt_hot_table is None and state.replaced_hot_table is None


def test_dropping_the_lake_table_loads_a_recreated_table_again(make_table, catalog_properties, local_writer, tmp_path):
    """The first way out: drop the lake table and reset; the next round loads the new table whole."""
    hot = make_table("postgres", "reload_after_drop")
    hot.create(50)
    rounds = Rounds(_spec("postgres", "change_stream", "reload_after_drop"), hot, catalog_properties, local_writer,
                    tmp_path)  # fmt: skip
    rounds()
    hot.change("recreate")
    with pytest.raises(HotTableReplaced):
        rounds()
    load_catalog("default", **catalog_properties).drop_table(rounds.identifier)
    state = rounds.store.load()
    state.reset(state.last_error_time)
    rounds.store.save(state)
    assert rounds().outcome is RoundOutcome.TIERED
    with Writer(hot, updates=True, deletes=True) as writer:
        rounds()
        writer.pause()
    _until_settled(rounds)
    assert_lake_equals_hot(rounds, by_key=True)


def test_added_defaults_backfilled_into_the_files(make_table, catalog_properties, local_writer, tmp_path):
    """With ``lake.backfill_added_columns`` the constant of an added column is written into every file (a reader
    that ignores Iceberg's initial defaults reads it too), committed before the round's own rows."""
    import pyarrow.parquet as pq

    hot = make_table("postgres", "backfilled")
    hot.create(100)
    rounds = Rounds(
        _spec("postgres", "append", "backfilled", backfill_added_columns=True),
        hot,
        catalog_properties,
        local_writer,
        tmp_path,
    )
    rounds()
    hot.change("add_constant")
    hot.insert_full(10)
    assert rounds().outcome is RoundOutcome.TIERED
    table = load_catalog("default", **catalog_properties).load_table(rounds.identifier)
    operations = [s.summary.get("tiering.operation") for s in table.snapshots() if s.summary is not None]
    assert "backfill" in operations
    for task in table.scan().plan_files():
        values = pq.read_table(task.file.file_path.removeprefix("file://")).column("c").to_pylist()
        assert values and all(v == 7 for v in values), task.file.file_path  # in the file itself
    assert "tiering.pending-backfill" not in {k for k, v in table.properties.items() if v not in ("", "[]")}
    assert_lake_equals_hot(rounds, by_key=False)


def test_a_rename_of_a_million_tiered_rows_is_metadata_only(pg_server, catalog_properties, local_writer, tmp_path):
    """A rename of a column holding 1M tiered rows changes the lake's schema only: no data file is written or
    removed, and the rows read their values under the new name (timed: printed)."""
    hot = PostgresShapeTable(pg_server.dsn, "renamed_million")
    try:
        hot.execute('DROP TABLE IF EXISTS "renamed_million"')
        hot.execute(hot.create_sql())
        hot.execute(
            "INSERT INTO renamed_million SELECT g, g, 'b' || g, g % 1000, g / 4.0 FROM generate_series(1, 1000000) g"
        )
        rounds = Rounds(_spec("postgres", "append", "renamed_million"), hot, catalog_properties, local_writer, tmp_path)
        assert rounds().metrics.rows == 1_000_000
        table = load_catalog("default", **catalog_properties).load_table(rounds.identifier)
        files = {task.file.file_path for task in table.scan().plan_files()}
        field_id = table.schema().find_field("b").field_id
        hot.change("rename")
        started = time.monotonic()
        assert rounds().outcome is RoundOutcome.NOTHING_TO_TIER
        took = time.monotonic() - started
        table = load_catalog("default", **catalog_properties).load_table(rounds.identifier)
        assert {task.file.file_path for task in table.scan().plan_files()} == files  # no file written or removed
        assert table.schema().find_field("b2").field_id == field_id
        renamed = table.scan(selected_fields=("b2",)).to_arrow().column("b2")
        assert renamed.null_count == 0 and len(renamed) == 1_000_000
        print(f"rename of a column of 1,000,000 tiered rows: round {took:.2f} s, {len(files)} data files untouched")
    finally:
        hot.close()


def test_an_append_table_changed_in_place_shows_the_count_and_alerts_past_its_bound(
    pg_server, catalog_properties, local_writer, tmp_path
):
    """Rows of an append table updated and deleted behind the lake's back (the lake keeps their first versions):
    counted from PostgreSQL's statistics since the round before, shown, and alerted past ``changed_rows_alert``."""
    import psycopg

    from airflow_provider_tiering.core.in_place_changes import in_place_alert

    hot = PostgresShapeTable(pg_server.dsn, "changed_in_place")
    try:
        hot.create(100)
        document = {
            "name": "changed_in_place",
            "source": {"conn_id": "hot", "table": "changed_in_place", "cursor_column": "id", "changed_rows_alert": 20},
            "lake": {"namespace": NAMESPACE, "table": "changed_in_place"},
        }
        spec = TableSpec.parse(document)
        rounds = Rounds(spec, hot, catalog_properties, local_writer, tmp_path)
        rounds()
        with psycopg.connect(pg_server.dsn, autocommit=True) as other:  # its statistics are published on closing
            other.execute("UPDATE changed_in_place SET b = b || '!' WHERE id <= 30")
            other.execute("DELETE FROM changed_in_place WHERE id > 95")
        hot.insert_full(3)
        assert rounds().metrics.rows == 3
        state = rounds.store.load()
        assert state.in_place_changes is not None
        assert state.in_place_changes["updated_since_last_round"] == 30
        assert state.in_place_changes["deleted_since_last_round"] == 5
        alert = in_place_alert(spec, state)
        assert alert is not None and "30 of its hot rows were updated and 5 deleted" in alert
        assert rounds().outcome is RoundOutcome.NOTHING_TO_TIER  # nothing changed since: no alert
        assert in_place_alert(spec, rounds.store.load()) is None
    finally:
        hot.close()


class _Builder:
    """What a table's task builds its source and round with (``TieringHook`` in Airflow), over a test hot table."""

    def __init__(self, spec: TableSpec, hot: ShapeTable, catalog_properties, writer) -> None:
        self.spec, self.hot, self.catalog_properties, self.writer = spec, hot, catalog_properties, writer

    def get_source(self):
        return build_source(self.spec.source, self.hot.connection())

    def build_round(self, source=None):
        return round_parts(self.spec, self.hot, self.catalog_properties, writer=self.writer, source=source)

    def secrets(self) -> list[str]:
        return []


PROBED = [
    ("postgres", "append", "rename"),
    ("postgres", "append", "drop"),
    ("postgres", "append", "recreate"),
    ("postgres", "merge", "add_plain"),
    ("postgres", "merge", "recreate"),
    ("postgres", "change_stream", "rename"),
    ("postgres", "change_stream", "drop"),
    ("postgres", "change_stream", "recreate"),
    ("mariadb", "append", "rename"),
    ("mariadb", "merge", "add_plain"),
    ("sqlite", "append", "drop"),
    ("sqlite", "merge", "rename"),
]


@pytest.mark.parametrize(("store", "mode", "change"), PROBED, ids=[f"{s}-{m}-{c}" for s, m, c in PROBED])
def test_a_due_table_reshaped_or_recreated_with_nothing_new_runs_its_round_from_the_probe(
    store, mode, change, make_table, catalog_properties, local_writer, tmp_path
):
    """A table's task, as the operator runs it (decision, probe, round): the hot table changes shape or is dropped
    and created again, and no row arrives beyond the lake's offsets. The probe compares the table's identity and shape
    with the last round's record, so the round runs: it follows the change (the lake's schema has it) or refuses it
    (the task fails without retries). A probe that looked only for new rows skipped it as "nothing new"."""
    name = f"probed_{store}_{mode}_{change}"[:50]
    hot = make_table(store, name)
    hot.create(40)
    spec = _spec(store, mode, name)
    store_file = JsonFileStateStore(tmp_path / f"{name}.json")
    now = [datetime.now(UTC)]

    def task() -> TableTask:
        builder = _Builder(spec, hot, catalog_properties, local_writer)
        return TableTask(spec, store_file, builder, lambda exc: timedelta(seconds=1), clock=lambda: now[0])

    assert task().run().end is TaskEnd.SUCCEEDED
    now[0] += timedelta(seconds=spec.freshness_seconds + 1)
    assert task().run().end is TaskEnd.SKIPPED  # nothing new, nothing changed: the probe says so
    with hot.lock:
        hot.script(hot.change_sql(change))  # DDL only: no row beyond the offsets
    now[0] += timedelta(seconds=spec.freshness_seconds + 1)
    outcome = task().run()
    if change == "recreate":
        assert outcome.end is TaskEnd.FAILED and isinstance(outcome.cause, NotRetryable), outcome.reason
        assert "--adopt-hot-table" in outcome.reason
        return
    assert outcome.end is not TaskEnd.SKIPPED or "nothing to tier; the lake is at" in outcome.reason, outcome.reason
    assert outcome.result is not None, "the round did not run"
    lake_columns = load_catalog("default", **catalog_properties).load_table((NAMESPACE, name)).schema()
    current = set(hot.columns())
    assert current <= {f.name for f in lake_columns.fields}, (current, lake_columns)
    now[0] += timedelta(seconds=spec.freshness_seconds + 1)
    again = task().run()  # the round recorded the new shape: nothing new again, without a round
    assert again.end is TaskEnd.SKIPPED and again.result is None, again.reason
