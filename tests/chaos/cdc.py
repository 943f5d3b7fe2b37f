"""The change-stream table of a chaos run (source kind ``postgres_cdc``): its writer and its final check.

The writer changes the table the way an operational table changes (``testbed.changing_table``): inserts, updates
of other columns and of the key itself, several updates of one key in a transaction, large values stored out of
line and left alone by later updates, deletes, deletes then re-inserts of one key; some transactions are held open
across rounds and some rolled back (neither may reach the lake before, or without, its commit). It reconnects when
PostgreSQL restarts under it.

The check reads the hot table with psycopg, the lake with pyiceberg and, separately, the current snapshot's data
files with pyarrow's Parquet reader, and compares them by key: keys lost, keys extra, keys whose row differs, keys
held twice, and the content hash; the replication slot's ``confirmed_flush_lsn`` (read from
``pg_replication_slots``) must not be ahead of the LSN in the ``tiering.end-offsets`` of the lake's latest tiering
snapshot. None of it uses code under test (the LSN text is parsed here too).
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from typing import Any

import psycopg
from pyiceberg.catalog import load_catalog

from testbed.changing_table import COLUMNS, ChangingTable, normal_row
from testbed.lake_check import digest, lake_rows, live_file_rows, postgres_rows

#: Rows the table holds when the run starts (the first round loads them from the slot's exported snapshot).
INITIAL_ROWS = 400
#: Changes committed after the writer stops, so that the last round commits (and cleans up after failed attempts).
FINAL_CHANGES = 60


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class ChangeWriter(threading.Thread):
    """Random transactions on one change-stream table until ``stop`` is set."""

    def __init__(self, dsn: str, table: str, seed: int, stop: threading.Event) -> None:
        super().__init__(name=f"writer-{table}", daemon=True)
        self.hot = ChangingTable(dsn, table, seed=seed)
        self.rng = random.Random(seed + 1)
        self.stop_event = stop
        self.outcomes: Counter[str] = Counter()  # committed / rolled_back / lost (the session broke)
        self._lock = threading.Lock()

    def create(self) -> None:
        self.hot.create()
        self.hot.insert(INITIAL_ROWS)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.hot.counts)

    def run(self) -> None:
        broken = False
        while not self.stop_event.is_set():
            try:
                if broken:
                    self.hot.reconnect()
                    broken = False
                self._one_transaction()
            except psycopg.Error:
                with self._lock:
                    self.outcomes["lost"] += 1
                broken = True
                self.stop_event.wait(0.3)
                continue
            self.stop_event.wait(self.rng.uniform(0.05, 0.2))

    def _one_transaction(self) -> None:
        # Mostly committed at once; sometimes held open for seconds (across a round's planning), sometimes undone.
        hold = self.rng.uniform(1.0, 4.0) if self.rng.random() < 0.1 else 0.0
        rollback = self.rng.random() < 0.05
        with self._lock:
            committed = self.hot.transaction(self.rng.randint(1, 4), hold=hold, rollback=rollback)
            self.outcomes["committed" if committed else "rolled_back"] += 1

    def final_changes(self) -> None:
        """After the writer has stopped: a last batch of changes, committed."""
        self.hot.reconnect()
        done = 0
        while done < FINAL_CHANGES:
            changes = self.rng.randint(1, 4)
            self.hot.transaction(changes)
            self.outcomes["committed"] += 1
            done += changes
        self.hot.close()


def by_key(rows: list[tuple[Any, ...]]) -> tuple[dict[Any, tuple[Any, ...]], int]:
    """Rows by their key (the first column), and how many rows repeat a key already seen."""
    found: dict[Any, tuple[Any, ...]] = {}
    repeated = 0
    for row in rows:
        if row[0] in found:
            repeated += 1
        found[row[0]] = normal_row(row)
    return found, repeated


def parquet_rows(catalog_properties: dict[str, str], identifier: tuple[str, str]) -> tuple[list[tuple[Any, ...]], int]:
    """The live rows of the data files the lake's current snapshot lists, read with pyarrow's Parquet reader (their
    position deletes applied with pyarrow too); and how many of those files carry delete files."""
    table = load_catalog("default", **catalog_properties).load_table(identifier)
    rows: list[tuple[Any, ...]] = []
    with_deletes = 0
    for task in table.scan().plan_files():
        with_deletes += bool(task.delete_files)
        data = live_file_rows(task, COLUMNS)
        rows += list(zip(*(data.column(c).to_pylist() for c in COLUMNS), strict=True))
    return rows, with_deletes


def slot_lsn(dsn: str, slot: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return None if found is None else found[0]


def lake_lsn(summary: dict[str, str]) -> str | None:
    offsets = json.loads(summary.get("tiering.end-offsets", "null")) or {}
    return offsets.get("lsn")


def compare(
    dsn: str, table: str, catalog_properties: dict[str, str], identifier: tuple[str, str], is_external: Any
) -> dict[str, Any]:
    """The lake table against the hot table, by key, read through pyiceberg and through the Parquet files."""
    hot, _ = by_key(postgres_rows(dsn, table, COLUMNS))
    everything = lake_rows(catalog_properties, identifier, COLUMNS)
    lake, repeated = by_key([row for row in everything if not is_external(row)])
    files, with_deletes = parquet_rows(catalog_properties, identifier)
    tiered_files = [row for row in files if not is_external(row)]
    expected = digest(hot.values())
    return {
        "hot_rows": len(hot),
        "lake_rows": len(lake) + repeated,
        "lost_keys": len(hot.keys() - lake.keys()),
        "extra_keys": len(lake.keys() - hot.keys()),
        "differing_keys": sum(hot[k] != lake[k] for k in hot.keys() & lake.keys()),
        "duplicated_keys": repeated,
        "digests_equal": not repeated and digest(lake.values()) == expected,
        "parquet_digests_equal": digest(normal_row(r) for r in tiered_files) == expected,
        "external_ids": Counter(row[0] for row in everything if is_external(row)),
        "files_with_deletes": with_deletes,
    }
