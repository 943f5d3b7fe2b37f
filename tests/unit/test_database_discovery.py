"""A declared database: its declaration's validation, its tables matched against the rules, and which run now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_tiering.core.database_spec import DatabaseSpec
from airflow_provider_tiering.core.database_state import (
    DatabaseState,
    Discovery,
    dispatched_runs,
    plan_runs,
    still_running,
)
from airflow_provider_tiering.core.discovery import ColumnKind, HotColumn, HotTable, Listing, discover
from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus

INT, TIME, TEXT = ColumnKind.INTEGER, ColumnKind.TEMPORAL, ColumnKind.OTHER
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def table(name: str, *columns: tuple[str, ColumnKind], key: tuple[str, ...] = (), fp: str | None = "f1") -> HotTable:
    return HotTable("public", name, tuple(HotColumn(c, k, c in key) for c, k in columns), key, fp)


def database(**fields: object) -> DatabaseSpec:
    return DatabaseSpec.parse({"name": "shop", "conn_id": "pg", "lake": {"namespace": "shop"}, **fields})


ORDERS = table("orders", ("id", INT), ("updated_at", TIME), ("note", TEXT), key=("id",))
EVENTS = table("events", ("id", INT), ("payload", TEXT))
NOTES = table("notes", ("body", TEXT))
TMP = table("tmp_load", ("id", INT))


def test_auto_mode_merges_keyed_tables_appends_the_others_and_skips_with_a_reason() -> None:
    found = discover(database(exclude=["tmp_*"]), Listing((ORDERS, EVENTS, NOTES, TMP)))
    orders, events = found.specs["public.orders"], found.specs["public.events"]
    assert orders.merge is not None and orders.merge.primary_key == ("id",)
    assert orders.source.cursor() == "updated_at" and orders.lake.table == "orders"
    assert events.merge is None and events.source.cursor() == "id"
    assert "none of updated_at, id" in found.skipped["public.notes"]
    assert "tables.public.notes" in found.skipped["public.notes"]  # says where to name its cursor
    assert found.skipped["public.tmp_load"] == "excluded by the glob 'tmp_*'"
    assert set(found.fingerprints) == {"public.orders", "public.events", "public.notes", "public.tmp_load"}


def test_overrides_name_mode_cursor_key_lake_table_and_spec_fields() -> None:
    spec = database(
        table_defaults={"freshness_seconds": 120, "retries": 1},
        tables={
            "orders": {"mode": "append", "cursor_column": "id", "lake_table": "orders_log"},
            "public.events": {"spec": {"freshness_seconds": 30, "lake": {"partition_by": ["bucket(4, id)"]}}},
            "notes": {"skip": True},
        },
    )
    found = discover(spec, Listing((ORDERS, EVENTS, NOTES)))
    orders, events = found.specs["public.orders"], found.specs["public.events"]
    assert orders.merge is None and orders.lake.table == "orders_log" and orders.freshness_seconds == 120
    assert events.freshness_seconds == 30 and events.retries == 1 and events.lake.partition_by == ("bucket(4, id)",)
    assert found.skipped["public.notes"] == "tables.public.notes.skip is set"


def test_merge_mode_without_a_key_or_cursor_is_skipped_with_what_to_declare() -> None:
    found = discover(database(mode="merge"), Listing((EVENTS, table("k", ("id", INT), key=("id",)))))
    assert found.skipped["public.events"] == (
        "merge needs a primary key and the table has none: declare tables.public.events.primary_key"
    )
    assert "tables.public.k.cursor_column" in found.skipped["public.k"]


def test_a_named_cursor_that_cannot_order_rows_is_a_reason() -> None:
    found = discover(database(tables={"events": {"cursor_column": "payload"}}), Listing((EVENTS,)))
    assert "neither an integer, a date nor a timestamp" in found.skipped["public.events"]


def test_tables_of_several_schemas_land_under_schema_prefixed_names() -> None:
    other = HotTable("sales", "orders", ORDERS.columns, ("id",), "f")
    found = discover(database(schemas=["public", "sales"], lake={"namespace": "shop", "table_prefix": "pg_"}),
                     Listing((ORDERS, other)))  # fmt: skip
    assert {s.lake.table for s in found.specs.values()} == {"pg_public_orders", "pg_sales_orders"}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"table_defaults": {"freshness_seconds": -1}}, "table_defaults: field 'freshness_seconds'"),
        ({"table_defaults": {"source": {}}}, "source are set by the database declaration"),
        ({"tables": {"orders": {"spec": {"lake": {"namespace": "x"}}}}}, "lake.namespace are set by"),
        ({"tables": {"orders": {"spec": {"retries": "many"}}}}, "tables.orders.spec: field 'retries'"),
        ({"include": []}, "include"),
        ({"probe_every_seconds": 1}, "probe_every_seconds"),
        ({"tables": {"orders": {"mode": "upsert"}}}, "tables.orders.mode"),
    ],
)
def test_a_bad_declaration_names_the_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidTableSpec, match="database 'shop'") as raised:
        database(**fields)
    assert named in str(raised.value)


def settled_state(at: datetime) -> TableState:
    return TableState("t", status=TableStatus.TIERED, last_tiered_time=at, caught_up_time=at)


def plan(previous: DatabaseState | None, listing: Listing, now: datetime, states: dict[str, TableState | None],
         **kw: object):  # type: ignore[no-untyped-def]  # fmt: skip
    asked: list[str] = []

    def state_of(name: str) -> TableState | None:
        asked.append(name)
        return states.get(name)

    found = discover(database(), listing)
    result = plan_runs(previous, "shop", found, now=now, probe_every=60, freshness=lambda n: 300.0,
                       state_of=state_of, **kw)  # type: ignore[arg-type]  # fmt: skip
    return result, asked


def test_new_tables_run_settled_unchanged_ones_start_nothing_changed_ones_run_when_due() -> None:
    first, _ = plan(None, Listing((ORDERS, EVENTS)), NOW, {})
    assert sorted(first.run) == ["public.events", "public.orders"]
    # Both ran and caught up after the probe: settled, unchanged -> idle; only the pending tables' states were read.
    later = NOW + timedelta(minutes=1)
    states = {"public.orders": settled_state(later), "public.events": settled_state(later)}
    second, asked = plan(first.state, Listing((ORDERS, EVENTS)), NOW + timedelta(minutes=2), states)
    assert second.run == [] and second.idle == 2 and sorted(asked) == ["public.events", "public.orders"]
    changed = table("orders", *((c.name, c.kind) for c in ORDERS.columns), key=("id",), fp="f2")
    third, asked = plan(second.state, Listing((changed, EVENTS)), NOW + timedelta(minutes=3), states)
    assert third.run == [] and third.waiting == 1 and asked == []  # changed, not due until 240 s after its last run
    fourth, _ = plan(third.state, Listing((changed, EVENTS)), NOW + timedelta(minutes=4), states)
    assert fourth.run == ["public.orders"] and fourth.idle == 1


@pytest.mark.parametrize(
    "state",
    [
        None,  # the task never ran
        TableState("t", status=TableStatus.FAILED, consecutive_failures=1),
        TableState("t", status=TableStatus.TIERED, caught_up_time=NOW - timedelta(seconds=1)),  # rows left behind
        TableState(
            "t", status=TableStatus.TIERED, caught_up_time=NOW + timedelta(seconds=5), watermark_candidate={"id": 5}
        ),  # fmt: skip
    ],
)
def test_a_run_that_did_not_settle_runs_again_whatever_the_fingerprint(state: TableState | None) -> None:
    first, _ = plan(None, Listing((ORDERS,)), NOW, {})
    again, _ = plan(first.state, Listing((ORDERS,)), NOW + timedelta(minutes=1), {"public.orders": state})
    assert again.run == ["public.orders"]


def test_a_quarantined_table_starts_no_task_until_reset() -> None:
    first, _ = plan(None, Listing((ORDERS,)), NOW, {})
    stuck = TableState("t", status=TableStatus.FAILED, consecutive_failures=5, quarantined_since=NOW)
    held, _ = plan(first.state, Listing((ORDERS,)), NOW + timedelta(minutes=1), {"public.orders": stuck})
    assert held.run == [] and held.quarantined == 1
    reset = TableState("t", status=TableStatus.PENDING)
    again, _ = plan(held.state, Listing((ORDERS,)), NOW + timedelta(minutes=2), {"public.orders": reset})
    assert again.run == ["public.orders"]


def test_a_blind_listing_runs_every_due_table() -> None:
    first, _ = plan(None, Listing((ORDERS,)), NOW, {})
    blind = table("orders", *((c.name, c.kind) for c in ORDERS.columns), key=("id",), fp=None)
    settled_at = {"public.orders": settled_state(NOW + timedelta(seconds=30))}
    second, _ = plan(first.state, Listing((blind,)), NOW + timedelta(minutes=5), settled_at)
    assert second.run == ["public.orders"]


def test_dropped_tables_are_kept_with_their_lake_table_and_come_back_as_new() -> None:
    first, _ = plan(None, Listing((ORDERS, EVENTS)), NOW, {})
    second, _ = plan(first.state, Listing((EVENTS,)), NOW + timedelta(minutes=1), {})
    dropped = second.state.tables["public.orders"]
    assert dropped.discovery is Discovery.DROPPED and "shop.orders is kept" in (dropped.reason or "")
    third, _ = plan(second.state, Listing((ORDERS, EVENTS)), NOW + timedelta(minutes=2), {})
    assert "public.orders" in third.run and third.state.tables["public.orders"].discovery is Discovery.TIERED


def test_a_run_that_names_tables_runs_those_only() -> None:
    first, _ = plan(None, Listing((ORDERS, EVENTS)), NOW, {})
    settled = {n: settled_state(NOW + timedelta(seconds=9)) for n in ("public.orders", "public.events")}
    named, _ = plan(first.state, Listing((ORDERS, EVENTS)), NOW + timedelta(minutes=1), settled,
                    selected=["public.events"])  # fmt: skip
    assert named.run == ["public.events"]


def test_a_table_still_running_in_an_earlier_run_starts_no_second_task() -> None:
    first, _ = plan(None, Listing((ORDERS, EVENTS)), NOW, {}, run_id="r1")
    assert [(t.dispatched_run, t.dispatched_index) for t in map(first.state.tables.get, first.run)] == [
        ("r1", 0), ("r1", 1)]  # fmt: skip
    assert dispatched_runs(first.state, besides="r2") == {"r1": {0: first.run[0], 1: first.run[1]}}
    assert dispatched_runs(first.state, besides="r1") == {}
    flying = first.run[0]
    # r2 overlaps r1: the table whose task in r1 has not finished waits (its state not even read); the other, whose
    # task failed there, runs again in r2.
    failed = TableState("t", status=TableStatus.FAILED, consecutive_failures=1)
    second, asked = plan(first.state, Listing((ORDERS, EVENTS)), NOW + timedelta(seconds=30),
                         {first.run[1]: failed}, run_id="r2", in_flight={flying})  # fmt: skip
    assert second.run == [first.run[1]] and second.in_flight == 1 and asked == [first.run[1]]
    assert "in flight: its task in run r1" in (second.state.tables[flying].last_decision or "")
    assert second.state.tables[first.run[1]].dispatched_run == "r2"
    # Once it has finished (settled), it is a table like the others.
    settled = {flying: settled_state(NOW + timedelta(seconds=40))}
    third, _ = plan(second.state, Listing((ORDERS, EVENTS)), NOW + timedelta(minutes=1), settled, run_id="r3")
    assert flying not in third.run and third.in_flight == 0


def test_still_running_are_the_unfinished_instances_of_runs_still_known() -> None:
    earlier = {"r1": {0: "a", 1: "b", 2: "c"}, "r2": {0: "d"}, "gone": {0: "e"}}
    states = {"r1": {0: "success", 1: "up_for_retry"}, "r2": {}}  # c not expanded yet; r2 not expanded at all
    assert still_running(earlier, states) == {"b", "c", "d"}


def test_a_run_that_names_a_table_in_flight_runs_it() -> None:
    first, _ = plan(None, Listing((ORDERS,)), NOW, {}, run_id="r1")
    named, _ = plan(first.state, Listing((ORDERS,)), NOW + timedelta(seconds=5), {}, run_id="r2",
                    in_flight={"public.orders"}, selected=["public.orders"])  # fmt: skip
    assert named.run == ["public.orders"]


class FakeTaskInstance:
    """What ``tier_states`` asks of a task instance: the tier task's states, and whether a run is still going."""

    dag_id = "shop_tiering"

    def __init__(self, states: dict[str, dict[str, str | None]], going: set[str]) -> None:
        self.states, self.going = states, going

    def get_task_states(self, *, dag_id: str, task_ids: list[str], run_ids: list[str]) -> dict[str, dict[str, str]]:
        assert dag_id == self.dag_id and task_ids == ["tier"]
        return {run: dict(by_task) for run, by_task in self.states.items() if run in run_ids}  # type: ignore[misc]

    def get_dr_count(self, *, dag_id: str, run_ids: list[str], states: list[str]) -> int:
        assert states == ["queued", "running"]
        return sum(run in self.going for run in run_ids)


