"""Evicting tiered rows from the hot store, after a round's commit (opt-in per table, SQL tables).

A row is deleted only when the lake holds it: its cursor is within the end offsets of the lake's latest tiering
commit (read from the lake, never from the state document), that commit is the one this round just made, and the
lake's current snapshot has that very row, value for value (read as tiered from the hot store, locked, compared with
the lake's rows of the same cursor range, then deleted by physical row id in the same transaction: a row written
meanwhile, even with the same cursor value, is never deleted unseen). Rows go in batches of ``batch_rows``, one
short transaction each. A crash anywhere leaves every row in at least one tier: the next round's eviction carries on.

A table without a cursor (a change stream's, merged by key) is walked in key order instead (``evict_by_key``): rows
older than the retention by ``age_column``, each compared with the lake's current row of its key. The lake holds
what the stream applied up to its LSN, so a row changed since then differs from it and stays in the hot store
this time; the rows that match are deleted in a transaction the change stream skips, so the lake keeps them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.offsets import cursor_offsets
from airflow_provider_tiering.core.ports import EvictionLake, EvictionSource, KeyedEvictionSource, LakeCommit
from airflow_provider_tiering.core.spec import EvictionSpec

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class EvictionResult:
    rows: int
    batches: int
    seconds: float
    note: str | None = None
    #: Old rows left in the hot store because they differ from the lake's (changed since its LSN; key order only).
    kept: int = 0


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Whether two Arrow tables of one schema hold the same rows, in any order (sorted by every column, then
    compared; nulls equal)."""
    if a.num_rows != b.num_rows:
        return False
    keys: list[tuple[str, Literal["ascending", "descending"]]] = [(name, "ascending") for name in a.schema.names]
    try:
        return bool(a.sort_by(keys).equals(b.sort_by(keys)))
    except Exception:  # a column type Arrow cannot sort: compare value by value instead
        return False


def _row_tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [table.column(name).to_pylist() for name in table.schema.names]
    return list(zip(*columns))


def cursor_key(value: Any) -> Any:
    """One spelling per cursor value, whichever tier it comes from (ints as ints; times as naive-UTC ISO text:
    the lake gives datetimes, PostgreSQL datetimes, SQLite text)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    return value


def evict_tiered_rows(
    spec: EvictionSpec,
    cursor_column: str,
    source: EvictionSource,
    lake: EvictionLake,
    *,
    epoch: int,
    now: datetime,
) -> EvictionResult:
    """Delete hot rows that the lake holds and that are older than the retention (see the module description).
    ``epoch`` is the round's: eviction runs only while the lake's latest tiering commit is that round's."""
    started = time.monotonic()
    commit = lake.committed()
    not_this_round = _not_this_rounds(commit, epoch)
    if not_this_round is not None or commit is None or not commit.end_offsets:
        return EvictionResult(0, 0, 0.0, not_this_round)
    upto = cursor_offsets(commit.end_offsets)["cursor"]
    cutoff = now - timedelta(seconds=spec.retention_seconds)

    def verify(rows: pa.Table) -> None:
        """Every row about to be deleted is in the lake, whole (compared value by value, as tiered)."""
        if rows.num_rows == 0:
            return
        cursor = rows.column(cursor_column)
        lower, upper = cursor[0].as_py(), cursor[rows.num_rows - 1].as_py()
        lake_rows = lake.rows_in_cursor_range(cursor_column, lower, upper, rows)
        if _same_rows(rows, lake_rows):  # the usual case, compared in Arrow
            return
        held = Counter(_row_tuples(lake_rows))
        missing = Counter(_row_tuples(rows)) - held
        if missing:
            first = min(missing, key=lambda row: row[rows.schema.names.index(cursor_column)])
            raise LakeError(
                f"{sum(missing.values())} hot row(s) with cursor <= {upto} are not in the lake as they are in the hot "
                f"store (first: {cursor_column}={first[rows.schema.names.index(cursor_column)]!r}); nothing of "
                "this batch was evicted. The lake and the hot store disagree: check the table"
            )

    after: Any = None
    rows = batches = 0
    with source.evicting():
        while rows < spec.max_rows_per_round:
            limit = min(spec.batch_rows, spec.max_rows_per_round - rows)
            deleted, last = source.evict_batch(after, upto, cutoff, spec.age_column, limit, verify)
            if last is None:
                break
            rows += deleted
            batches += 1
            after = last
    return EvictionResult(rows, batches, round(time.monotonic() - started, 3))


def _not_this_rounds(commit: LakeCommit | None, epoch: int) -> str | None:
    """Why eviction may not run after this round (None: the lake's latest commit is the round's own)."""
    if commit is None or commit.epoch != epoch or not commit.end_offsets:
        found = "no tiering commit" if commit is None else f"epoch {commit.epoch}"
        return f"not evicted: the lake's latest commit is {found}, not this round's"
    return None


def evict_by_key(
    spec: EvictionSpec,
    key: Sequence[str],
    source: KeyedEvictionSource,
    lake: EvictionLake,
    *,
    epoch: int,
    now: datetime,
) -> EvictionResult:
    """Delete hot rows of a table without a cursor (walked in ``key`` order) that are older than the retention by
    ``spec.age_column`` and that the lake holds exactly as they are (see the module description); rows that differ
    are kept and counted. ``epoch`` is the round's: eviction runs only while the lake's latest commit is that
    round's."""
    started = time.monotonic()
    not_this_round = _not_this_rounds(lake.committed(), epoch)
    if not_this_round is not None:
        return EvictionResult(0, 0, 0.0, not_this_round)
    if spec.age_column is None:  # the spec requires it for a table without a cursor
        raise ValueError("eviction by key needs eviction.age_column")
    cutoff = now - timedelta(seconds=spec.retention_seconds)

    def held(rows: pa.Table) -> list[bool]:
        """Whether the lake's current row of each row's key is that very row, value for value."""
        if rows.num_rows == 0:
            return []
        names = rows.schema.names
        positions = [names.index(column) for column in key]
        stored: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for row in _row_tuples(lake.rows_with_keys(key, rows)):
            row_key = tuple(row[i] for i in positions)
            if row_key in stored:
                raise LakeError(f"the lake holds key {dict(zip(key, row_key, strict=True))} twice; nothing evicted")
            stored[row_key] = row
        return [stored.get(tuple(row[i] for i in positions)) == row for row in _row_tuples(rows)]

    after: tuple[Any, ...] | None = None
    rows = batches = kept = 0
    with source.evicting():
        while rows < spec.max_rows_per_round:
            limit = min(spec.batch_rows, spec.max_rows_per_round - rows)
            batch = source.evict_key_batch(key, after, cutoff, spec.age_column, limit, held)
            if batch.last is None:
                break
            rows += batch.deleted
            kept += batch.read - batch.deleted
            batches += 1
            after = batch.last
    note = None
    if kept:
        note = (
            f"{kept} row(s) older than the retention kept in the hot store: they changed after the lake's LSN (or "
            "are not in the lake yet); a later round evicts them once the lake holds them as they are"
        )
    return EvictionResult(rows, batches, round(time.monotonic() - started, 3), note, kept)
