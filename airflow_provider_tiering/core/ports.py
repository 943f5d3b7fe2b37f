"""The kernel's ports: what a round needs from a hot store, a lake, a split writer and a rejects table.

Everything here is an interface or a value passed through one. Implementations live outside the kernel:
``sources/`` (hot stores, one module per kind, found through ``sources/registry.py``), ``lake/`` (Iceberg) and
``spark/`` (the write job); ``build.py`` assembles them for a table. Third-party types (Arrow) are only named
for the type checker: the kernel itself imports none of them.

A source owns its plan and split types: a SQL table plans cursor ranges (``core/planner.py``), a landing zone
plans sets of files. The kernel only asks a plan whether it is empty and how much it left for later, and a
split for its index; everything else about them is between the source and its own reader, which runs inside a
Spark task (so sources, splits and partitioners must pickle).
"""

from __future__ import annotations

import copy
import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeAlias, TypeVar
from urllib.parse import urlsplit

from typing_extensions import TypedDict

from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.offsets import CursorValue, Offsets, SafeEnd

if TYPE_CHECKING:  # pyarrow is imported where it is used: probing for new rows needs none of it
    import pyarrow as pa

    from airflow_provider_tiering.core.shape import (
        AddedValues,
        ColumnHistory,
        DeclaredColumnChanges,
        HotIdentity,
        InPlaceChanges,
        LakeShape,
        ShapeChanges,
        ShapeDecision,
    )


#: A key's values, in key order, as the hot store's driver gives them (ints, strings, times, decimals, UUIDs...):
#: handed back to the same store only, never written to the lake or a document.
KeyValues = tuple[object, ...]


class RejectedRecord(TypedDict):
    """A bad record a read set aside (``on_bad_record="side_table"``), a row of the table's rejects side table."""

    source_file: str
    line: int
    #: Its raw text, cut at ``text_records.REJECT_RECORD_BYTES``.
    record: str
    reason: str


class FileKind(enum.StrEnum):
    """What a written Parquet file holds."""

    DATA = "data"  # rows of the lake table
    REJECTS = "rejects"  # bad records, for the table's side table
    POSITION_DELETES = "position_deletes"  # rows of lake data files a merge deleted (``file_path``, ``pos``)


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file a split writer wrote, not yet visible to readers: only this metadata travels to the driver."""

    path: str
    rows: int
    bytes: int
    split_index: int
    #: The file's partition record values as JSON (see ``lake/partitioner.py``); "[]" when unpartitioned.
    partition: str = "[]"
    kind: FileKind = FileKind.DATA


#: The columns a change stream's rows carry beside the table's, in the files a round stages (never in the lake):
#: the key was deleted last; as JSON, the key whose latest earlier version (in an earlier chunk of the round, else
#: the lake's row) holds the values of the columns an update left unchanged (TOAST) that no change of its own chunk
#: carried: ``{"key": [...], "columns": [...]}``; and the chunk of the round's changes the row belongs to (a key's
#: version in a later chunk supersedes its earlier ones; a first load's rows are chunk 0).
CHANGE_DELETED = "__tiering_deleted"
CHANGE_FILL = "__tiering_fill"
CHANGE_CHUNK = "__tiering_chunk"


@dataclass(frozen=True)
class MergeKey:
    """How a round merges into a primary-key table (``TableSpec.merge``, with the key resolved from the hot table
    when the spec leaves it unset): the lake keeps, per ``columns`` value, the row version with the greatest
    ``cursor`` (None: the one read last, for a change stream read in commit order), and none for a key whose
    latest version has ``soft_delete_column`` set (not null, not false)."""

    columns: tuple[str, ...]
    cursor: str | None
    soft_delete_column: str | None = None
    #: Rows come from a change stream: they carry ``CHANGE_DELETED``, ``CHANGE_FILL`` and ``CHANGE_CHUNK``.
    from_change_stream: bool = False
    #: This round also reads every key of the hot table in its snapshot (``RoundRead.keys``), and the merge
    #: removes the lake's keys that are not among them (hard deletes, the old key of a changed key).
    reconcile: bool = False


@dataclass(frozen=True)
class MergeResult:
    """What a merge commit did: its snapshot, the files it added (the round's surviving rows and the rewrites of
    the files that held their keys) and the files it removed."""

    snapshot_id: int
    added: tuple[WrittenFile, ...]
    removed_files: int
    #: Rows of the round's read that the lake holds after it (the latest live version of each key).
    upserted_rows: int
    #: Keys whose latest version the round read was soft-deleted.
    deleted_keys: int
    #: Values an update left unchanged (TOAST) taken from the lake's stored rows.
    filled_rows: int = 0
    #: What the merge did to the lake: keys it had no row for, keys whose row it replaced, keys it removed
    #: (soft-deleted, deleted in the change stream, or, reconciling, no longer in the hot table).
    inserted_rows: int = 0
    updated_rows: int = 0
    deleted_rows: int = 0
    #: How the lake's files holding changed keys (``removed_files``) and the round's files holding superseded
    #: versions were written again: in how many split writer tasks, whether by the task process itself (the rewrite
    #: fit one split) or on Spark, and the bytes of the files those tasks read and wrote.
    rewrite_tasks: int = 0
    rewritten_in_process: bool = True
    rewrite_bytes_read: int = 0
    rewrite_bytes_written: int = 0
    #: Merge-on-read: the position-delete files the merge committed, the lake files they delete rows of (kept, not
    #: rewritten), and how many rows they delete.
    delete_files: tuple[WrittenFile, ...] = ()
    files_given_deletes: int = 0
    rows_deleted_by_position: int = 0
    #: The lake table's position-delete files and the rows they delete, after the merge (its snapshot's summary).
    lake_delete_files: int | None = None
    lake_deleted_rows: int | None = None


@dataclass(frozen=True)
class LakeCommit:
    """The latest tiering commit of a lake table: what the lake holds (the single source of truth)."""

    snapshot_id: int
    epoch: int
    end_offsets: Offsets | None
    committed_at: datetime


@dataclass(frozen=True)
class TieringCommit:
    """One tiering round's commit as the lake records it (its snapshot and the properties it carries)."""

    snapshot_id: int
    epoch: int
    start_offsets: Offsets | None
    end_offsets: Offsets | None
    rows: int
    bytes: int
    files: int
    committed_at: datetime

    def event_extra(self, table: str) -> dict[str, object]:
        """The asset event a round announces for this commit, ``recovered``: read back from the lake because the
        round that made it did not live to announce it (its duration and lag are unknown)."""
        return {
            "table": table,
            "epoch": self.epoch,
            "snapshot_id": self.snapshot_id,
            "start_offsets": self.start_offsets,
            "end_offsets": self.end_offsets,
            "rows": self.rows,
            "bytes": self.bytes,
            "files": self.files,
            "committed_at": self.committed_at.isoformat(),
            "recovered": True,
        }


