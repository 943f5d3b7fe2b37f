from __future__ import annotations

import pytest

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec import TableSpec, parse_table_specs


def spec(**overrides):
    data = {
        "name": "orders",
        "source": {"conn_id": "hot", "table": "orders", "cursor_column": "id"},
        "lake": {"namespace": "sales", "table": "orders"},
    }
    data.update(overrides)
    return data


def test_valid_spec_has_defaults():
    parsed = TableSpec.parse(spec())
    assert parsed.lake.catalog_conn_id == "iceberg_default"
    assert parsed.spark.conn_id == "spark_default"
    assert parsed.asset_name == "tiering/sales/orders"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"source": {"conn_id": "hot", "table": "orders; DROP TABLE x", "cursor_column": "id"}}, "source.table"),
        ({"source": {"conn_id": "hot", "table": "orders", "cursor_column": 'id"'}}, "source.cursor_column"),
        ({"source": {"conn_id": "hot", "table": "orders"}}, "source.cursor_column"),
        ({"lake": {"namespace": "sales", "table": "orders", "partition_by": ["a b"]}}, "lake.partition_by"),
        ({"freshness_seconds": 0}, "freshness_seconds"),
        ({"freshness_seconds": -5}, "freshness_seconds"),
        ({"freshness_seconds": float("inf")}, "freshness_seconds"),
        ({"maintenance": {"orphan_min_age_seconds": 60}}, "maintenance.orphan_min_age_seconds"),
        ({"maintenance": {"max_small_files": 0}}, "maintenance.max_small_files"),
        ({"maintenance": {"snapshot_retention_seconds": float("nan")}}, "maintenance.snapshot_retention_seconds"),
        ({"maintenance": {"vacuum": True}}, "maintenance.vacuum"),
        ({"max_rows_per_round": 0}, "max_rows_per_round"),
        ({"colour": "blue"}, "colour"),
        ({"name": "bad name!"}, "name"),
    ],
)
def test_invalid_spec_names_table_and_field(overrides, field):
    with pytest.raises(InvalidTableSpec) as err:
        TableSpec.parse(spec(**overrides))
    message = str(err.value)
    assert "'orders'" in message or "'bad name!'" in message
    assert f"field '{field}" in message


def test_cursor_must_be_among_selected_columns():
    with pytest.raises(InvalidTableSpec, match="cursor_column 'id' must be one of columns"):
        TableSpec.parse(spec(source={"conn_id": "h", "table": "t", "cursor_column": "id", "columns": ["a"]}))


def test_duplicate_table_names_are_rejected():
    with pytest.raises(InvalidTableSpec, match="declared more than once"):
        parse_table_specs([spec(), spec(lake={"namespace": "x", "table": "y"})])


def test_two_tables_into_one_lake_table_are_rejected():
    with pytest.raises(InvalidTableSpec, match="already the target of table 'orders'"):
        parse_table_specs([spec(), spec(name="orders_copy")])


def test_tables_load_from_yaml_and_errors_name_the_file(tmp_path):
    from airflow_provider_tiering.core.spec import load_table_specs

    good = tmp_path / "tables.yaml"
    good.write_text(
        "tables:\n"
        "  - name: orders\n"
        "    source: {conn_id: hot, table: orders, cursor_column: id}\n"
        "    lake: {namespace: sales, table: orders}\n"
    )
    assert [s.name for s in load_table_specs(good)] == ["orders"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: orders\n  source: {conn_id: hot, table: orders}\n  lake: {namespace: s, table: o}\n")
    with pytest.raises(InvalidTableSpec, match=r"bad.yaml: table 'orders': field 'source.cursor_column'"):
        load_table_specs(bad)


def test_a_relative_yaml_path_that_is_not_there_says_it_is_read_from_the_working_directory(tmp_path, monkeypatch):
    from airflow_provider_tiering.core.spec import load_table_specs

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidTableSpec, match=r"dags/tables.yaml: cannot read .* working directory, .*__file__"):
        load_table_specs("dags/tables.yaml")
    missing_absolute = tmp_path / "nowhere.yaml"
    with pytest.raises(InvalidTableSpec, match="cannot read the table list") as refused:
        load_table_specs(missing_absolute)
    assert "working directory" not in str(refused.value)


