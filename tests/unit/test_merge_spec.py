"""``merge`` in a table spec: what it declares, and declarations refused at parse time naming the field."""

from __future__ import annotations

import pytest

from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.spec import TableSpec


def spec(merge, *, source=None, **overrides):
    data = {
        "name": "accounts",
        "source": source or {"conn_id": "hot", "table": "accounts", "cursor_column": "updated_at"},
        "lake": {"namespace": "crm", "table": "accounts"},
        "merge": merge,
    }
    data.update(overrides)
    return data


def test_merge_is_off_unless_declared():
    plain = spec(None)
    del plain["merge"]
    assert TableSpec.parse(plain).merge is None


def test_merge_with_a_declared_key_and_soft_delete_column():
    parsed = TableSpec.parse(spec({"primary_key": ["tenant", "id"], "soft_delete_column": "deleted_at"}))
    assert parsed.merge is not None
    assert parsed.merge.primary_key == ("tenant", "id")
    assert parsed.merge.soft_delete_column == "deleted_at"


def test_key_reconciliation_is_off_unless_a_period_is_declared():
    assert TableSpec.parse(spec({})).merge.reconcile_keys_every_seconds is None
    assert TableSpec.parse(spec({"reconcile_keys_every_seconds": 0})).merge.reconcile_keys_every_seconds == 0
    assert TableSpec.parse(spec({"reconcile_keys_every_seconds": 3600})).merge.reconcile_keys_every_seconds == 3600


def test_merge_without_a_key_takes_the_hot_tables_own_later():
    parsed = TableSpec.parse(spec({}))
    assert parsed.merge is not None and parsed.merge.primary_key is None and parsed.merge.soft_delete_column is None


@pytest.mark.parametrize(
    ("merge", "source_extra", "message"),
    [
        ({"primary_key": []}, {}, "field 'merge.primary_key': .*must not be empty"),
        ({"primary_key": ["id", "id"]}, {}, "field 'merge.primary_key': .*must not repeat"),
        ({"primary_key": ["id; drop"]}, {}, "field 'merge.primary_key.0': .*not a plain identifier"),
        ({"primary_key": ["id"], "soft_delete_column": "id"}, {}, "field 'merge': .*soft_delete_column 'id' must not"),
        ({"primary_key": ["id", "updated_at"]}, {}, "merge.primary_key must not hold the cursor column 'updated_at'"),
        ({"soft_delete_column": "updated_at"}, {}, "merge.soft_delete_column must not be the cursor column"),
        ({"primary_key": ["ref"]}, {"columns": ["id", "updated_at"]}, r"merge.primary_key \['ref'\] are not in"),
        (
            {"primary_key": ["id"], "soft_delete_column": "gone"},
            {"columns": ["id", "updated_at"]},
            "merge.soft_delete_column 'gone' is not in source.columns",
        ),
        ({"key": ["id"]}, {}, "field 'merge.key': Extra inputs are not permitted"),
        ({"reconcile_keys_every_seconds": -1}, {}, "field 'merge.reconcile_keys_every_seconds': .*greater than or"),
        ({"reconcile_keys_every_seconds": "often"}, {}, "field 'merge.reconcile_keys_every_seconds': .*valid number"),
    ],
)
def test_bad_merge_declarations_fail_at_parse_time_naming_the_field(merge, source_extra, message):
    source = {"conn_id": "hot", "table": "accounts", "cursor_column": "updated_at", **source_extra}
    with pytest.raises(InvalidTableSpec, match=f"table 'accounts': .*{message}"):
        TableSpec.parse(spec(merge, source=source))


def test_merge_is_refused_with_eviction():
    with pytest.raises(InvalidTableSpec, match="eviction is not supported with merge by cursor yet"):
        TableSpec.parse(spec({"primary_key": ["id"]}, eviction={"enabled": True}))


def test_merge_is_refused_for_a_landing_zone():
    landing = {"kind": "files", "path": "/landing/accounts", "format": "jsonl", "columns": {"id": "int64"}}
    with pytest.raises(InvalidTableSpec, match="merge needs a SQL table read by a cursor; a 'files' source"):
        TableSpec.parse(spec({"primary_key": ["id"]}, source=landing))


CDC_SOURCE = {"kind": "postgres_cdc", "conn_id": "hot", "table": "Accounts", "db_schema": "crm"}


def test_a_change_stream_table_names_its_slot_and_publication():
    parsed = TableSpec.parse(spec(None, source=CDC_SOURCE))
    assert parsed.source.streams_changes and parsed.source.cursor() is None
    assert parsed.source.slot() == parsed.source.publication()
    assert parsed.source.slot().startswith("tiering_crm_accounts_") and len(parsed.source.slot()) <= 63
    long = TableSpec.parse(spec(None, source={**CDC_SOURCE, "table": "t" * 63})).source.slot()
    assert len(long) == 63
    named = TableSpec.parse(spec(None, source={**CDC_SOURCE, "slot_name": "my_slot", "publication_name": "pub"}))
    assert (named.source.slot(), named.source.publication()) == ("my_slot", "pub")


@pytest.mark.parametrize(
    ("source", "extra", "field"),
    [
        ({**CDC_SOURCE, "slot_name": "Has-Dash"}, {}, "slot_name"),
        (CDC_SOURCE, {"merge": {"soft_delete_column": "gone"}}, "soft_delete_column"),
        (CDC_SOURCE, {"merge": {"reconcile_keys_every_seconds": 60}}, "reconcile_keys_every_seconds is for merge"),
        (CDC_SOURCE, {"eviction": {"enabled": True, "min_age_seconds": 60}}, "eviction"),
        ({**CDC_SOURCE, "max_retained_wal_mb": 0}, {}, "max_retained_wal_mb"),
    ],
)
def test_change_stream_declarations_refused_at_parse_time(source, extra, field):
    with pytest.raises(InvalidTableSpec, match=field):
        TableSpec.parse({**spec(None, source=source), **extra})


def test_eviction_on_a_change_stream_table_needs_an_age_column():
    with pytest.raises(InvalidTableSpec, match="eviction.age_column is required for a table without a cursor"):
        TableSpec.parse(spec(None, source=CDC_SOURCE, eviction={"enabled": True}))
    parsed = TableSpec.parse(
        spec({"primary_key": ["id"]}, source=CDC_SOURCE, eviction={"enabled": True, "age_column": "created_at"})
    )
    assert parsed.eviction.enabled and parsed.eviction.age_column == "created_at"
    with pytest.raises(InvalidTableSpec, match="eviction.age_column 'created_at' is not in source.columns"):
        TableSpec.parse(
            spec(
                None,
                source={**CDC_SOURCE, "columns": ["id", "name"]},
                eviction={"enabled": True, "age_column": "created_at"},
            )
        )