@dataclass(frozen=True)
class WatermarkBlocker:
    """An open transaction that may still commit rows below the observed high watermark: its session's ``pid``
    (None for a prepared transaction, named by ``prepared``), and its start and age where the hot store shows them
    to this role."""

    pid: int | None
    transaction_start: str | None
    age_seconds: float | None
    prepared: str | None = None

    def to_json(self) -> JsonObject:
        age = None if self.age_seconds is None else round(self.age_seconds, 1)
        found: JsonObject = {"pid": self.pid, "transaction_start": self.transaction_start, "age_seconds": age}
        if self.prepared is not None:
            found["prepared"] = self.prepared
        return found


@dataclass(frozen=True)
class SafeWatermark:
    """How far a round may tier without risking a row committed later below it.

    ``end`` is the safe end offset (``None``: nothing is safe beyond what the lake has).
    ``observed`` is the raw high watermark; when it is ahead of ``end``, ``blockers`` say why.
    ``candidate`` is an observation that becomes safe once its blockers have ended; the round
    keeps it in the state document and hands it back next time (a cache: losing it only delays).
    """

    end: SafeEnd | None
    observed: SafeEnd | None
    blockers: Sequence[WatermarkBlocker] = ()
    candidate: JsonObject | None = None


@dataclass(frozen=True)
class BehindLook:
    """What a look at the hot store below the committed offsets found.

    ``arrived``: rows that arrived at or below the committed offsets since an earlier look found that stretch
    emptied (no round will ever read them). ``emptied``: the stretch to keep watching (JSON, the source's own;
    None when there is none), handed back to the next look through the state document.
    """

    arrived: int = 0
    emptied: JsonObject | None = None
    #: The emptied stretch in words, for messages (e.g. "id in (50, 100]").
    where: str = ""


@dataclass(frozen=True)
class Probe:
    """What a due table's probe found (:meth:`Source.probe`): rows beyond the committed offsets, its look behind them,
    and how the hot table's identity or shape changed since the last round (``changed``, in words; None: it did
    not, or there was nothing to compare with). Any of them gives its round work to do."""

    has_rows: bool
    behind: BehindLook = field(default_factory=lambda: BehindLook())
    changed: str | None = None

    @property
    def has_work(self) -> bool:
        return self.has_rows or self.behind.arrived > 0 or self.changed is not None


@dataclass(frozen=True)
class TieredSample:
    """What a round checks, after the hot table's storage was replaced (``HotIdentity.storage``), to tell a rewrite
    of the same rows (VACUUM FULL, a rewriting ALTER TABLE) from other rows below the lake's offsets (truncated and
    reloaded, dropped and created again): the rows at the greatest cursor value at or below the offsets (``cursor``,
    as an offset value; None: no row is left there), and how many rows lie at or below the offsets."""

    column: str
    cursor: CursorValue | None
    rows: pa.Table | None
    count: int


@dataclass(frozen=True)
class LineageDataset:
    """A dataset as OpenLineage names it: the hot table a round read, or the lake table it wrote."""

    namespace: str
    name: str
    fields: tuple[tuple[str, str], ...] = ()  # (column, type)
    symlink: tuple[str, str] | None = None  # (namespace, name) of the same dataset under another name


def location_dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a dataset known by its location: ``file`` and the absolute path, or
    ``scheme://authority`` and the path."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return "file", str(Path(parts.path).resolve()) if parts.scheme == "" else parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path


class Split(Protocol):
    """One slice of a round, read and written by one Spark task. Opaque to the kernel beyond its index."""

    @property
    def index(self) -> int:
        """0..n-1 within its round."""
        ...