def test_a_dag_of_200_tables_from_yaml_parses_quickly(tmp_path):
    import time

    from airflow_provider_tiering.dag_factory import build_tiering_dag

    lines = ["tables:"]
    for i in range(200):
        lines += [
            f"  - name: t{i:03d}",
            f"    source: {{conn_id: hot, table: t{i:03d}, cursor_column: id}}",
            f"    lake: {{namespace: many, table: t{i:03d}}}",
        ]
    path = tmp_path / "tables.yaml"
    path.write_text("\n".join(lines))
    started = time.perf_counter()
    dag = build_tiering_dag("many", path)
    elapsed = time.perf_counter() - started
    assert len(dag.tasks) == 401  # a tier and a maintenance task per table, one summary
    assert dag.get_task("t199").downstream_task_ids == {"t199.maintain", "tiering_summary"}
    assert dag.get_task("t199.maintain").downstream_task_ids == {"tiering_summary"}
    assert elapsed < 10, f"building a 200-table DAG took {elapsed:.1f}s"


def test_maintenance_tasks_follow_each_tier_task_and_only_the_summary_follows_them():
    from airflow_provider_tiering.dag_factory import build_tiering_dag

    tables = [spec(), spec(name="events", lake={"namespace": "s", "table": "e"}, maintenance={"enabled": False})]
    dag = build_tiering_dag("m", tables)
    assert {t.task_id for t in dag.tasks} == {"orders", "orders.maintain", "events", "tiering_summary"}
    maintain = dag.get_task("orders.maintain")
    assert maintain.trigger_rule == "all_done" and maintain.upstream_task_ids == {"orders"}
    assert maintain.outlets == [] and [a.name for a in maintain.inlets] == ["tiering/sales/orders"]
    summary = dag.get_task("tiering_summary")
    assert summary.table_task_ids == ["orders", "events"] and summary.maintenance_task_ids == ["orders.maintain"]

    waiting = build_tiering_dag("w", [spec()], wait_until_due=True)
    assert {t.task_id for t in waiting.tasks} == {"orders.due", "orders.tier", "orders.maintain", "tiering_summary"}
    assert waiting.get_task("orders.maintain").upstream_task_ids == {"orders.tier"}


def test_maintenance_on_a_schedule_of_its_own():
    from airflow_provider_tiering.dag_factory import build_maintenance_dag, build_tiering_dag

    tables = [spec(), spec(name="events", lake={"namespace": "s", "table": "e"}, maintenance={"enabled": False})]
    assert {t.task_id for t in build_tiering_dag("t", tables, maintenance=False).tasks} == {
        "orders",
        "events",
        "tiering_summary",
    }
    nightly = build_maintenance_dag("m", tables, schedule="@daily")
    assert [t.task_id for t in nightly.tasks] == ["orders.maintain"] and not nightly.get_task(
        "orders.maintain"
    ).upstream_task_ids


def member(name: str, stream: object = "db", kind: str = "postgres_cdc", conn_id: str = "hot", **options: object):
    return {"name": name, "source": {"kind": kind, "conn_id": conn_id, "table": name, "stream": stream},
            "lake": {"namespace": "sales", "table": name}, **options}  # fmt: skip


GROUP = {"name": "db", "conn_id": "hot", "change_log": {"namespace": "sales"}}


def test_a_stream_group_is_declared_once_and_named_by_its_tables():
    from airflow_provider_tiering.core.spec import declare

    found = declare(
        [member("orders"), member("items"), spec(name="log", lake={"namespace": "sales", "table": "log"})], [GROUP]
    )
    assert [s.source.stream_group() for s in found.tables[:2]] == [found.streams["db"]] * 2
    assert found.tables[2].source.stream_group() is None
    assert found.streams["db"].slot() == "tiering_group_db" and found.streams["db"].change_log_table == "db_changes"
    unused = declare([spec()], [GROUP])  # a group no table names keeps its reader: its tables leave its log
    assert list(unused.streams) == ["db"]