def test_tier_states_reads_map_indexes_and_tells_an_unexpanded_running_run_from_an_ended_one() -> None:
    from airflow_provider_tiering.operators.discover_tables import tier_states

    ti = FakeTaskInstance({"r1": {"tier_0": "success", "tier_12": "running", "tier_3": None}}, going={"r2"})
    assert tier_states(ti, ["r1", "r2", "r3"]) == {"r1": {0: "success", 12: "running", 3: None}, "r2": {}}


def test_a_plan_leaves_the_previous_document_as_it_was() -> None:
    first, _ = plan(None, Listing((ORDERS,)), NOW, {})
    before = first.state.to_json()
    settled_at = {"public.orders": settled_state(NOW + timedelta(seconds=5))}
    second, _ = plan(first.state, Listing((ORDERS,)), NOW + timedelta(minutes=1), settled_at)
    assert first.state.to_json() == before  # else the probe would think nothing changed and not save
    assert second.state.to_json() != before and second.state.tables["public.orders"].baseline == "f1"


def test_the_document_round_trips() -> None:
    first, _ = plan(None, Listing((ORDERS, EVENTS, NOTES)), NOW, {})
    assert DatabaseState.from_json(first.state.to_json()) == first.state
    assert first.state.counts() == {"tiered": 2, "skipped": 1, "dropped": 0}


