"""Every tiered table's status and history, and a quarantine reset.

The tables are the tiering group's assets in Airflow's metadata database (``status/assets.py``); their state
documents are read and written through Airflow's configured state backend (``[state_store] backend``), so a custom
backend is honoured (``status/reads.py``, ``status/reset.py``). One record of a table's status
(``status/records.py``) is what the REST API, the CLI and the Tiering page show. For processes that may use the
database: the CLI, the API server's plugin, scripts. Task code reads state through the execution API instead
(``context["asset_state_store"]``). Callers that act for a user pass ``readable``, which keeps only the assets that
user may read (the plugin asks Airflow's auth manager).
"""

from airflow_provider_tiering.status.assets import (
    ASSET_GROUP,
    ReadableFilter,
    TieredAsset,
    matching_assets,
    tiered_assets,
    unknown_table,
)
from airflow_provider_tiering.status.reads import (
    get_tiering_status,
    known_tables,
    list_tiering_statuses,
    session_scope,
    tiering_data_ages,
    tiering_history,
)
from airflow_provider_tiering.status.records import (
    DataAgeRound,
    DataAges,
    MaintenanceRecord,
    TableStatusRecord,
    TieringRound,
)
from airflow_provider_tiering.status.reset import reset_table
from airflow_provider_tiering.status.view import TieringStatus

__all__ = [
    "ASSET_GROUP",
    "DataAgeRound",
    "DataAges",
    "MaintenanceRecord",
    "ReadableFilter",
    "TableStatusRecord",
    "TieredAsset",
    "TieringRound",
    "TieringStatus",
    "get_tiering_status",
    "known_tables",
    "list_tiering_statuses",
    "matching_assets",
    "reset_table",
    "session_scope",
    "tiering_data_ages",
    "tiered_assets",
    "tiering_history",
    "unknown_table",
]
