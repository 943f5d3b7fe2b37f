"""What a merge writes, one split per task of the round's split writer (Spark tasks, or the task process for a
merge that fits one split): the lake's files that hold changed keys, without those keys, and the round's own files
that hold superseded versions, with only the kept ones.

A task reads one file at a time, so its memory is bounded by its largest file plus the round's changed keys (which
travel with the reader), not by the round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.ports import RejectedRecord
from airflow_provider_tiering.lake.merge_reduce import KeptRows
from airflow_provider_tiering.lake.position_deletes import DeletedPositions
from airflow_provider_tiering.lake.positions import row_positions
from airflow_provider_tiering.lake.rewrite_files import LakeFileReader, partition_groups
from airflow_provider_tiering.lake.warehouse import LakeStorage

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

_POSITION = "__merge_position"


@dataclass(frozen=True)
class MergeSplit:
    """What one task of a merge writes: lake files without the changed keys, round files' kept rows."""

    index: int
    lake_files: tuple[DataFile, ...] = ()
    round_files: tuple[KeptRows, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.lake_files) + sum(k.file.bytes for k in self.round_files)


def holding_keys(rows: pa.Table, keys: pa.Table, columns: Sequence[str]) -> Any:
    """A mask of ``rows`` that hold one of ``keys``. Only the key columns are joined (a join cannot carry every
    type, lists among them), so ``rows`` keep their order (a file's order is what its column statistics, and so
    later scans' pruning, owe to how it was written)."""
    positions = row_positions(rows.num_rows)
    own = rows.select(list(columns)).append_column(_POSITION, positions)
    wanted = keys.select(list(columns)).cast(pa.schema([rows.schema.field(name) for name in columns]))
    hits = own.join(wanted, keys=list(columns), join_type="left semi", use_threads=False).column(_POSITION)
    return pc.is_in(positions, value_set=hits.combine_chunks())


def without_keys(rows: pa.Table, keys: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``rows`` less those holding one of ``keys``, in their order."""
    return rows.filter(pc.invert(holding_keys(rows, keys, columns)))


class MergeRewriteReader(LakeFileReader):
    """Reads a :class:`MergeSplit` as the rows its task writes (a
    :class:`~airflow_provider_tiering.core.ports.SplitReader`); pickled into each task with the changed keys."""

    def __init__(
        self,
        table: Table,
        keys: pa.Table | None,
        key_columns: Sequence[str],
        storage: LakeStorage,
        deletes: Mapping[str, tuple[DataFile, ...]] | None = None,
    ) -> None:
        """``keys``: the changed keys, which a task removes from the lake's files (None: the splits rewrite none);
        ``deletes``: each lake file's position-delete files, whose rows the rewrite leaves out too."""
        super().__init__(table)
        self.keys = keys
        self.key_columns = tuple(key_columns)
        self.storage_properties = dict(storage.properties)
        self.deletes = dict(deletes or {})

    def read_split(self, split: MergeSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
        from pyiceberg.table import FileScanTask

        storage = LakeStorage(self.storage_properties)
        for kept in split.round_files:
            yield from kept.read(storage).select(schema.names).cast(schema).to_batches()
        # The scan's reader of one file, as compaction uses it: files of an older schema come out in the current one.
        scan = ArrowScan(self.metadata, PyArrowFileIO(self.io_properties), self.metadata.schema(), AlwaysTrue())
        for entry in split.lake_files:
            if self.keys is None:
                raise ValueError("a merge split rewrites lake files, but its reader holds no changed keys")
            rows = scan.to_table([FileScanTask(entry, set(self.deletes.get(entry.file_path, ())))])
            yield from without_keys(rows, self.keys, self.key_columns).select(schema.names).cast(schema).to_batches()

    def take_rejects(self) -> list[RejectedRecord]:
        return []


def merge_splits(
    lake_files: Sequence[DataFile], round_files: Sequence[KeptRows], target_bytes: int
) -> list[MergeSplit]:
    """The merge's work cut into splits of about ``target_bytes`` read: all of it in one split when it fits (the
    task process then writes it, as it does a single-split append round); otherwise the lake's files in groups of
    one partition each (one task per large file or group of small ones) and the round's files in groups by size."""
    total = sum(f.file_size_in_bytes for f in lake_files) + sum(k.file.bytes for k in round_files)
    if total <= target_bytes:
        return [MergeSplit(0, tuple(lake_files), tuple(round_files))] if lake_files or round_files else []
    splits = [MergeSplit(0, lake_files=tuple(group)) for group in partition_groups(lake_files, target_bytes)]
    bins: list[list[KeptRows]] = []
    sizes: list[int] = []
    for kept in sorted(round_files, key=lambda k: k.file.bytes, reverse=True):
        for i, size in enumerate(sizes):
            if size + kept.file.bytes <= target_bytes:
                bins[i].append(kept)
                sizes[i] += kept.file.bytes
                break
        else:
            bins.append([kept])
            sizes.append(kept.file.bytes)
    splits.extend(MergeSplit(0, round_files=tuple(b)) for b in bins)
    return [MergeSplit(i, s.lake_files, s.round_files) for i, s in enumerate(splits)]


def stored_rows_of(
    table: Table, tasks: Sequence[FileScanTask], keys: pa.Table, columns: Sequence[str]
) -> list[pa.Table]:
    """The live rows of ``tasks``' files (their position deletes applied) that hold one of ``keys`` (a change
    stream's updates take the values they left unchanged from them), one file at a time."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    found = []
    for task in tasks:
        rows = scan.to_table([task])
        matched = rows.filter(holding_keys(rows, keys, columns))
        if matched.num_rows:
            found.append(matched)
    return found


@dataclass(frozen=True)
class KeyPositions:
    """Where a lake file holds changed keys: the positions of its live rows that do (sorted), their key columns, and
    how many live rows it has (its rows less those its position deletes delete)."""

    positions: np.ndarray
    keys: pa.Table
    live_rows: int


def key_positions(
    table: Table, task: FileScanTask, keys: pa.Table, columns: Sequence[str], deletes: DeletedPositions | None = None
) -> KeyPositions:
    """The positions in ``task``'s file of its live rows holding one of ``keys`` (only the key columns are read,
    the file whole, so a row's index is its position; rows its delete files delete are left out: found through
    ``deletes``, which reads each delete file once for all the files asked about)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    projected = table.schema().select(*columns)
    own = ArrowScan(table.metadata, table.io, projected, AlwaysTrue()).to_table([FileScanTask(task.file)])
    own = own.select(list(columns))
    hits = np.flatnonzero(holding_keys(own, keys, columns).to_numpy(zero_copy_only=False))
    deleted = (deletes or DeletedPositions(table.io)).of(task.file, task.delete_files)
    if deleted.size:
        hits = hits[~np.isin(hits, deleted)]
    return KeyPositions(hits.astype(np.int64), own.take(pa.array(hits, pa.int64())), own.num_rows - deleted.size)


def count_keys_in(rows: pa.Table, keys: pa.Table | None, columns: Sequence[str]) -> int:
    """How many of ``rows`` (key columns) hold one of ``keys``."""
    if keys is None or keys.num_rows == 0 or rows.num_rows == 0:
        return 0
    wanted = keys.select(list(columns)).cast(rows.schema)
    return rows.join(wanted, keys=list(columns), join_type="left semi", use_threads=False).num_rows
