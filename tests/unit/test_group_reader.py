"""A stream group's reader (``group_reader.py``) over in-memory fakes of the database's log and of the change log: a
run killed at each of its phases (the process gone, its state document as it last saved it) and the next run
together write every transaction to the change log exactly once; the server's retention point never passes the
change log's position; and what the reader announces of a table never says "nothing new" while one of its changes
lies in the log. Milliseconds; the real servers' runs are in tests/integration/test_stream_groups.py."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from airflow_provider_tiering.core.errors import FencedError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.core.ports import ChangeLogState, StreamMember
from airflow_provider_tiering.core.source_specs import ChangeStreamSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.core.stream_state import StreamGroupState
from airflow_provider_tiering.lake.change_log import CHANGE_LOG_SCHEMA
from airflow_provider_tiering.sources.change_stream.group_reader import GroupLog, GroupReader
from airflow_provider_tiering.sources.change_stream.messages import Begin, Change, Commit, Message, Relation

TABLES = ("s.a", "s.b", "s.c")
PHASES = ("read", "intent", "committed", "released", "recorded", "expired")


class Killed(BaseException):
    """A SIGKILL at a phase: nothing after it runs (a BaseException: no ``except Exception`` records it)."""


class MemoryConnection:
    closed = False

    def close(self) -> None:
        self.closed = True


class MemoryLog(GroupLog):
    """A database's log in memory: transactions, each ending 10 past its commit, a slot that only moves forward."""

    display_name = "memory log"

    def __init__(self) -> None:
        super().__init__()
        self.transactions: list[tuple[int, int, list[tuple[str, int]]]] = []
        self.slot: int | None = None
        self.end_at = 0
        self.connections: list[MemoryConnection] = []
        self.used: list[MemoryConnection] = []

    def _connect(self) -> MemoryConnection:
        self.connections.append(MemoryConnection())
        return self.connections[-1]

    def write(self, *changes: tuple[str, int]) -> None:
        commit_at = self.end_at + 5
        self.end_at = commit_at + 10
        self.transactions.append((commit_at, self.end_at, list(changes)))

    def table_name(self, source: ChangeStreamSpec) -> str:
        return f"s.{source.table}"

    def check(self) -> None:
        with self._connection() as conn:
            self.used.append(conn)

    def end(self) -> tuple[int, int | None]:
        with self._connection() as conn:
            self.used.append(conn)
        return self.end_at, self.end_at

    def start(self) -> int:
        if self.slot is None:
            self.slot = self.end_at
        return self.slot

    def held_from(self, position: int) -> None:
        assert self.slot is not None
        if self.slot > position:
            raise AssertionError(f"the slot ({self.slot}) passed the change log ({position})")
        self.slot = position

    def messages(
        self, start: int, end: int | None, tables: Sequence[str], budget: int | None
    ) -> AbstractContextManager[Iterator[Message]]:
        assert self.slot is not None
        found: list[Message] = [Relation(n, ("id",), (20,), "s", t[2:]) for n, t in enumerate(TABLES)]
        for commit_at, ends, changes in self.transactions:
            if ends > self.slot and (end is None or commit_at < end):
                found += [Begin(commit_at), *(Change("I", TABLES.index(t), new=(k,)) for t, k in changes)]
                found.append(Commit(commit_at, ends))
        return nullcontext(iter(found))

    def join(self, tables: Sequence[str], position: int, members: Sequence[str]) -> Mapping[str, int | str]:
        return dict.fromkeys(tables, position)

    def leave(self, tables: Sequence[str], members: Sequence[str]) -> None:
        return None

    def release(self, position: int) -> None:
        assert self.slot is not None and position >= self.slot
        self.slot = position

    def table_of(self, relation: Relation) -> str | None:
        return f"{relation.namespace}.{relation.name}"

    def key_of(self, table: str, relation: Relation) -> Sequence[str]:
        return ("id",)

    def offsets(self, position: int) -> Offsets:
        return {"lsn": str(position)}

    def position(self, offsets: SafeEnd) -> int:
        return int(offsets["lsn"])  # type: ignore[typeddict-item]  # the fake's own offsets

    def describe(self, position: int) -> str:
        return str(position)

    def idle_advance_bytes(self) -> int:
        return 1_000_000


