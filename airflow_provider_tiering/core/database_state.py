"""A declared database's document, and which of its tables run now.

The document (one JSON value in the asset state store of the database's asset; only its discovery task writes it)
lists every table the declaration's globs match: tiered, skipped or dropped, with the reason, and for a tiered table
the fingerprint its last settled round started from. Each table's own state document (key
:func:`table_state_key` of the same asset) is written by its own task only.

Which tables run (:func:`plan_runs`): a table new to the document runs at once (its first load); a table whose last
run has not settled (failed, retrying, rows left behind, not run yet) runs again; a settled table runs when its
fingerprint differs from the one its settled round started from (or the listing cannot tell) and its freshness
interval has passed since its last run; an unchanged one starts no task. A table whose task instance in an earlier
run (runs overlap) has not finished is in flight: no second task starts beside it. A fingerprint is taken before the
round it dispatches, so a change committed after it changes the next fingerprint: the probe may say "maybe" but
never "no" while a row waits (the round itself still makes every check: identity, shape, rows behind the offsets).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_tiering.core.discovery import Discovered
from airflow_provider_tiering.core.documents import DocumentTime, from_document, to_document
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState, TableStatus

#: The key of a database's document in its asset's state store.
DATABASE_STATE_KEY = "tiering_database"
#: The key of the database's last probe (written every run; the document only when it changes).
DATABASE_PROBE_KEY = "tiering_database_probe"
#: Airflow's task instance states after which a task will not run again in its DAG run (one not created yet, or
#: waiting for a retry, is still to run).
FINISHED_STATES = frozenset({"success", "skipped", "failed", "upstream_failed", "removed"})


def table_state_key(table: str) -> str:
    """The key of a discovered table's state document in its database asset's state store."""
    return f"tiering_state/{table}"


def table_maintenance_key(table: str) -> str:
    """The key of a discovered table's maintenance status in its database asset's state store."""
    return f"tiering_maintenance/{table}"


class Discovery(enum.StrEnum):
    """A listed table's place in its database."""

    TIERED = "tiered"
    SKIPPED = "skipped"
    DROPPED = "dropped"


@dataclass
class DatabaseTable:
    """One table of a declared database, as its discovery knows it."""

    name: str
    discovery: Discovery
    first_seen: DocumentTime
    #: Why it is skipped or dropped (None: tiered).
    reason: str | None = None
    #: The lake table (``namespace.table``) and mode of a tiered table (also kept once dropped).
    lake: str | None = None
    mode: str | None = None
    since: DocumentTime | None = None
    #: The fingerprint its last settled round started from.
    baseline: str | None = None
    #: The fingerprint when it was last dispatched, until its run settles; and when.
    pending: str | None = None
    dispatched_at: DocumentTime | None = None
    #: The run it was last dispatched in, and its task instance's map index there (its place in what that run's
    #: discovery returned).
    dispatched_run: str | None = None
    dispatched_index: int | None = None
    #: Why it last ran (or waits).
    last_decision: str | None = None


@dataclass
class DatabaseState:
    """The document of one declared database."""

    database: str
    tables: dict[str, DatabaseTable] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return to_document(self)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> DatabaseState:
        return from_document(cls, document)

    def counts(self) -> dict[str, int]:
        found = {d.value: 0 for d in Discovery}
        for table in self.tables.values():
            found[table.discovery.value] += 1
        return found


@dataclass(frozen=True)
class Plan:
    """A probe's outcome: the tables to run now, and the document to save (with why each runs or waits)."""

    run: list[str]
    state: DatabaseState
    #: Settled tables that start no task (their fingerprint unchanged).
    idle: int
    #: Changed tables not due yet.
    waiting: int
    #: Tables whose task would only skip until a reset.
    quarantined: int = 0
    #: Tables whose task instance in an earlier run has not finished.
    in_flight: int = 0


def dispatched_runs(state: DatabaseState | None, *, besides: str | None = None) -> dict[str, dict[int, str]]:
    """The runs (but ``besides``) that unsettled tables were last dispatched in: each run's map indexes and the
    tables they tier. Their task instances' states tell which of those are still in flight."""
    found: dict[str, dict[int, str]] = {}
    for table in state.tables.values() if state else ():
        run, index = table.dispatched_run, table.dispatched_index
        if table.pending is not None and run is not None and index is not None and run != besides:
            found.setdefault(run, {})[index] = table.name
    return found


def mode_of(spec: TableSpec) -> str:
    """A tiered table's mode in words: change_stream, merge or append."""
    if spec.source.streams_changes:
        return "change_stream"
    return "merge" if spec.merge is not None else "append"


def settled(state: TableState | None, since: datetime) -> bool:
    """Whether the table's run dispatched at ``since`` left nothing behind: at rest after a round (or a probe) that
    caught up with the hot store since, with no failure, quarantine or unconfirmed watermark pending."""
    return (
        state is not None
        and state.status in (TableStatus.TIERED, TableStatus.SCHEDULED)
        and state.consecutive_failures == 0
        and state.quarantined_since is None
        and state.watermark_candidate is None
        and state.caught_up_time is not None
        and state.caught_up_time >= since
    )