def test_the_dag_maps_its_tier_task_over_what_discovery_returns_without_reading_the_hot_store() -> None:
    from airflow_provider_tiering.dag_factory import build_database_dag

    dag = build_database_dag("shop_dag", {"name": "shop", "conn_id": "no_such_connection", "lake": {"namespace": "s"},
                                          "table_defaults": {"retries": 4}})  # fmt: skip
    assert dag.task_ids == ["discover", "tier", "tiering_summary"]
    tier = dag.get_task("tier")
    assert tier.partial_kwargs["database"] == "shop" and tier.partial_kwargs["retries"] == 4  # type: ignore[attr-defined]
    assert [a.name for a in tier.partial_kwargs["outlets"]][0] == "tiering_database/shop"  # type: ignore[attr-defined]
    assert dag.get_task("tiering_summary").trigger_rule == "all_done"
    with pytest.raises(InvalidTableSpec, match="field 'lake.namespace'"):
        build_database_dag("bad", {"name": "shop", "conn_id": "pg", "lake": {}})


def test_change_stream_tables_join_the_databases_one_stream() -> None:
    spec = database(tables={"orders": {"mode": "change_stream"}, "events": {"mode": "change_stream"}})
    found = discover(spec, Listing((ORDERS, EVENTS), stream_kind="postgres_cdc"))
    orders = found.specs["public.orders"]
    group = orders.source.stream_group()
    assert orders.source.kind == "postgres_cdc" and group is not None and group.name == "shop"
    assert group.change_log.namespace == "shop" and group.read_every_seconds == spec.probe_every_seconds
    assert "needs a primary key" in found.skipped["public.events"]
    blind = discover(spec, Listing((ORDERS,)))  # SQLite: no change stream
    assert "no change stream" in blind.skipped["public.orders"]
    assert spec.may_stream() and not database().may_stream()
    with pytest.raises(InvalidTableSpec, match="field 'change_stream.stream': Value error, conn_id are set by"):
        database(change_stream={"stream": {"conn_id": "other"}})
