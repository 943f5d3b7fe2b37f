"""The tables of declared databases as their discovery last listed them: tiered, skipped or dropped, with the reason,
read from Airflow's metadata database (as ``status/reads.py`` reads the tables' states)."""

from __future__ import annotations

from typing import Any

from airflow_provider_tiering.core.database_state import DATABASE_PROBE_KEY, DATABASE_STATE_KEY, DatabaseState
from airflow_provider_tiering.core.documents import iso_time
from airflow_provider_tiering.core.errors import TableNotFound
from airflow_provider_tiering.status.assets import ReadableFilter, TieredAsset, database_assets, json_value
from airflow_provider_tiering.status.reads import _stored_values, session_scope

COLUMNS = ("database", "table", "discovery", "mode", "lake", "reason", "since", "last_decision")


def list_database_tables(
    database: str | None = None,
    discovery: str | None = None,
    *,
    readable: ReadableFilter | None = None,
    session: Any | None = None,
) -> list[dict[str, Any]]:
    """Every table of every declared database (or of ``database``; of those ``readable`` keeps), sorted by database
    and table, optionally only those of one ``discovery`` (tiered, skipped, dropped), each with its reason and the
    database's last probe. TableNotFound when no declared database has that name."""
    with session_scope(session) as s:
        found = database_assets(s)
        if readable is not None:
            kept = {a.id for a in readable([_as_asset(d) for d in found])}
            found = [d for d in found if d[0] in kept]
        values = _stored_values([d[0] for d in found], s, (DATABASE_STATE_KEY, DATABASE_PROBE_KEY))
    records = []
    names = []
    for asset_id, _, _, dag_id in found:
        doc = values.get((asset_id, DATABASE_STATE_KEY))
        if doc is None:
            continue
        state = DatabaseState.from_json(json_value(doc))
        names.append(state.database)
        if database is not None and state.database != database:
            continue
        probe = json_value(values.get((asset_id, DATABASE_PROBE_KEY)))
        for table in sorted(state.tables.values(), key=lambda t: t.name):
            if discovery is not None and table.discovery.value != discovery.lower():
                continue
            records.append(
                {
                    "database": state.database, "table": table.name, "discovery": table.discovery.value,
                    "mode": table.mode, "lake": table.lake, "reason": table.reason, "since": iso_time(table.since),
                    "first_seen": iso_time(table.first_seen), "last_decision": table.last_decision, "dag_id": dag_id,
                    "probed_at": probe.get("at") if isinstance(probe, dict) else None,
                }
            )  # fmt: skip
    if database is not None and database not in names:
        raise TableNotFound(
            f"no declared database named {database!r} has been probed; declared: {', '.join(sorted(names)) or 'none'}"
        )
    return records


def _as_asset(found: tuple[int, str, str, str | None]) -> TieredAsset:
    """A database's asset in the form the readable filter takes (it asks Airflow's auth manager by asset)."""
    from airflow_provider_tiering.assets import DISCOVER_TASK_ID

    asset_id, name, uri, dag_id = found
    namespace = uri.removeprefix("iceberg://").split("/", 1)[-1]
    return TieredAsset(asset_id, name, uri, name, namespace, "", dag_id, DISCOVER_TASK_ID)