@pytest.mark.parametrize(
    ("tables", "streams", "message"),
    [
        ([member("orders", stream="nope")], [GROUP], "field 'source.stream': no stream 'nope' is declared"),
        ([member("orders", conn_id="other")], [GROUP], "reads connection 'hot', not this table's 'other'"),
        (
            [member("orders", lake={"namespace": "s", "table": "o", "catalog_conn_id": "c2"})],
            [GROUP],
            "a group's tables and its change log share one catalog",
        ),
        (
            [member("orders", eviction={"enabled": True, "age_column": "ts"})],
            [GROUP],
            "eviction is not supported for a table of a stream group",
        ),
        ([member("orders"), member("items", kind="mysql_cdc")], [GROUP], "one group is one database's log"),
        ([member("orders")], [GROUP, GROUP], "stream 'db': field 'name': declared more than once"),
        ([member("db")], [GROUP], "stream 'db': field 'name': a table of that name is declared too"),
        ([member("orders")], [{**GROUP, "read_every_seconds": 0}], "stream 'db': field 'read_every_seconds'"),
    ],
)
def test_a_bad_stream_group_fails_the_parse_naming_the_field(tables, streams, message):
    from airflow_provider_tiering.core.spec import declare

    with pytest.raises(InvalidTableSpec, match=message.replace("(", r"\(").replace(")", r"\)")):
        declare(tables, streams)


def test_a_yaml_file_declares_its_stream_groups_beside_its_tables(tmp_path):
    from airflow_provider_tiering.core.spec import declare

    path = tmp_path / "tables.yaml"
    path.write_text(
        "streams:\n  - {name: db, conn_id: hot, change_log: {namespace: sales}}\n"
        "tables:\n  - {name: orders, source: {kind: postgres_cdc, conn_id: hot, table: orders, stream: db},"
        " lake: {namespace: sales, table: orders}}\n"
    )
    found = declare(path)
    assert found.tables[0].source.stream_group() == found.streams["db"]


def test_a_stream_groups_reader_runs_before_its_tables_or_on_a_clock_of_its_own():
    from datetime import timedelta

    from airflow_provider_tiering.dag_factory import build_table_dags, build_tiering_dag

    tables = [member("orders", freshness_seconds=60), member("items", freshness_seconds=20),
              spec(name="log", lake={"namespace": "sales", "table": "log"}, freshness_seconds=60)]  # fmt: skip
    dag = build_tiering_dag("one", tables, streams=[GROUP], maintenance=False)
    reader = dag.get_task("db.read_changes")
    assert reader.downstream_task_ids == {"orders", "items", "tiering_summary"}
    assert dag.get_task("orders").trigger_rule == "all_done", "a failed read leaves the log's changes to apply"
    assert dag.get_task("log").upstream_task_ids == set()
    assert [a.name for a in reader.outlets] == ["tiering-stream/sales/db_changes"]
    assert "tiering-stream/sales/db_changes" in [a.name for a in dag.get_task("orders").inlets]
    assert reader.priority_weight > dag.get_task("orders").priority_weight

    dags = build_table_dags("own", tables, streams=[{**GROUP, "read_every_seconds": 15}])
    assert set(dags) == {"own", "own.db", "own.orders", "own.items", "own.log", "own_maintenance"}
    assert dags["own.db"].timetable.every == timedelta(seconds=15) and dags["own.db"].max_active_runs == 1
    # A table of the group runs every freshness less the reader's interval (at least half its freshness): its data
    # age waits for the reader, then for its round. A table on its own stream runs every freshness.
    every = {name: dags[f"own.{name}"].timetable.every.total_seconds() for name in ("orders", "items", "log")}
    assert every == {"orders": 45.0, "items": 10.0, "log": 60.0}
    assert len({dags[f"own.{name}"].timetable.phase for name in ("orders", "log")}) == 2, "each at its own phase"
    (read,) = dags["own.db"].tasks
    assert [t.name for t in read.tables] == ["orders", "items"]
    summary = dags["own"].get_task("tiering_summary")
    assert "tiering-stream/sales/db_changes" in [a.name for a in summary.inlets]
