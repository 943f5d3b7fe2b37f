"""``airflow tiering``: the trigger arguments as Airflow's real CLI parser reads them, and how a name that no tiered
table answers to is refused (with the closest names)."""

from __future__ import annotations

import pytest

from airflow_provider_tiering.core.errors import TableNotFound
from airflow_provider_tiering.status import TieredAsset, matching_assets, unknown_table

ASSETS = [
    TieredAsset(
        1, "tiering/sales/orders", "iceberg://iceberg_default/sales/orders", "orders", "sales", "orders", "d", "orders"
    ),
    TieredAsset(
        2, "tiering/eu/orders", "iceberg://iceberg_default/eu/orders", "orders_eu", "eu", "orders", "e", "orders_eu"
    ),
    TieredAsset(
        3,
        "tiering/crm/accounts",
        "iceberg://iceberg_default/crm/accounts",
        "accounts",
        "crm",
        "accounts",
        "d",
        "accounts",
    ),
]


def test_trigger_waits_an_hour_by_default_and_unpauses_only_when_asked() -> None:
    from airflow.cli.cli_parser import get_parser

    from airflow_provider_tiering.cli.definition import DEFAULT_WAIT_TIMEOUT

    parser = get_parser()
    args = parser.parse_args(["tiering", "trigger", "sales.orders", "--wait"])
    assert (args.tables, args.wait, args.timeout, args.unpause) == (["sales.orders"], True, DEFAULT_WAIT_TIMEOUT, False)
    assert DEFAULT_WAIT_TIMEOUT == 3600
    args = parser.parse_args(["tiering", "trigger", "orders", "accounts", "--wait", "--timeout", "0", "--unpause"])
    assert (args.tables, args.timeout, args.unpause) == (["orders", "accounts"], 0, True)


def test_names_a_table_answers_to() -> None:
    assert [a.id for a in matching_assets("orders", ASSETS)] == [1]
    assert [a.id for a in matching_assets("eu.orders", ASSETS)] == [2]
    assert [a.id for a in matching_assets("tiering/crm/accounts", ASSETS)] == [3]
    assert [a.id for a in matching_assets("iceberg://iceberg_default/sales/orders", ASSETS)] == [1]


def test_an_unknown_name_is_refused_with_the_closest_names() -> None:
    with pytest.raises(TableNotFound) as refused:
        matching_assets("ordrs", ASSETS)
    message = str(refused.value)
    assert message.startswith("unknown table 'ordrs': no DAG tiers a table of that name; did you mean 'orders'")
    assert "accounts" not in message
    assert str(unknown_table("zzz", ASSETS)) == "unknown table 'zzz': no DAG tiers a table of that name"
    assert "no tiered table is known yet" in str(unknown_table("orders", []))
