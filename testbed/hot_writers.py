"""Writers that keep inserting into PostgreSQL hot tables while rounds run, some of them committing out of cursor order.

Each hot table has a ``bigserial`` cursor. A *steady* writer commits small batches at once; a *laggard* takes
its ids, then holds its transaction open for a while (sometimes longer than a round waits for it) before it
commits or rolls back, so rows keep committing below cursor values that are already visible. Every id whose
commit was acknowledged is remembered: at the end each must be in the hot table and, once tiered, in the lake.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg

COLUMNS = ("id", "writer", "seq", "amount", "created_at", "note")


def create_hot_table(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(
            f'CREATE TABLE "{table}" (id bigserial PRIMARY KEY, writer text NOT NULL, seq bigint NOT NULL, '
            "amount numeric(14,2), created_at timestamptz NOT NULL, note text)"
        )


def insert_rows(
    conn: psycopg.Connection, table: str, writer: str, first_seq: int, count: int, rng: random.Random
) -> list[int]:
    """Insert ``count`` rows in the connection's current transaction; their ids (not committed yet)."""
    rows = [
        (
            writer,
            first_seq + i,
            f"{rng.randint(-(10**8), 10**8) / 100:.2f}",
            datetime.now(UTC),
            None if rng.random() < 0.1 else f"{writer} row {first_seq + i} 'quoted' \"too\"",
        )
        for i in range(count)
    ]
    with conn.cursor() as cur:
        cur.executemany(
            f'INSERT INTO "{table}" (writer, seq, amount, created_at, note) VALUES (%s, %s, %s, %s, %s) RETURNING id',
            rows,
            returning=True,
        )
        ids = []
        while True:
            ids.append(cur.fetchone()[0])
            if not cur.nextset():
                break
    return ids


@dataclass
class WriterStats:
    acknowledged: list[int] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # committed / rolled_back / lost (connection broke)


class Writer(threading.Thread):
    """One writer thread on one hot table; ``laggard`` holds its transactions open before committing."""

    def __init__(self, dsn: str, table: str, name: str, *, laggard: bool, seed: int, stop: threading.Event) -> None:
        super().__init__(name=f"writer-{table}-{name}", daemon=True)
        self.dsn = dsn
        self.table = table
        self.writer = name
        self.laggard = laggard
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.stats = WriterStats()
        self._seq = 0
        self._lock = threading.Lock()

    def acknowledged(self) -> list[int]:
        with self._lock:
            return list(self.stats.acknowledged)

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        while not self.stop_event.is_set():
            if conn is None or conn.closed:
                try:
                    conn = psycopg.connect(self.dsn, connect_timeout=5)
                except psycopg.OperationalError:  # the server is down: try again shortly
                    self.stop_event.wait(0.3)
                    continue
            try:
                self._one_transaction(conn)
            except psycopg.Error:
                # The server restarted under us: that transaction never committed (or its acknowledgement was
                # lost, in which case its rows are in the hot table but not in `acknowledged`: still checked).
                with self._lock:
                    self.stats.outcomes["lost"] += 1
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _one_transaction(self, conn: psycopg.Connection) -> None:
        count = self.rng.randint(1, 5) if self.laggard else self.rng.randint(5, 40)
        ids = insert_rows(conn, self.table, self.writer, self._seq, count, self.rng)
        self._seq += count
        if self.laggard:
            # Mostly shorter than a round's watermark wait, sometimes longer (the round then tiers up to an
            # earlier safe point and reports the blocker).
            hold = self.rng.uniform(3.0, 8.0) if self.rng.random() < 0.2 else self.rng.uniform(0.1, 1.5)
            self.stop_event.wait(hold)
        if self.laggard and self.rng.random() < 0.1:
            conn.rollback()
            outcome = "rolled_back"
        else:
            conn.commit()
            outcome = "committed"
        with self._lock:
            self.stats.outcomes[outcome] += 1
            if outcome == "committed":
                self.stats.acknowledged.extend(ids)
        if not self.laggard:
            self.stop_event.wait(self.rng.uniform(0.02, 0.15))


class Writers:
    """A steady writer and a laggard per table."""

    def __init__(self, dsn: str, tables: list[str], seed: int) -> None:
        self.stop_event = threading.Event()
        self.threads = [
            Writer(dsn, table, name, laggard=laggard, seed=seed * 1000 + i * 10 + j, stop=self.stop_event)
            for i, table in enumerate(tables)
            for j, (name, laggard) in enumerate((("steady", False), ("laggard", True)))
        ]

    def start(self) -> None:
        # psycopg logs every pipeline a server restart breaks; the writers count those transactions instead.
        logging.getLogger("psycopg").setLevel(logging.CRITICAL)
        for thread in self.threads:
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"writers did not stop: {alive}")

    def acknowledged(self, table: str) -> list[int]:
        return [i for t in self.threads if t.table == table for i in t.acknowledged()]

    def outcomes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for thread in self.threads:
            total.update(thread.stats.outcomes)
        return total
