"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-tiering",
        "name": "Tiering",
        "description": "Tier hot-store tables (PostgreSQL, SQLite) into Apache Iceberg with PySpark, exactly once.",
        "versions": [__version__],
        "hooks": [{"integration-name": "Tiering", "python-modules": ["airflow_provider_tiering.hooks.tiering"]}],
        "operators": [
            {
                "integration-name": "Tiering",
                "python-modules": [
                    "airflow_provider_tiering.operators.tier_table",
                    "airflow_provider_tiering.operators.summary",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Tiering",
                "python-modules": [
                    "airflow_provider_tiering.sensors.table_due",
                    "airflow_provider_tiering.sensors.table_tiered",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Tiering",
                "python-modules": [
                    "airflow_provider_tiering.triggers.table_due",
                    "airflow_provider_tiering.triggers.table_tiered",
                ],
            }
        ],
        "cli": ["airflow_provider_tiering.cli.definition.get_tiering_cli_commands"],
        "connection-types": [
            {
                "connection-type": "iceberg",
                "hook-class-name": "airflow_provider_tiering.hooks.tiering.IcebergCatalogHook",
            }
        ],
    }
