"""A declared database in Airflow: its listing through the connection's lister, its document in its asset's state
store, and the probe that decides which of its tables run now."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_tiering.core.database_spec import DatabaseSpec
from airflow_provider_tiering.core.database_state import (
    DATABASE_PROBE_KEY,
    DATABASE_STATE_KEY,
    DatabaseState,
    Discovery,
    Plan,
    dispatched_runs,
    plan_runs,
    still_running,
    table_state_key,
)
from airflow_provider_tiering.core.discovery import Discovered, Listing, discover
from airflow_provider_tiering.core.errors import InvalidTableSpec
from airflow_provider_tiering.core.state import TableState, utcnow
from airflow_provider_tiering.hooks.asset_state import AssetStateStore


@dataclass(frozen=True)
class DatabaseProbe:
    """One probe of a declared database: what it listed, what the rules made of it, and what runs."""

    database: DatabaseSpec
    listing: Listing
    discovered: Discovered
    plan: Plan
    newly: dict[str, str]

    def to_run(self) -> list[dict[str, Any]]:
        """The specs of the tables to run, as JSON (a mapped task's arguments)."""
        return [self.discovered.specs[name].model_dump(mode="json", exclude_defaults=True) for name in self.plan.run]

    def streamed(self) -> list[dict[str, Any]]:
        """The specs of every tiered table in mode ``change_stream``, as JSON (the database's stream's members)."""
        found = self.discovered.specs.values()
        return [s.model_dump(mode="json", exclude_defaults=True) for s in found if s.source.streams_changes]

    def summary(self) -> dict[str, Any]:
        return {
            "listed": len(self.discovered.fingerprints), **self.plan.state.counts(), "run": len(self.plan.run),
            "idle": self.plan.idle, "waiting": self.plan.waiting, "quarantined": self.plan.quarantined,
            "in_flight": self.plan.in_flight,
            "query_seconds": round(self.listing.seconds, 4), "blind": self.listing.blind,
        }  # fmt: skip

    def report(self) -> list[str]:
        """The probe in a few lines for the task log: the counts, what changed since the last probe, what runs."""
        s = self.summary()
        lines = [
            f"database {self.database.name}: {s['listed']} table(s) listed in {s['query_seconds']:.3f} s: "
            f"{s['tiered']} tiered, {s['skipped']} skipped, {s['dropped']} dropped; {s['run']} run now, "
            f"{s['waiting']} changed and not due yet, {s['idle']} idle, {s['quarantined']} quarantined, "
            f"{s['in_flight']} still running in an earlier run"
        ]
        if self.listing.blind:
            lines.append(f"every table may have changed: {self.listing.blind}")
        lines += [f"{name}: {what}" for name, what in sorted(self.newly.items())]
        tables = self.plan.state.tables
        lines += [f"{name}: runs ({tables[name].last_decision})" for name in self.plan.run]
        return lines


class DatabaseHook(BaseHook):
    """A declared database, from its Airflow connection and its asset's state store accessor."""

    hook_name = "Tiering database"

    def __init__(self, database: DatabaseSpec, accessor: Any) -> None:
        super().__init__()
        self.database = database
        self.accessor = accessor

    def listing(self) -> Listing:
        from airflow_provider_tiering.hooks.connections import connection_info
        from airflow_provider_tiering.sources.registry import build_table_lister

        connection = connection_info(self.get_connection(self.database.conn_id))
        return build_table_lister(self.database.name, connection).list_tables(self.database.schemas)

    def load(self) -> DatabaseState | None:
        doc = self.accessor.get(DATABASE_STATE_KEY, default=None)
        return None if not doc else DatabaseState.from_json(doc)

    def table_state(self, table: str) -> TableState | None:
        return AssetStateStore(self.accessor, table_state_key(table)).load()

    def probe(
        self,
        selected: Sequence[str] | None = None,
        *,
        run_id: str | None = None,
        task_states: Callable[[list[str]], dict[str, dict[int, str | None]]] | None = None,
    ) -> DatabaseProbe:
        """List the database, match its tables, decide which run, and save the document (when it changed) and the
        probe's summary. InvalidTableSpec when ``selected`` names a table the database does not tier.

        ``task_states`` gives, for some earlier runs, their tier task instances' states by map index (a run that no
        longer exists is left out): a table whose instance there has not finished is in flight."""
        listing = self.listing()
        found = discover(self.database, listing)
        unknown = sorted(set(selected or ()) - set(found.specs))
        if unknown:
            raise InvalidTableSpec(
                f"database {self.database.name!r}: the run's conf names table(s) it does not tier: {', '.join(unknown)}"
                f" (tiered: {', '.join(sorted(found.specs)[:20]) or 'none'})"
            )
        previous, now = self.load(), utcnow()
        earlier = dispatched_runs(previous, besides=run_id)
        states = task_states(sorted(earlier)) if earlier and task_states is not None else {}
        in_flight = still_running(earlier, states)
        plan = plan_runs(
            previous, self.database.name, found, now=now, probe_every=self.database.probe_every_seconds,
            freshness=lambda name: found.specs[name].freshness_seconds, state_of=self.table_state, selected=selected,
            run_id=run_id, in_flight=in_flight,
        )  # fmt: skip
        document = plan.state.to_json()
        if previous is None or previous.to_json() != document:
            self.accessor.set(DATABASE_STATE_KEY, document)
        probe = DatabaseProbe(self.database, listing, found, plan, _news(previous, plan.state))
        self.accessor.set(DATABASE_PROBE_KEY, {"at": now.isoformat(), **probe.summary()})
        return probe


def _news(previous: DatabaseState | None, now: DatabaseState) -> dict[str, str]:
    """The tables whose place changed since the last probe (new, skipped, dropped), in words."""
    found = {}
    for name, table in now.tables.items():
        before = None if previous is None else previous.tables.get(name)
        if before is not None and before.discovery is table.discovery and before.reason == table.reason:
            continue
        if table.discovery is Discovery.TIERED:
            found[name] = f"discovered: tiered by {table.mode} into {table.lake}"
        else:
            found[name] = f"{table.discovery.value}: {table.reason}"
    return found