def _due_at(entry: DatabaseTable, freshness_seconds: float, probe_every: float) -> datetime | None:
    """When a changed table runs again: its freshness after its last run, less a probe interval (a change waits for
    the next probe), at least half its freshness."""
    if entry.dispatched_at is None:
        return None
    interval = max(freshness_seconds - probe_every, freshness_seconds / 2)
    return entry.dispatched_at + timedelta(seconds=interval)


def still_running(earlier: dict[str, dict[int, str]], states: dict[str, dict[int, str | None]]) -> set[str]:
    """The tables of ``earlier`` (:func:`dispatched_runs`) whose task instance has not finished, from ``states``
    (each run's instances by map index; a run left out has ended, or is gone, without them)."""
    return {
        name
        for run, tables in earlier.items()
        if run in states
        for index, name in tables.items()
        if states[run].get(index) not in FINISHED_STATES
    }


def plan_runs(
    previous: DatabaseState | None,
    database: str,
    discovered: Discovered,
    *,
    now: datetime,
    probe_every: float,
    freshness: Callable[[str], float],
    state_of: Callable[[str], TableState | None],
    selected: Sequence[str] | None = None,
    run_id: str | None = None,
    in_flight: Collection[str] = (),
) -> Plan:
    """Which tables run now, and the database's document after this probe (see the module's description).

    ``state_of`` reads a table's own state document: asked only of tables whose last run has not settled.
    ``selected`` (a run's ``conf["tables"]``): those tables run, due or not, and no other does. ``in_flight``: the
    tables whose task instance in an earlier run has not finished (see :func:`dispatched_runs`); they wait for it.
    ``run_id``: this run, recorded with each table it dispatches."""
    # Copies: the caller compares the previous document with this one to know whether to save it.
    doc = DatabaseState(database, {n: replace(t) for n, t in (previous.tables if previous else {}).items()})
    run: list[str] = []
    idle = waiting = quarantined = flying = 0
    for name, fingerprint in discovered.fingerprints.items():
        entry = doc.tables.get(name)
        spec = discovered.specs.get(name)
        if spec is None:
            reason = discovered.skipped[name]
            if entry is None or entry.discovery is not Discovery.SKIPPED or entry.reason != reason:
                doc.tables[name] = DatabaseTable(
                    name, Discovery.SKIPPED, entry.first_seen if entry else now, reason=reason, since=now,
                    lake=entry.lake if entry else None, mode=entry.mode if entry else None,
                )  # fmt: skip
            continue
        lake, mode = f"{spec.lake.namespace}.{spec.lake.table}", mode_of(spec)
        decision: str | None
        if entry is None or entry.discovery is not Discovery.TIERED or entry.lake != lake or entry.mode != mode:
            entry = DatabaseTable(name, Discovery.TIERED, entry.first_seen if entry else now, lake=lake, mode=mode,
                                  since=now)  # fmt: skip
            doc.tables[name] = entry
            decision = "discovered: its first round"
        elif selected is not None:
            decision = "named in the run's conf" if name in selected else None
        elif entry.dispatched_at is None:
            decision = "not run yet"
        elif entry.pending is not None and name in in_flight:
            entry.last_decision = f"in flight: its task in run {entry.dispatched_run} has not finished"
            flying += 1
            continue
        elif entry.pending is not None:
            state = state_of(name)
            if settled(state, entry.dispatched_at):
                entry.baseline, entry.pending = entry.pending, None
                decision = _changed(entry, fingerprint, now, freshness(name), probe_every)
            elif state is not None and state.quarantined_since is not None:
                # Its task would only skip: it waits, unsettled, until a reset lifts the quarantine.
                entry.last_decision = "quarantined: reset it to tier it again"
                quarantined += 1
                continue
            else:
                decision = "its last run has not settled (failed, retrying, or rows left): runs again"
        else:
            decision = _changed(entry, fingerprint, now, freshness(name), probe_every)
        if selected is not None and name not in selected:
            decision = None
        if decision is None:
            idle += 1
            continue
        if decision.startswith("changed; due at"):
            waiting += 1
            entry.last_decision = decision
            continue
        entry.pending, entry.dispatched_at, entry.last_decision = fingerprint or "", now, decision
        entry.dispatched_run, entry.dispatched_index = run_id, len(run)
        run.append(name)
    _mark_dropped(doc, discovered, now)
    return Plan(run, doc, idle, waiting, quarantined, flying)


def _mark_dropped(doc: DatabaseState, discovered: Discovered, now: datetime) -> None:
    """The tables of the document the listing no longer has are dropped (their lake tables kept)."""
    for name, entry in doc.tables.items():
        if name not in discovered.fingerprints and entry.discovery is not Discovery.DROPPED:
            doc.tables[name] = DatabaseTable(
                name, Discovery.DROPPED, entry.first_seen, lake=entry.lake, mode=entry.mode, since=now,
                reason="no longer in the hot store (or no longer matched by include)"
                + (f"; its lake table {entry.lake} is kept" if entry.lake else ""),
            )  # fmt: skip


def _changed(
    entry: DatabaseTable, fingerprint: str | None, now: datetime, freshness: float, every: float
) -> str | None:
    """Why a settled table runs now, "changed; due at ..." when it waits for its freshness, None when it is idle."""
    if fingerprint is not None and fingerprint == entry.baseline:
        return None
    due = _due_at(entry, freshness, every)
    if due is not None and now < due:
        return f"changed; due at {due.isoformat()}"
    return "changed since its last round" if fingerprint is not None else "the listing cannot tell: probed by its task"
