"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

The UI plugin is not listed here: Airflow reads a provider's ``plugins`` only with ``[core]
lazy_discover_providers = False``, so it is registered through the ``airflow.plugins`` entry point instead
(``pyproject.toml``), which Airflow always reads.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering import __version__

#: The provider's options in Airflow's configuration, section ``[tiering]``.
_CONFIG: dict[str, Any] = {
    "tiering": {
        "description": "The tiering provider's settings that are not a table's (a table's are in its spec).",
        "options": {
            "status_namespace": {
                "description": (
                    "Namespace of the status table every catalog of tiered tables gets: "
                    "<namespace>.lake_tiering_status, one row per tiered table, refreshed at the end of every "
                    "tiering DAG run and on a reset or trigger; and <namespace>.lake_tiering_history, one row "
                    "per round. Empty: neither table."
                ),
                "version_added": "0.1.0",
                "type": "string",
                "example": "sys",
                "default": "sys",
            },
            "history_retention_days": {
                "description": (
                    "Days a round's row is kept in <namespace>.lake_tiering_history, the history table beside "
                    "the status table (one row per round, appended by the table's task). 0: kept for ever."
                ),
                "version_added": "0.1.0",
                "type": "float",
                "example": "90",
                "default": "30",
            },
            "preload_round_modules": {
                "description": (
                    "Whether the scheduler of a LocalExecutor imports the modules a tiering round imports (pyiceberg, "
                    "pyarrow, pandas, this provider, the installed hot stores' drivers) before it starts its "
                    "workers, so that each task process, forked from a worker, finds them imported instead of "
                    "importing them again. Costs the scheduler about a second of CPU at its start and the memory "
                    "of those modules."
                ),
                "version_added": "0.1.0",
                "type": "boolean",
                "example": "False",
                "default": "True",
            },
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-tiering",
        "name": "Tiering",
        "description": (
            "Tier hot tables (PostgreSQL, MariaDB/MySQL, SQLite) and landing zones of files (JSON lines, CSV, "
            "Parquet) into Apache Iceberg with PySpark, exactly once, one Airflow task per table; with lake "
            "maintenance (compaction, snapshot expiry, orphan files)."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Tiering",
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Tiering",
                "python-modules": [
                    "airflow_provider_tiering.hooks.tiering",
                    "airflow_provider_tiering.hooks.iceberg_catalog",
                    "airflow_provider_tiering.hooks.asset_state",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Tiering",
                "python-modules": [
                    "airflow_provider_tiering.operators.tier_table",
                    "airflow_provider_tiering.operators.maintain_table",
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
        "config": _CONFIG,
        # No connection type: the Iceberg catalog is Airflow's Iceberg provider's ``iceberg`` connection (a
        # dependency), read as its hook reads it (``hooks/connections.py: catalog_config``).
    }