class MemoryChangeLog:
    """The change log in memory, its commits fenced on the position and epoch they read."""

    name = "memory change log"

    def __init__(self) -> None:
        self.rows = CHANGE_LOG_SCHEMA.empty_table()
        self.committed: ChangeLogState | None = None

    def ensure(self) -> None:
        return None

    def state(self) -> ChangeLogState | None:
        return self.committed

    def append(self, rows: pa.Table, *, epoch: int, start: Offsets | None, end: Offsets,
               members: Mapping[str, StreamMember], group: str, attempt: str) -> int:  # fmt: skip
        now = self.committed or ChangeLogState(0, None, {})
        if now.end != start or now.epoch >= epoch:
            raise FencedError(f"fenced: the log is at {now.end}, epoch {now.epoch}")
        self.rows = pa.concat_tables([self.rows, rows.cast(CHANGE_LOG_SCHEMA)])
        self.committed = ChangeLogState(epoch, end, dict(members))
        return epoch

    def expire(self, epoch: int, applied: Mapping[str, int], members: Mapping[str, StreamMember], *,
               left: Sequence[str] = (), before: datetime | None = None) -> int:  # fmt: skip
        assert self.committed is not None and self.committed.epoch == epoch
        keep = [
            not (r["source_table"] in left or r["position"] <= applied.get(r["source_table"], -1))
            for r in self.rows.to_pylist()
        ]
        gone = keep.count(False)
        self.rows = self.rows.filter(pa.array(keep))
        self.committed = ChangeLogState(epoch, self.committed.end, dict(members))
        return gone

    def changes_after(self, table: str, after: int) -> int:
        return sum(1 for r in self.rows.to_pylist() if r["source_table"] == table and r["position"] > after)

    def backlogs(self, after: Mapping[str, int]) -> dict[str, int]:
        return {table: self.changes_after(table, position) for table, position in after.items()}


class MemoryStore:
    def __init__(self) -> None:
        self.saved: StreamGroupState | None = None

    def load(self) -> StreamGroupState | None:
        return None if self.saved is None else StreamGroupState.from_json(self.saved.to_json())

    def save(self, state: StreamGroupState) -> None:
        self.saved = StreamGroupState.from_json(state.to_json())


def reader(log: MemoryLog, change_log: MemoryChangeLog, store: MemoryStore, kill_at: str | None = None) -> GroupReader:
    group = StreamGroupSpec.parse({"name": "g", "conn_id": "c", "change_log": {"namespace": "n"},
                                   "expire_every_seconds": 0})  # fmt: skip

    def observe(phase: str) -> None:
        if phase == kill_at:
            raise Killed(phase)

    return GroupReader(
        group, {t: t[2:] for t in TABLES}, log, change_log, store, applied=lambda: {}, observe=observe,
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip


def written(change_log: MemoryChangeLog) -> list[tuple[str, int]]:
    return sorted((str(r["source_table"]), int(r["position"])) for r in change_log.rows.to_pylist())


@pytest.mark.parametrize("phase", PHASES)
def test_a_run_killed_at_any_phase_then_the_next_write_every_transaction_once(phase: str) -> None:
    log, change_log, store = MemoryLog(), MemoryChangeLog(), MemoryStore()
    reader(log, change_log, store).run()  # the tables join
    log.write(("s.a", 1), ("s.b", 1))
    log.write(("s.a", 2))
    with pytest.raises(Killed):
        reader(log, change_log, store, kill_at=phase).run()
    state = store.load()
    assert state is not None
    for table, position in written(change_log):
        announced = state.tables[table].announced()
        assert announced is not None and announced >= position, "a probe must see every change in the log"
    log.write(("s.c", 3))
    reader(log, change_log, store).run()
    expected = sorted([("s.a", 15), ("s.b", 15), ("s.a", 30), ("s.c", 45)])
    assert written(change_log) == expected
    assert log.slot == log.end_at and change_log.committed is not None
    assert change_log.committed.end == {"lsn": str(log.end_at)}
    state = store.load()
    assert state is not None and state.status == "read"
    assert {t: s.announced() for t, s in state.tables.items()} == {"s.a": 30, "s.b": 15, "s.c": 45}


def test_a_run_s_steps_share_one_connection_closed_when_it_ends_or_dies() -> None:
    log, change_log, store = MemoryLog(), MemoryChangeLog(), MemoryStore()
    reader(log, change_log, store).run()
    assert len(log.connections) == 1 and log.connections[0].closed
    assert log.used == [log.connections[0]] * 2
    log.write(("s.a", 1))
    with pytest.raises(Killed):
        reader(log, change_log, store, kill_at="read").run()
    assert len(log.connections) == 2 and all(c.closed for c in log.connections)
    log.end()  # outside a run: a connection of its own
    assert len(log.connections) == 3 and log.used[-1] is log.connections[2] and log.connections[2].closed


def test_a_stale_run_is_fenced_and_commits_nothing() -> None:
    log, change_log, store = MemoryLog(), MemoryChangeLog(), MemoryStore()
    reader(log, change_log, store).run()
    log.write(("s.a", 1))
    stale = reader(log, change_log, store)
    # Another run commits between this one's reading the change log and its commit.

    def another_run_commits(phase: str) -> None:
        if phase == "intent":
            reader(log, change_log, store).run()

    stale.observe = another_run_commits
    with pytest.raises(FencedError):
        stale.run()
    assert written(change_log) == [("s.a", 15)]
    state = store.load()
    assert state is not None and state.status == "failed" and "fenced" in (state.last_error or "")