class Plan(Protocol):
    """What a round will tier, as its source planned it. Opaque to the kernel beyond these two questions."""

    @property
    def is_empty(self) -> bool:
        """Nothing to tier."""
        ...

    @property
    def backlog(self) -> int:
        """How much the per-round cap left for later rounds (rows, or files for a landing zone)."""
        ...


PlanT = TypeVar("PlanT", bound=Plan)
SplitT = TypeVar("SplitT", bound=Split)
SplitT_contra = TypeVar("SplitT_contra", bound=Split, contravariant=True)


class SplitReader(Protocol[SplitT_contra]):
    """What a split writer's tasks read from: a source, or the lake itself for a compaction."""

    @property
    def display_name(self) -> str: ...

    def read_split(self, split: SplitT_contra, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Read one split as record batches of ``schema``. Runs inside a Spark task; re-runnable.

        Raises:
            SourceError: the split could not be read (unreachable, changed underfoot, a value does not convert).
        """
        ...

    def take_rejects(self) -> list[RejectedRecord]:
        """Bad records set aside by the last ``read_split``; emptied on read."""
        ...


@dataclass(frozen=True)
class RoundRead(Generic[SplitT]):
    """What a round reads through while it holds one snapshot of its source (:meth:`Source.reading_one_snapshot`):
    it lives as long as that snapshot, so nothing of it is left on the source for a later round to find."""

    #: What the split writer reads the round's splits with: the source itself (pickled to Spark tasks), or a reader
    #: that only this process can use (the round's open transaction, the changes its plan already read).
    reader: SplitReader[SplitT]
    #: Every key of the hot table in that very snapshot, read on entering (asked for with ``with_keys``, by a
    #: round that reconciles, ``MergeKey.reconcile``); None when not asked for.
    keys: pa.Table | None = None


class EvictionSource(Protocol):
    """A hot store that can delete rows the lake holds (see ``core/eviction.py``)."""

    def evicting(self) -> AbstractContextManager[None]:
        """Around the batches of one eviction (a source may keep one connection open meanwhile)."""
        ...

    def evict_batch(
        self,
        after: CursorValue | None,
        upto: CursorValue,
        cutoff: datetime,
        age_column: str | None,
        limit: int,
        verify: VerifyRows,
    ) -> tuple[int, CursorValue | None]:
        """Delete up to ``limit`` rows with ``after < cursor <= upto`` older than ``cutoff``, in cursor order, each
        one only if ``verify`` (given them, as tiered) accepts the lot; one transaction.

        Returns:
            (rows deleted, the batch's last cursor value as an offset value; None when no row qualified).
        Raises:
            SourceError: the rows could not be read, locked or deleted (nothing of the batch was deleted).
            LakeError: raised by ``verify``: the lake does not hold the rows as they are (nothing was deleted).
        """
        ...


class HeldRows(Protocol):
    def __call__(self, rows: pa.Table, /) -> Sequence[bool]:
        """For each of ``rows``, whether the lake holds it exactly as it is: only those are deleted, the others stay
        in the hot store (raise to roll the whole batch back)."""
        ...


@dataclass(frozen=True)
class KeyBatch:
    """One batch of an eviction walked in key order: ``read`` rows qualified (old enough, after the last key),
    ``deleted`` of them were deleted, ``last`` is the key of the last one read (None: no row qualified)."""

    read: int
    deleted: int
    last: KeyValues | None


class KeyedEvictionSource(Protocol):
    """A hot table without a cursor (a change stream's) that can delete the rows the lake holds, walked in key order
    (see ``core/eviction.py``, ``evict_by_key``). Its deletes must never reach the lake as deletes."""

    def evicting(self) -> AbstractContextManager[None]:
        """Around the batches of one eviction: checks that the hot store lets this role delete without the deletes
        reaching the lake (a change stream: its replication origin), and may keep one connection open.

        Raises:
            SourceError: this role may not evict (the message names the grant); nothing was deleted.
        """
        ...

    def evict_key_batch(
        self,
        key: Sequence[str],
        after: KeyValues | None,
        cutoff: datetime,
        age_column: str,
        limit: int,
        held: HeldRows,
    ) -> KeyBatch:
        """In one transaction: read and lock up to ``limit`` rows with ``age_column`` before ``cutoff`` and a key
        (the ``key`` columns) greater than ``after`` (None: from the first), in key order; hand them (as tiered) to
        ``held`` and delete exactly the rows it marks, by physical row id, so that the lake's change stream skips
        the deletes.

        Raises:
            SourceError: the rows could not be read, locked or deleted (nothing of the batch was deleted).
            LakeError: raised by ``held``: the lake's rows cannot be compared (nothing was deleted).
        """
        ...


class TiersReader(Protocol):
    """A hot store that can fix a snapshot of its table and read the rows beyond some offsets in it (reading
    across tiers, ``across_tiers.py``)."""

    #: The hot table holds every live row of the table (a change-stream table, never evicted): a read across
    #: tiers takes all of it from one hot snapshot and nothing from the lake.
    holds_every_row: bool

    def rows_after_reader(self) -> AbstractContextManager[Callable[[Offsets | None], pa.Table]]:
        """Fix a snapshot of the hot table on entry; inside the block, ``read(offsets)`` returns its rows beyond
        ``offsets`` as of that moment (``None``: every row).

        Raises:
            SourceError: the snapshot cannot be taken or read.
        """
        ...


class VerifyRows(Protocol):
    def __call__(self, rows: pa.Table, /) -> None:
        """Raise to keep ``rows`` (roll the batch back)."""
        ...


class Source(ABC, Generic[PlanT, SplitT]):
    """A hot store that a round reads from; ``PlanT`` and ``SplitT`` are its own plan and split types.

    Instances are pickled to Spark executors for ``read_split``: open connections and listings lazily.
    Every method may raise :class:`~airflow_provider_tiering.core.errors.SourceError` when the hot store is
    unreachable, the table or a column is missing, or a type cannot be tiered.
    """

    #: Human-readable name for messages (never contains credentials).
    display_name: str

    def for_round(self) -> Self:
        """This source for one round: the kernel calls it as a round opens and the round uses only what it returns.
        What a round binds (its key, its lake, its column history) and what it reads once and keeps (the table's
        columns and identity, a listing) start empty in it, so that a round never finds an earlier round's; it holds
        no connection of this object's."""
        session = copy.copy(self)  # copy's protocol goes through ``__getstate__``: the connections it drops stay behind
        session._begin_round()
        return session

    def _begin_round(self) -> None:
        """Called on a round's fresh copy (:meth:`for_round`): reset what a round binds or reads once and keeps."""
        return None

    @abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of the tiered columns, as written to the lake; empty when it cannot be known yet
        (a landing zone of Parquet files where none has landed)."""

    @abstractmethod
    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """The end offset this round may safely tier up to: no row can still commit at or below it.

        ``committed`` is the lake's end offsets; ``candidate`` what the last round kept (see :class:`SafeWatermark`).
        """

    @abstractmethod
    def has_rows_after(self, committed: Offsets | None) -> bool:
        """Whether the hot store holds any row beyond ``committed`` (a cheap probe, safe or not)."""

    def probe(self, committed: Offsets | None, emptied: JsonObject | None, shape: JsonObject | None) -> Probe:
        """A due table's probe: whether a round has work, on one connection. First the hot table's identity and
        shape (one catalogue query) against ``shape``, what the last round recorded (``HotIdentity.shape_json``;
        None: nothing to compare with): a table dropped and created again, truncated, rewritten or given other
        columns runs its round, which follows the change or refuses it, even when no row is new (a re-created
        table's change stream holds nothing, its new rows may lie below the offsets). Then rows that arrived behind
        ``committed`` (the round then fails naming them; see :meth:`look_behind`), and rows beyond it."""
        from airflow_provider_tiering.core.shape import shape_change

        with self.connected():
            changed = None if shape is None else shape_change(shape, self.identity())
            if changed is not None:
                return Probe(False, BehindLook(emptied=emptied), changed)
            behind = self.look_behind(committed, emptied)
            return Probe(behind.arrived == 0 and self.has_rows_after(committed), behind)

    def look_behind(self, committed: Offsets | None, emptied: JsonObject | None) -> BehindLook:
        """Whether rows arrived at or below ``committed``, where no round reads. A cursor goes backwards when the
        newest rows the lake holds leave the hot store (a table truncated and reloaded, rows evicted or deleted)
        and new ones take cursor values from below (a restarted sequence, SQLite reusing ``max(rowid) + 1``). A
        look that finds the hot store's newest cursor below ``committed`` returns that stretch as ``emptied``;
        later looks count the rows arriving in it, and drop it once rows beyond it exist again. A source whose
        offsets new items cannot fall behind (a landing zone lists every file it has not tiered) finds nothing."""
        return BehindLook()

    @abstractmethod
    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> PlanT:
        """Measure what lies in ``(start, end]`` and cap it at about ``max_rows`` rows."""

    @abstractmethod
    def cut_splits(self, plan: PlanT, target_rows_per_split: int, parallelism: int) -> list[SplitT]:
        """Cut a plan into splits of balanced estimated size, indexed 0..n-1; deterministic for equal input."""

    @abstractmethod
    def end_offsets(self, plan: PlanT) -> Offsets:
        """The offsets the lake holds once ``plan`` is committed (a landing zone writes its file log here)."""

    @abstractmethod
    def read_split(self, split: SplitT, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Read one split as record batches of exactly ``schema``. Runs inside a Spark task; re-runnable."""

    def connected(self) -> AbstractContextManager[None]:
        """Held while the round plans (entered once, around every call of its planning): the source may keep one
        connection to the hot store for its catalogue and planning queries, opened at the first and closed at the
        end, instead of one per query. Outside it each query connects on its own; a Spark task never sees it."""
        return nullcontext()

    def reading_one_snapshot(
        self, plan: PlanT | None, splits: Sequence[SplitT], *, read_here: bool = False, with_keys: bool = False
    ) -> AbstractContextManager[RoundRead[SplitT]]:
        """Held while the round reads ``splits`` of ``plan`` (entered after the safe watermark, before the Spark
        job; ``plan`` is None for a round that reads only the keys): every split, and every attempt of it, reads
        the same consistent snapshot of the source, so each row version is read exactly once whatever commits
        meanwhile. Splits of immutable things (files) need nothing shared. Yields what the round reads through
        (:class:`RoundRead`), which holds the round's own state (an open transaction, changes read by the plan).
        ``read_here``: the one split is read by this process, in this thread (the writer's local write).
        ``with_keys``: a reconciling round (``MergeKey.reconcile``) also reads every key of the hot table in that
        snapshot, on entering, before any split (``RoundRead.keys``: the columns of the key bound with
        :meth:`bind_key`, typed as :meth:`schema` types them).

        Raises:
            SourceError: ``with_keys``, and this source cannot read its keys (only SQL tables merged by cursor and
                a change stream's load can).
        """
        if with_keys:
            from airflow_provider_tiering.core.errors import SourceError

            raise SourceError(f"{self.display_name} cannot read every key of its table (key reconciliation)")
        return nullcontext(RoundRead(self))

    @abstractmethod
    def lineage_dataset(self) -> LineageDataset:
        """The hot table as an OpenLineage dataset (never with credentials)."""

    def secrets(self) -> list[str]:
        """Credentials this source holds, so errors can be masked."""
        return []

    #: Whether the source keeps what its offsets name in the lake (a landing zone's offsets log): a probe, which
    #: runs before any catalog is loaded, then binds the lake's storage properties first (``bind_lake(None, …)``).
    reads_offsets_from_lake: bool = False

    #: Whether the source reads its changes from a stream group's change log (a table of a group): the builder binds
    #: the log to it (``bind_change_log``).
    reads_change_log: bool = False

    def bind_change_log(
        self, change_log: ChangeLogTable | None, announced: Callable[[str], tuple[int, int] | None] | None = None
    ) -> None:
        """Called, for a source that ``reads_change_log``, with its group's change log (a round's), or with what the
        group's reader announced of each table (a probe's: the position from which the log holds its changes and that
        of its newest change, 0 for none; None when not known)."""
        return None

    def bind_lake(self, table_location: str | None, storage: Mapping[str, str]) -> None:
        """Called with the lake's storage properties (its FileIO's: endpoint, credentials) and, once the lake table
        exists, its location (None: not known, e.g. a probe); a source may keep offset logs there."""
        return None

    def take_rejects(self) -> list[RejectedRecord]:
        """Bad records set aside by the last ``read_split`` (``on_bad_record="side_table"``); emptied on read."""
        return []

    def after_commit(self, committed: Offsets) -> int:
        """Best-effort housekeeping once ``committed`` is in the lake (e.g. archive tiered files); returns a count."""
        return 0

    def stream_status(self) -> JsonObject | None:
        """A change stream's slot as the hot store shows it, JSON (see ``TableState.change_stream``): ``slot``,
        ``retained_wal_bytes``, ``max_retained_wal_bytes``...; None for a source without one. A field this round
        cannot tell (what a plan measures, when the round failed before planning) is left out: the state keeps its
        last known value."""
        return None

    def bind_key(self, key: MergeKey) -> None:
        """Called once a round, before planning, with a merge table's key (a change stream reduces its changes by
        it; a reconciling round reads its columns, ``RoundRead.keys``)."""
        return None

    def primary_key(self) -> tuple[str, ...] | None:
        """The hot table's own primary key columns, in key order; () when it has none, None when this kind of
        source cannot tell."""
        return None

    def evictor(self) -> EvictionSource | None:
        """This source's eviction of tiered rows, or None when it cannot delete rows (a landing zone)."""
        return None

    def keyed_evictor(self) -> KeyedEvictionSource | None:
        """This source's eviction walked in key order, for a table without a cursor (a change stream's), or None."""
        return None

    def tiers_reader(self) -> TiersReader | None:
        """This source's consistent read of the rows beyond the lake's offsets, or None (a landing zone)."""
        return None

    # -- the hot table's shape and identity (``core/follow_shape.py``) --------------------------------------
    def identity(self) -> HotIdentity:
        """How the lake tells this hot table and its columns from others of the same name (see :class:`HotIdentity`);
        a source whose store keeps no such ids returns an empty one."""
        from airflow_provider_tiering.core.shape import HotIdentity

        return HotIdentity()

    def added_column_values(self, column: str, tiered: Offsets | None, rewritten: bool) -> AddedValues:
        """What the rows the lake already holds (``tiered``: the lake's offsets; None: every row of the hot table)
        hold in ``column``, newly added to the hot table, as the hot store has them now (see :class:`AddedValues`).
        ``rewritten``: the table's storage was replaced since the lake last looked (or it cannot tell), so a value
        per row may have been written without a change each. A source whose old items cannot gain a column's
        values (files) answers NULL."""
        from airflow_provider_tiering.core.shape import AddedValues, AddedValuesKind

        return AddedValues(AddedValuesKind.NULL, how="rows already tiered cannot gain values")

    def tiered_sample(self, tiered: Offsets) -> TieredSample | None:
        """The rows at the greatest cursor value at or below ``tiered`` and how many rows lie there (see
        :class:`TieredSample`); None for a source whose rows are not ordered by a cursor."""
        return None

    def rows_rewritten(self, horizon: str, tiered: Offsets | None) -> bool | None:
        """Whether every row the lake holds (``tiered``: its offsets; None: every row of the table) was written after
        ``horizon`` (``HotIdentity.horizon`` as the lake recorded it): the table was rewritten or reloaded, not only
        moved (VACUUM FULL). None when the store cannot tell."""
        return None

    def truncated_since(self, committed: Offsets) -> bool:
        """Whether the changes since ``committed`` that wait to be tiered hold a TRUNCATE of the table (a change
        stream's: it refuses one rather than follow it)."""
        return False

    def tiered_column_values(self, columns: Sequence[str], tiered: Offsets) -> pa.Table | None:
        """``columns`` of every row at or below ``tiered``, in one snapshot (to check a promoted column's values
        against the lake's); None for a source that cannot select such rows."""
        return None

    def bind_column_history(self, history: ColumnHistory) -> None:
        """Called before planning with what the lake knows of the columns' former names and initial defaults (a
        change stream decodes changes made before the last change of shape with it)."""
        return None

    def read_again(self, keys: pa.Table) -> bool:
        """Called before planning, after the hot table was rewritten without a change each (an ``ALTER TABLE ...
        TYPE ... USING``): the rows of ``keys`` (the merge key's columns) hold values the lake does not, and this
        round reads them again by key. False for a source that cannot (a merge round then reads the whole table
        again); a change stream reads them with its changes."""
        return False

    def check_shape_unchanged(self) -> None:
        """Called after the round's rows are written, before its commit: raise
        :class:`~airflow_provider_tiering.core.errors.ShapeChangedDuringRound` if the hot table's columns changed
        since :meth:`schema` read them (what was read may lack a column's values)."""
        return None

    def in_place_changes(self) -> InPlaceChanges | None:
        """Rows of the hot table updated and deleted so far, as the hot store counts them (an append table's
        contract, watched); None when the store does not count them."""
        return None


#: A source of whichever kind, for code that builds one or hands it on without planning with it (a builder, the
#: registry, reads across tiers): its plan and split types stay between it and its own reader. Python has no
#: "some PlanT" (existential) type, so they are ``Any`` here; code that plans keeps the generics (``run_round``,
#: ``follow_hot_shape``, ``resolve_merge_key``).
AnySource: TypeAlias = "Source[Any, Any]"


class RowPartitioner(Protocol):
    """Cuts a batch of rows by the lake table's partition spec (``lake/partitioner.py``); pickled to Spark tasks."""

    @property
    def is_partitioned(self) -> bool: ...

    def split(self, table: pa.Table) -> Iterator[tuple[list[object], str, pa.Table]]:
        """Yield ``(partition record values, partition path, rows)`` per partition present in ``table``."""
        ...


@dataclass(frozen=True)
class WriteTarget:
    """Where and how a round's files are written: a staging directory no reader sees, in the lake's schema."""

    directory_uri: str
    schema: pa.Schema
    partitioner: RowPartitioner | None = None
    target_file_bytes: int = 128 * 1024 * 1024
    #: The lake's storage properties (its FileIO's: endpoint, credentials, region) the writer opens the directory
    #: with, in a Spark task as in this process; never the writer's own environment. Left out of ``repr``.
    storage: Mapping[str, str] = field(default_factory=dict, repr=False)


class SplitWriter(Protocol):
    """Writes splits as Parquet files, in parallel (a Spark job: one task per split)."""

    @property
    def parallelism(self) -> int:
        """How many splits run at once (the Spark task slots); asking may start the Spark session."""
        ...

    @property
    def writes_single_split_locally(self) -> bool:
        """Whether a round of one split is written by this process itself, without starting Spark."""
        ...

    def write(
        self,
        reader: SplitReader[SplitT],
        splits: Sequence[SplitT],
        read_schema: pa.Schema,
        target: WriteTarget,
        *,
        rejects_uri: str | None = None,
    ) -> list[WrittenFile]:
        """Read every split with ``reader`` (in ``read_schema``) and write it into ``target``; rejects files, if the
        reader set records aside, go under ``rejects_uri``. Returns the files of the successful task attempts only.

        Raises:
            SourceError: a split could not be read (a task's error, condensed).
            SparkUnavailable: the Spark master or Connect server cannot be reached; nothing was written.
            InvalidPlan: the splits are not indexed 0..n-1.
        """
        ...

    def stop(self) -> None:
        """Release the Spark session, if one was started."""
        ...


class Lake(Protocol):
    """The lake table of one tiered table (``lake/iceberg.py``). Its latest tiering commit is the single source of
    truth for what has been tiered."""

    def ensure_table(self, schema: pa.Schema, key: Sequence[str] = (), identity: HotIdentity | None = None) -> str:
        """Create the table on the first round (schema, partition spec and the record of the hot table's
        ``identity`` and column ids in one commit); returns the table's location. A ``key`` (a merge table's) becomes
        the table's identifier fields while it holds no rows; its columns must be required in ``schema``.

        Raises:
            LakeError: the catalog or the table cannot be loaded, or its partitioning differs from the spec's.
            MergeKeyUnusable: the table holds rows under another key.
        """
        ...

    def shape(self) -> LakeShape | None:
        """What the lake table recorded of its hot table (identity, column ids, former names, initial defaults,
        pending reload and backfill); None before the table exists."""
        ...

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
        """Let the table's schema follow the hot table's ``schema``: columns matched by the ids of ``identity`` (by
        name where the store keeps none, or with ``by_name``), renamed, added, promoted, made optional (``partial``:
        ``schema`` holds only what a round reads, so absent columns stay as they are); ``decide``
        says, for what changed, each added column's initial default, whether the whole hot table must be read again
        (recorded as pending in the same commit) and whether defaults are backfilled. Returns what changed.

        Raises:
            SchemaConflict: a change the lake cannot follow (or ``decide`` refused one); nothing was changed.
            AmbiguousColumnChange: a column gone and another new, in a store without column ids, undeclared.
        """
        ...

    def record_hot_table(self, identity: HotIdentity, *, reloaded: bool = False) -> None:
        """Record ``identity`` as the hot table's, outside a tiering commit (a round with nothing to tier found the
        table's rows unchanged), and with ``reloaded`` clear the pending reload (it found nothing to merge)."""
        ...

    def backfill(self, writer: SplitWriter, *, target_file_bytes: int, table_name: str) -> int:
        """Write the initial defaults pending backfill into the files that lack their columns (on ``writer``),
        committed fenced like a compaction; returns how many files were rewritten."""
        ...

    def total_rows(self) -> int:
        """Rows in the current snapshot (from its summary)."""
        ...

    def rows_not_held(
        self,
        rows: pa.Table,
        *,
        cursor: tuple[str, CursorValue] | None = None,
        lake_names: Mapping[str, str] | None = None,
    ) -> int:
        """How many of the hot table's ``rows`` (counted with repeats, value for value in their columns) the current
        snapshot lacks: among its rows whose ``cursor`` column equals the value given, or among all its rows (the
        lake's column of each of ``rows``' columns named by ``lake_names`` where it differs, its values read as
        ``rows`` types them).

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...

    def keys_not_held(
        self, rows: pa.Table, key: Sequence[str], *, lake_names: Mapping[str, str | None] | None = None
    ) -> pa.Table:
        """The ``key`` columns of those of the hot table's ``rows`` that the current snapshot lacks value for value
        (each column read from the lake's column ``lake_names`` names, as ``rows`` types it; None: one the lake does
        not have, compared with NULL): the rows a change stream reads again after a rewrite its stream does not
        carry.

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...

    def write_target(
        self, epoch: int, attempt: str, target_file_bytes: int, *, change_stream: bool = False
    ) -> WriteTarget:
        """Where this attempt writes its data files, and in which schema and partitioning; for a change stream's
        round, with the ``CHANGE_DELETED``, ``CHANGE_FILL`` and ``CHANGE_CHUNK`` columns too (its files are rewritten
        by the merge)."""
        ...

    def storage(self) -> Mapping[str, str]:
        """The table's storage properties (its FileIO's), for whatever else a round keeps next to it."""
        ...

    def committed(self) -> LakeCommit | None:
        """The lake's latest tiering commit, fresh from the catalog; None before the first round.

        Raises:
            LakeError: the committed offsets cannot be known (their snapshots were expired by an older version).
        """
        ...

    def tiering_commits(self, after_epoch: int) -> list[TieringCommit]:
        """The tiering commits with an epoch above ``after_epoch`` among the current snapshot's ancestry, oldest
        first (those whose snapshots were expired are gone)."""
        ...

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
        """Add all ``files`` in one snapshot carrying ``epoch`` and the offsets; returns its snapshot id. The same swap
        records the hot table's ``identity`` as the round planned with it, and with ``reloaded`` (the round read the
        whole hot table again) clears the pending reload.

        Raises:
            FencedError: the lake's offsets are not ``start`` or its epoch is not below ``epoch``: a newer attempt
                committed first. Nothing was committed.
            CommitConflict: the catalog's atomic swap was lost too often to unrelated commits. Nothing was committed.
            LakeError: the table disappeared or the catalog refused the commit.
        """
        ...

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
        writer: SplitWriter,
    ) -> MergeResult:
        """Merge a round's rows (``files``, every version it read) into a primary-key table, in one snapshot
        carrying ``epoch`` and the offsets: the latest live version of each key is added, and each lake file holding
        any of the round's keys either keeps its rows, the superseded ones deleted by position-delete files
        (merge-on-read), or, when the round takes at least ``copy_on_write_fraction`` of its live rows out (0: every
        such file), is rewritten without them (copy-on-write, cut at ``target_file_bytes``, by ``writer``'s tasks:
        Spark's, or this process's when the rewrite fits one split and the writer writes such splits itself).
        ``hot_keys`` (a reconciling round: every key of the hot table, read in the round's snapshot) removes, in the
        same snapshot, each key the lake holds that is neither among them nor among the round's rows. Fenced and
        atomic like :meth:`commit`, with the same errors (and a rewrite task's ``SourceError``); the rewritten
        files are written under the attempt's directory."""
        ...

    def keys_not_in(self, hot_keys: pa.Table, key: MergeKey) -> int:
        """How many keys the current snapshot holds that ``hot_keys`` lacks (what a reconciling merge removes)."""
        ...

    def clean(self, committed_epoch: int, since_epoch: int = 0) -> int:
        """Delete files of attempts in epochs ``(since_epoch, committed_epoch)`` that no snapshot references;
        returns how many. Only after a commit: those attempts can never commit any more."""
        ...

    def clean_attempt(self, epoch: int, attempt: str, keep: Sequence[str]) -> int:
        """Delete this attempt's files other than ``keep`` (task retries, a fenced attempt); returns how many."""
        ...

    def rows_in_cursor_range(self, column: str, lower: object, upper: object, like: pa.Table) -> pa.Table:
        """The current snapshot's rows with ``lower <= column <= upper`` (values as Arrow gives the hot rows' cursor),
        shaped ``like`` (for eviction).

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...

    def rows_with_keys(self, key: Sequence[str], like: pa.Table) -> pa.Table:
        """The current snapshot's rows whose ``key`` columns equal those of one of ``like``'s rows, shaped ``like``
        (for eviction of a table without a cursor).

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...


class EvictionLake(Protocol):
    """What eviction reads from the lake: its latest commit, and the rows of a cursor range or of a batch's keys."""

    def committed(self) -> LakeCommit | None: ...

    def rows_with_keys(self, key: Sequence[str], like: pa.Table) -> pa.Table:
        """The current snapshot's rows whose ``key`` columns equal those of one of ``like``'s rows, shaped ``like``.

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...

    def rows_in_cursor_range(self, column: str, lower: object, upper: object, like: pa.Table) -> pa.Table:
        """The current snapshot's rows with ``lower <= column <= upper`` (values as Arrow gives the hot rows' cursor),
        shaped ``like`` (its columns and types).

        Raises:
            LakeError: the lake's rows cannot be compared with the hot store's.
        """
        ...


class RejectsSink(Protocol):
    """The side table of a table's bad records (``lake/rejects.py``)."""

    def ensure(self) -> None:
        """Create the side table if it does not exist."""
        ...

    def staging_uri(self, epoch: int, attempt: str) -> str:
        """Where this attempt's tasks write rejects files."""
        ...

    def replace(self, files: Sequence[WrittenFile], *, epoch: int, table_name: str, attempt: str) -> int:
        """Commit ``files`` in place of the side table's rows of the same source files; returns the snapshot id."""
        ...

    def clean_attempt(self, epoch: int, attempt: str, keep: Sequence[str]) -> int:
        """Delete this attempt's rejects files other than ``keep``."""
        ...

    def clean(self, committed_epoch: int, since_epoch: int = 0) -> int:
        """Delete rejects files of attempts in epochs ``(since_epoch, committed_epoch)`` that no snapshot of the side
        table references (attempts that failed or were fenced after writing them); returns how many. Only after a
        commit, as :meth:`Lake.clean`."""
        ...


@dataclass(frozen=True)
class StreamMember:
    """A table of a stream group as its change log records it: since which position the log holds every one of its
    changes (``joined_at``), and up to which one the log dropped those its lake table applied (``expired_upto``)."""

    #: The hot table, as its database qualifies it (``schema.table``): the change log's ``source_table``.
    table: str
    #: Its name in the DAG (the tiered table's spec name).
    name: str
    joined_at: int
    expired_upto: int | None = None

    @property
    def held_from(self) -> int:
        """The log holds every change of the table committed after this position."""
        return max(self.joined_at, self.expired_upto or 0)

    def to_json(self) -> JsonObject:
        return {"name": self.name, "joined_at": self.joined_at, "expired_upto": self.expired_upto}

    @classmethod
    def from_json(cls, table: str, doc: Mapping[str, object]) -> StreamMember:
        expired = doc.get("expired_upto")
        return cls(table, str(doc["name"]), int(str(doc["joined_at"])), None if expired is None else int(str(expired)))


@dataclass(frozen=True)
class ChangeLogState:
    """A stream group's change log as its latest commit left it: the reader's epoch and position (offsets as the
    log's database keeps them; None before the reader's first commit) and the tables it reads."""

    epoch: int
    end: Offsets | None
    members: Mapping[str, StreamMember]
    snapshot_id: int | None = None
    committed_at: datetime | None = None

    def member(self, table: str) -> StreamMember | None:
        return self.members.get(table)


class ChangeLogTable(Protocol):
    """A stream group's change log in the lake (``lake/change_log.py``), as its member tables read it: one row per
    change of each table, in commit order (``position``, then ``seq``), written by the group's reader."""

    @property
    def name(self) -> str: ...

    def state(self) -> ChangeLogState | None:
        """The log as its latest commit left it, fresh from the catalog; None before the reader created it.

        Raises:
            LakeError: the catalog cannot be reached, or the table is not a change log.
        """
        ...

    def changes(self, table: str, after: int, upto: int | None) -> Iterator[pa.RecordBatch]:
        """The rows of ``table``'s changes committed in ``(after, upto]`` (None: to the log's end), in commit order,
        in the log's schema, as of the snapshot :meth:`state` last read (or the current one)."""
        ...

    def changes_after(self, table: str, after: int) -> int:
        """How many of ``table``'s changes committed after ``after`` the log holds now (its backlog: read fresh, not
        from the snapshot :meth:`state` read)."""
        ...
