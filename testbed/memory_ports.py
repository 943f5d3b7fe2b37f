"""In-memory implementations of the round's ports (``core/ports.py``): a hot table, a split writer, a lake and a
state store that live in one process, so the round's logic (its phases, fencing, crash recovery, failure recording)
is tested in milliseconds, without PostgreSQL, Spark or pyiceberg. They keep the ports' contracts, not their
engines' performance: the integration tests check the real ones.

* :class:`MemoryTable`: rows ``(id, value, version)``; ``version`` is the cursor, increased by every insert and
  update; a hard delete removes a row. Its offsets are ``{"cursor": version}``.
* :class:`MemoryLake`: snapshots over :class:`MemoryFiles` (paths to Arrow tables), fenced as the Iceberg lake's
  (offsets and epoch checked in the same step that adds the snapshot), copy-on-write merges by key.
* :class:`MemoryWriter`: writes each split as a file under the attempt's directory; can leave a dead task attempt's
  file beside it, or fail a split.
* :class:`MemoryStateStore`: the state document as JSON, as Airflow's state store keeps it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import FencedError, LakeError, SchemaConflict, SourceError, TableTruncated
from airflow_provider_tiering.core.offsets import CursorValue, Offsets, SafeEnd, cursor_offsets
from airflow_provider_tiering.core.ports import (
    LakeCommit,
    LineageDataset,
    MergeKey,
    MergeResult,
    RejectedRecord,
    RoundRead,
    SafeWatermark,
    Source,
    SplitReader,
    SplitT,
    TieringCommit,
    WatermarkBlocker,
    WriteTarget,
    WrittenFile,
)
from airflow_provider_tiering.core.shape import (
    DeclaredColumnChanges,
    HotIdentity,
    LakeShape,
    ShapeChanges,
    ShapeDecision,
)
from airflow_provider_tiering.core.state import TableState

_FIELDS: list[pa.Field[Any]] = [
    pa.field("id", pa.int64(), nullable=False),
    pa.field("value", pa.string()),
    pa.field("version", pa.int64(), nullable=False),
]
SCHEMA = pa.schema(_FIELDS)


# -- the hot table ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryPlan:
    """The versions in ``(start, end]`` a round tiers, and how many the row cap left for later rounds."""

    start: int
    end: int
    rows: int
    backlog: int = 0

    @property
    def is_empty(self) -> bool:
        return self.rows == 0


@dataclass(frozen=True)
class MemorySplit:
    index: int
    low: int  # exclusive
    high: int  # inclusive


class MemoryTable(Source[MemoryPlan, MemorySplit]):
    """A hot table in memory. ``hold_from``: a transaction still open that may commit a version at or above it
    (the safe watermark stays below it); ``password`` appears in its errors, as a credential would."""

    def __init__(self, name: str = "memory.events", *, password: str = "") -> None:
        self.display_name = f"memory table {name}"
        self.rows: dict[int, dict[str, Any]] = {}
        self.hold_from: int | None = None
        self.password = password
        self.unreachable = False
        #: A TRUNCATE waits among the changes to tier (as a change stream finds one when it plans).
        self.truncated = False
        self._versions = itertools.count(1)
        self._ids = itertools.count(1)
        #: The keys a round bound (``bind_key``), one per round.
        self.bound_keys: list[MergeKey] = []
        #: The table's id (PostgreSQL's oid): another one once the table is dropped and created again.
        self.table_id = "16384"

    def session(self) -> MemoryTable:
        """Another process's connection to the same table (a rival round's): the rows are shared, its snapshot is
        its own."""
        other = MemoryTable.__new__(MemoryTable)
        other.__dict__.update(self.__dict__)
        return other

    # -- what a test does to the table
    def insert(self, n: int, value: str = "v") -> list[int]:
        ids = [next(self._ids) for _ in range(n)]
        for key in ids:
            self.rows[key] = {"id": key, "value": f"{value}{key}", "version": next(self._versions)}
        return ids

    def update(self, ids: Sequence[int], value: str) -> None:
        for key in ids:
            self.rows[key] = {"id": key, "value": value, "version": next(self._versions)}

    def delete(self, ids: Sequence[int]) -> None:
        for key in ids:
            del self.rows[key]

    def as_table(self) -> pa.Table:
        return pa.Table.from_pylist(sorted(self.rows.values(), key=lambda row: row["id"]), SCHEMA)

    # -- the port
    def _reach(self) -> dict[int, dict[str, Any]]:
        if self.unreachable:
            raise SourceError(f"{self.display_name} is unreachable (password {self.password})")
        return self.rows

    def _versions_in(self, low: int, high: int) -> list[int]:
        return sorted(row["version"] for row in self._reach().values() if low < row["version"] <= high)

    def schema(self) -> pa.Schema:
        self._reach()
        return SCHEMA

    def primary_key(self) -> tuple[str, ...] | None:
        return ("id",)

    def secrets(self) -> list[str]:
        return [self.password] if self.password else []

    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        newest = max((row["version"] for row in self._reach().values()), default=None)
        if newest is None:
            return SafeWatermark(end=committed, observed=None)
        if self.hold_from is not None and newest >= self.hold_from:
            blocker = WatermarkBlocker(pid=4242, transaction_start=None, age_seconds=1.0)
            end = max(self._versions_in(0, self.hold_from - 1), default=None)
            safe = committed if end is None else {"cursor": end}
            return SafeWatermark(end=safe, observed={"cursor": newest}, blockers=[blocker])
        return SafeWatermark(end={"cursor": newest}, observed={"cursor": newest})

    def has_rows_after(self, committed: Offsets | None) -> bool:
        start = 0 if committed is None else int(cursor_offsets(committed)["cursor"])
        return bool(self._versions_in(start, 2**62))

    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> MemoryPlan:
        if self.truncated:
            raise TableTruncated(f"{self.display_name} was truncated")
        low = 0 if start is None else int(cursor_offsets(start)["cursor"])
        versions = self._versions_in(low, int(cursor_offsets(end)["cursor"]))
        if len(versions) > max_rows:
            return MemoryPlan(low, versions[max_rows - 1], max_rows, len(versions) - max_rows)
        return MemoryPlan(low, int(cursor_offsets(end)["cursor"]), len(versions))

    def cut_splits(self, plan: MemoryPlan, target_rows_per_split: int, parallelism: int) -> list[MemorySplit]:
        versions = self._versions_in(plan.start, plan.end)
        bounds = [plan.start, *versions[target_rows_per_split - 1 : -1 : target_rows_per_split], plan.end]
        return [MemorySplit(i, low, high) for i, (low, high) in enumerate(itertools.pairwise(bounds))]

    def end_offsets(self, plan: MemoryPlan) -> Offsets:
        return {"cursor": plan.end}

    def read_split(self, split: MemorySplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        return _read_rows(self._reach(), split, schema)

    def bind_key(self, key: MergeKey) -> None:
        self.bound_keys.append(key)

    @contextmanager
    def reading_one_snapshot(
        self,
        plan: MemoryPlan | None,
        splits: Sequence[MemorySplit],
        *,
        read_here: bool = False,
        with_keys: bool = False,
    ) -> Iterator[RoundRead[MemorySplit]]:
        snapshot = MemoryRead(self, {key: dict(row) for key, row in self._reach().items()})
        keys = pa.table({"id": pa.array(sorted(snapshot.rows), pa.int64())}) if with_keys else None
        yield RoundRead(snapshot, keys)

    def lineage_dataset(self) -> LineageDataset:
        return LineageDataset("memory", self.display_name)

    def identity(self) -> HotIdentity:
        return HotIdentity(table=self.table_id)

    def recreate(self) -> None:
        """Drop the table and create it again, empty, under the same name: another table id."""
        self.rows.clear()
        self.table_id = str(int(self.table_id) + 1)


def _read_rows(rows: dict[int, dict[str, Any]], split: MemorySplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    picked = [row for row in rows.values() if split.low < row["version"] <= split.high]
    yield from pa.Table.from_pylist(sorted(picked, key=lambda row: row["version"]), schema).to_batches()


@dataclass(frozen=True)
class MemoryRead:
    """The rows of a :class:`MemoryTable` as a round's snapshot holds them: what its splits read."""

    table: MemoryTable
    rows: dict[int, dict[str, Any]]

    @property
    def display_name(self) -> str:
        return self.table.display_name

    def read_split(self, split: MemorySplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        self.table._reach()  # an unreachable table fails its reads
        return _read_rows(self.rows, split, schema)

    def take_rejects(self) -> list[RejectedRecord]:
        return []


# -- files and the split writer -------------------------------------------------------------------------------
class MemoryFiles(dict[str, pa.Table]):
    """The files a writer wrote and a lake references: path -> rows."""

    def under(self, directory: str) -> list[str]:
        return [path for path in self if path.startswith(directory.rstrip("/") + "/")]


class MemoryWriter:
    """Writes each split as one file under the attempt's directory (a :class:`SplitWriter`). ``dead_attempts``:
    every split also leaves the file of a task attempt that died (Spark reran it); ``fail_split``: that split's
    read fails; ``before_write``: called before the files are written (a test injects a crash or a rival round)."""

    def __init__(self, files: MemoryFiles, *, parallelism: int = 2) -> None:
        self.files = files
        self._parallelism = parallelism
        self.dead_attempts = False
        self.fail_split: int | None = None
        self.before_write: Callable[[], None] | None = None
        self.started = False
        self.jobs = 0

    @property
    def parallelism(self) -> int:
        self.started = True
        return self._parallelism

    @property
    def writes_single_split_locally(self) -> bool:
        return True

    def write(
        self,
        reader: SplitReader[SplitT],
        splits: Sequence[SplitT],
        read_schema: pa.Schema,
        target: WriteTarget,
        *,
        rejects_uri: str | None = None,
    ) -> list[WrittenFile]:
        self.jobs += 1
        if self.before_write is not None:
            self.before_write()
        written = []
        for split in splits:
            if split.index == self.fail_split:
                raise SourceError(f"split {split.index} of {reader.display_name} failed")
            rows = pa.Table.from_batches(list(reader.read_split(split, read_schema)), read_schema)
            if self.dead_attempts:
                self.files[f"{target.directory_uri}/part-{split.index}-dead.parquet"] = rows.slice(0, 1)
            path = f"{target.directory_uri}/part-{split.index}.parquet"
            self.files[path] = rows
            written.append(WrittenFile(path, rows.num_rows, rows.nbytes, split.index))
        return written

    def stop(self) -> None:
        self.started = False


# -- the lake -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemorySnapshot:
    snapshot_id: int
    files: tuple[str, ...]
    #: The tiering commit it carries (None: a snapshot of another writer, e.g. maintenance).
    commit: TieringCommit | None


@dataclass
class MemoryLake:
    """One lake table in memory (a :class:`~airflow_provider_tiering.core.ports.Lake`). ``unavailable``: its
    catalog refuses every call, as during an outage."""

    files: MemoryFiles
    location: str = "memory://warehouse/n/t"
    snapshots: list[MemorySnapshot] = field(default_factory=list)
    schema: pa.Schema | None = None
    recorded: LakeShape | None = None
    unavailable: bool = False
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def _catalog(self) -> None:
        if self.unavailable:
            raise LakeError("the catalog is unreachable")

    # -- what a test reads
    def rows(self) -> pa.Table:
        current = self.snapshots[-1].files if self.snapshots else ()
        return pa.concat_tables([self.files[p] for p in current]) if current else SCHEMA.empty_table()

    def referenced(self) -> set[str]:
        return {path for snapshot in self.snapshots for path in snapshot.files}

    def unreferenced(self) -> list[str]:
        return sorted(set(self.files) - self.referenced())

    # -- the port
    def ensure_table(self, schema: pa.Schema, key: Sequence[str] = (), identity: HotIdentity | None = None) -> str:
        self._catalog()
        if self.schema is None:
            self.schema, self.recorded = schema, LakeShape(identity=identity, columns=tuple(schema.names))
        return self.location

    def shape(self) -> LakeShape | None:
        return self.recorded

    def follow_shape(
        self,
        schema: pa.Schema,
        identity: HotIdentity,
        declared: DeclaredColumnChanges,
        decide: Callable[[ShapeChanges], ShapeDecision],
        *,
        key: Sequence[str] = (),
        by_name: bool = False,
        partial: bool = False,
    ) -> ShapeChanges:
        if self.schema is not None and schema.names != self.schema.names:
            raise SchemaConflict(f"the in-memory lake does not follow a change of columns ({schema.names})")
        decide(ShapeChanges())
        return ShapeChanges()

    def record_hot_table(self, identity: HotIdentity, *, reloaded: bool = False) -> None:
        self.recorded = LakeShape(identity=identity, columns=() if self.schema is None else tuple(self.schema.names))

    def backfill(self, writer: Any, *, target_file_bytes: int, table_name: str) -> int:
        return 0  # this lake never records a pending backfill (it follows no added columns)

    def total_rows(self) -> int:
        return self.rows().num_rows

    def rows_not_held(
        self,
        rows: pa.Table,
        *,
        cursor: tuple[str, CursorValue] | None = None,
        lake_names: Mapping[str, str] | None = None,
    ) -> int:
        held = Counter(tuple(row.values()) for row in self.rows().select(rows.schema.names).to_pylist())
        missing = Counter(tuple(row.values()) for row in rows.to_pylist()) - held
        return sum(missing.values())

    def keys_not_held(
        self, rows: pa.Table, key: Sequence[str], *, lake_names: Mapping[str, str | None] | None = None
    ) -> pa.Table:
        held = Counter(tuple(row.values()) for row in self.rows().select(rows.schema.names).to_pylist())
        short = [row for row in rows.to_pylist() if held[tuple(row.values())] == 0]
        return pa.Table.from_pylist([{c: row[c] for c in key} for row in short], rows.select(key).schema)

    def write_target(
        self, epoch: int, attempt: str, target_file_bytes: int, *, change_stream: bool = False
    ) -> WriteTarget:
        if change_stream or self.schema is None:
            raise LakeError("the in-memory lake holds no change-stream rows and needs its table first")
        directory = f"{self.location}/staging/epoch={epoch}/{attempt}"
        return WriteTarget(directory, self.schema, target_file_bytes=target_file_bytes)

    def storage(self) -> Mapping[str, str]:
        return {}

    def committed(self) -> LakeCommit | None:
        self._catalog()
        for snapshot in reversed(self.snapshots):
            if snapshot.commit is not None:
                found = snapshot.commit
                return LakeCommit(snapshot.snapshot_id, found.epoch, found.end_offsets, found.committed_at)
        return None

    def tiering_commits(self, after_epoch: int) -> list[TieringCommit]:
        return [s.commit for s in self.snapshots if s.commit is not None and s.commit.epoch > after_epoch]

    def _fence(self, epoch: int, start: Offsets | None, files: Sequence[WrittenFile]) -> None:
        """The Iceberg lake's check, made in the same step as the swap (one process: nothing runs in between)."""
        self._catalog()
        lake = self.committed()
        if (None if lake is None else lake.end_offsets) != start or (lake is not None and lake.epoch >= epoch):
            raise FencedError(f"epoch {epoch} fenced: the lake is at {lake}")
        gone = [f.path for f in files if f.path not in self.files]
        if gone:
            raise LakeError(f"files to commit are gone: {gone}")

    def _add(
        self, files: tuple[str, ...], epoch: int, start: Offsets | None, end: Offsets, written: Sequence[WrittenFile]
    ) -> int:
        snapshot_id = next(self._ids)
        commit = TieringCommit(
            snapshot_id, epoch, start, end, sum(f.rows for f in written),
            sum(f.bytes for f in written), len(written), datetime.now(UTC),
        )  # fmt: skip
        self.snapshots.append(MemorySnapshot(snapshot_id, files, commit))
        return snapshot_id

    def commit(
        self,
        files: Sequence[WrittenFile],
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        table_name: str,
        attempt: str,
        identity: HotIdentity | None = None,
        reloaded: bool = False,
    ) -> int:
        self._fence(epoch, start, files)
        current = self.snapshots[-1].files if self.snapshots else ()
        return self._add((*current, *(f.path for f in files)), epoch, start, end, files)

    def merge(
        self,
        files: Sequence[WrittenFile],
        key: MergeKey,
        *,
        epoch: int,
        start: Offsets | None,
        end: Offsets,
        table_name: str,
        attempt: str,
        hot_keys: pa.Table | None = None,
        identity: HotIdentity | None = None,
        reloaded: bool = False,
        target_file_bytes: int = 128 * 1024 * 1024,
        copy_on_write_fraction: float = 0.5,
        writer: Any = None,
    ) -> MergeResult:
        """Copy-on-write into one file: the latest version (greatest cursor) of each key the round read replaces
        the lake's row; with ``hot_keys``, the lake's keys missing from them (and from the round) are removed."""
        self._fence(epoch, start, files)
        names = list(key.columns)
        before = {tuple(row[c] for c in names): row for row in self.rows().to_pylist()}
        read = [row for f in files for row in self.files[f.path].to_pylist()]
        latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in sorted(read, key=lambda row: row[key.cursor] if key.cursor else 0):
            latest[tuple(row[c] for c in names)] = row
        after = {**before, **latest}
        if hot_keys is not None:
            live = {tuple(row[c] for c in names) for row in hot_keys.to_pylist()} | set(latest)
            after = {k: row for k, row in after.items() if k in live}
        path = f"{self.location}/staging/epoch={epoch}/{attempt}/merged.parquet"
        self.files[path] = pa.Table.from_pylist(list(after.values()), self.schema)
        merged = WrittenFile(path, len(after), self.files[path].nbytes, 0)
        snapshot_id = self._add((path,), epoch, start, end, [merged])
        return MergeResult(
            snapshot_id, (merged,), removed_files=1 if before else 0, upserted_rows=len(latest), deleted_keys=0,
            inserted_rows=len(set(latest) - set(before)), updated_rows=len(set(latest) & set(before)),
            deleted_rows=len(set(before) - set(after)),
        )  # fmt: skip

    def keys_not_in(self, hot_keys: pa.Table, key: MergeKey) -> int:
        live = {tuple(row.values()) for row in hot_keys.select(list(key.columns)).to_pylist()}
        held = {tuple(row.values()) for row in self.rows().select(list(key.columns)).to_pylist()}
        return len(held - live)

    def clean(self, committed_epoch: int, since_epoch: int = 0) -> int:
        doomed = [
            path
            for path in self.files.under(f"{self.location}/staging")
            if since_epoch < int(path.split("/epoch=")[1].split("/")[0]) < committed_epoch
            and path not in self.referenced()
        ]
        for path in doomed:
            del self.files[path]
        return len(doomed)

    def clean_attempt(self, epoch: int, attempt: str, keep: Sequence[str]) -> int:
        doomed = [p for p in self.files.under(f"{self.location}/staging/epoch={epoch}/{attempt}") if p not in keep]
        for path in doomed:
            del self.files[path]
        return len(doomed)

    def rows_in_cursor_range(self, column: str, lower: object, upper: object, like: pa.Table) -> pa.Table:
        rows = self.rows()
        kind = rows.schema.field(column).type
        low, high = pa.scalar(lower, type=kind), pa.scalar(upper, type=kind)
        mask = pc.and_(pc.greater_equal(rows[column], low), pc.less_equal(rows[column], high))
        return rows.filter(mask).select(like.schema.names).cast(like.schema)

    def rows_with_keys(self, key: Sequence[str], like: pa.Table) -> pa.Table:
        wanted = {tuple(row.values()) for row in like.select(list(key)).to_pylist()}
        rows = self.rows()
        mask = [tuple(row[c] for c in key) in wanted for row in rows.to_pylist()]
        return rows.filter(pa.array(mask, pa.bool_())).select(like.schema.names).cast(like.schema)


class MemoryStateStore:
    """The state document kept as JSON (a :class:`~airflow_provider_tiering.core.state_store.StateStore`): a
    saved state is a copy, as it is in Airflow's store."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None
        self.saves = 0

    def load(self) -> TableState | None:
        return None if self.doc is None else TableState.from_json(self.doc)

    def save(self, state: TableState) -> None:
        self.doc, self.saves = state.to_json(), self.saves + 1
