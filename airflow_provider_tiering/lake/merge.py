"""Merge a round's rows into a primary-key table, copy-on-write, in one fenced snapshot.

A merge table's round writes every row version it read, as an append round does. Before the commit:

1. the driver keeps, per key, the version with the greatest cursor (``lake/merge_reduce.py``: only the deciding
   columns are read); a kept version whose soft-delete column is set is dropped, its key still counts as changed.
   A reconciling round (``MergeKey.reconcile``) also brought every key of the hot table, read in the snapshot its
   rows were read in: the lake's keys that are neither among them nor among the round's rows are removed the same
   way (hard deletes, the old key of a row whose key changed);
2. the driver plans which live data files hold a changed key: scan planning prunes by partition and column
   statistics, then each remaining file's key columns are read;
3. the round's split writer rewrites them without those keys, and the round's own files with only their kept
   versions (``lake/merge_rewrite.py``): Spark tasks, one per large file or group of small ones, or the task process
   itself when the whole rewrite fits one split (as a single-split append round is written);
4. one ``overwrite`` snapshot removes the rewritten files and adds their rewrites and the kept versions, with the
   tiering properties of an append and its fence, plus a check that every file it removes is still live (a
   compaction may have replaced it meanwhile: then it plans and rewrites again).

Copy-on-write writes no delete files, so every reader (pyiceberg 0.12 cannot read equality deletes) sees the
merged rows, and compaction keeps working. Rewrites are staged under the attempt's directory like its other files:
a crash before the commit leaves nothing visible, and the next committed round's cleanup deletes them; the files of
task attempts that lost (retries, a lost executor) are deleted after the commit with the attempt's other leftovers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import CommitConflict, LakeError, NotRetryable
from airflow_provider_tiering.core.ports import (
    CHANGE_CHUNK,
    CHANGE_DELETED,
    CHANGE_FILL,
    FileKind,
    MergeKey,
    MergeResult,
    RowPartitioner,
    SplitWriter,
    WriteTarget,
    WrittenFile,
)
from airflow_provider_tiering.lake.add_files import data_file, set_name_mapping
from airflow_provider_tiering.lake.fenced_commit import committed_snapshot_id, fenced_commit, replace_data_files
from airflow_provider_tiering.lake.fenced_transaction import fenced_transaction
from airflow_provider_tiering.lake.live_files import live_data_files, live_tasks
from airflow_provider_tiering.lake.merge_reduce import (
    RoundChanges,
    keys_absent,
    read_round_file,
    reduce_round,
    with_keys_removed,
)
from airflow_provider_tiering.lake.merge_rewrite import (
    KeyPositions,
    MergeRewriteReader,
    count_keys_in,
    key_positions,
    merge_splits,
    stored_rows_of,
)
from airflow_provider_tiering.lake.parquet_writer import write_data_files
from airflow_provider_tiering.lake.position_deletes import (
    DeletedPositions,
    FileDeletes,
    trim_delete_files,
    write_position_deletes,
)
from airflow_provider_tiering.lake.row_delta import commit_row_delta, row_delta_available
from airflow_provider_tiering.lake.warehouse import LakeStorage

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

log = logging.getLogger(__name__)

#: Up to this many changed keys, file pruning asks for exactly them (``In``); beyond, for their range per column
#: (pyiceberg's statistics evaluator does not prune an ``In`` of more than 200 values).
IN_FILTER_KEYS = 200


def _pruning_filter(keys: pa.Table, columns: Sequence[str]) -> BooleanExpression:
    """A row filter every row holding one of ``keys`` matches, for scan planning to prune files with."""
    import pyarrow.compute as pc
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual

    if len(columns) == 1 and keys.num_rows <= IN_FILTER_KEYS:
        return In(term=columns[0], literals=set(keys.column(0).to_pylist()))
    bounds: list[BooleanExpression] = []
    for name in columns:
        extremes: Any = pc.min_max(keys.column(name)).as_py()
        bounds += [
            GreaterThanOrEqual(term=name, value=extremes["min"]),
            LessThanOrEqual(term=name, value=extremes["max"]),
        ]
    expression = bounds[0]
    for bound in bounds[1:]:
        expression = And(expression, bound)
    return expression


def candidate_tasks(table: Table, keys: pa.Table, columns: Sequence[str]) -> list[FileScanTask]:
    """Live data files that may hold one of ``keys`` (by partition and column statistics), each with its delete
    files."""
    if keys.num_rows == 0:
        return []
    try:
        return list(table.scan(row_filter=_pruning_filter(keys, columns)).plan_files())
    except (TypeError, ValueError) as exc:  # a key type statistics cannot be compared with: read every file
        log.info("no file pruning for the merge (%s); reading every live file", exc)
        return live_tasks(table)


def _source_key(row: dict[str, Any], fill: dict[str, Any], key: MergeKey) -> tuple[str, ...]:
    """The key a version takes its unchanged values from: the one its fill names, else its own."""
    return tuple(fill["key"]) if fill.get("key") is not None else tuple(str(row[c]) for c in key.columns)


def earlier_versions(
    files: Sequence[WrittenFile], to_fill: pa.Table, key: MergeKey, storage: LakeStorage
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """The round's versions of the keys that fills of a later chunk than the first name (and, in turn, that those
    versions' own fills name), by key in chunk order: read from the round's staged files, key columns first."""
    wanted: set[tuple[str, ...]] = set()
    for row in to_fill.select([*key.columns, CHANGE_FILL, CHANGE_CHUNK]).to_pylist():
        if row[CHANGE_CHUNK] > 1:
            wanted.add(_source_key(row, json.loads(row[CHANGE_FILL]), key))
    found: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    seen: set[tuple[str, ...]] = set()
    while wanted:
        seen |= wanted
        for written in files:
            keys = read_round_file(written, storage, key.columns)
            texts = zip(*(map(str, keys.column(c).to_pylist()) for c in key.columns), strict=True)
            hits = [i for i, text in enumerate(texts) if text in wanted]
            for row in read_round_file(written, storage).take(hits).to_pylist() if hits else ():
                found.setdefault(tuple(str(row[c]) for c in key.columns), []).append(row)
        named = {
            _source_key(row, json.loads(row[CHANGE_FILL]), key)
            for versions in found.values()
            for row in versions
            if row.get(CHANGE_FILL) is not None
        }
        wanted = named - seen
    for versions in found.values():
        versions.sort(key=lambda row: int(row[CHANGE_CHUNK]))
    return found


def fill_unchanged(
    to_fill: pa.Table,
    stored: Sequence[pa.Table],
    key: MergeKey,
    schema: pa.Schema,
    earlier: dict[tuple[str, ...], list[dict[str, Any]]] | None = None,
) -> pa.Table:
    """Give the kept versions in ``to_fill`` the values of the columns their update left unchanged (TOAST): from
    the latest version before theirs of the key each names (``CHANGE_FILL``) among ``earlier`` (the round's versions
    in earlier chunks), else from the lake's stored row of that key (``stored``).

    Raises:
        NotRetryable: neither holds that key (the lake diverged from the hot table: only a new snapshot can tell
            the value).
    """
    by_key: dict[tuple[str, ...], dict[str, Any]] = {}
    for part in stored:
        for row in part.select(schema.names).to_pylist():
            by_key[tuple(str(row[c]) for c in key.columns)] = row
    versions_by_key = earlier or {}

    def values_of(source_key: tuple[str, ...], before_chunk: int, columns: Sequence[str]) -> dict[str, Any]:
        for version in reversed(versions_by_key.get(source_key, [])):
            if version[CHANGE_CHUNK] >= before_chunk or version[CHANGE_DELETED]:
                continue  # a delete of the key is never followed by an update without a re-insert between them
            fill = None if version[CHANGE_FILL] is None else json.loads(version[CHANGE_FILL])
            unchanged = set() if fill is None else set(fill["columns"])
            found = {column: version[column] for column in columns if column not in unchanged}
            rest = [column for column in columns if column in unchanged]
            if rest and fill is not None:
                found.update(values_of(_source_key(version, fill, key), int(version[CHANGE_CHUNK]), rest))
            return found
        stored_row = by_key.get(source_key)
        if stored_row is None:
            raise NotRetryable(
                f"an update of key {list(source_key)} left columns {list(columns)} unchanged (stored out of line) "
                "and the lake holds no row for that key to take them from: the lake and the hot table diverged. "
                "Load the table again (drop the lake table; the next round takes a new snapshot)"
            )
        return {column: stored_row.get(column) for column in columns}

    filled: list[dict[str, Any]] = []
    for row in to_fill.to_pylist():
        fill = json.loads(row.pop(CHANGE_FILL))
        row.pop(CHANGE_DELETED, None)
        chunk = int(row.pop(CHANGE_CHUNK, 0) or 0)
        row.update(values_of(_source_key(row, fill, key), chunk, fill["columns"]))
        filled.append(row)
    return pa.Table.from_pylist(filled, schema=schema)


@dataclass(frozen=True)
class FileHits:
    """A live lake file holding changed keys: the file with its delete files, and where it holds them."""

    task: FileScanTask
    found: KeyPositions

    @property
    def file(self) -> DataFile:
        return self.task.file

    def rewritten(self, fraction: float) -> bool:
        """Whether the merge writes this file again (copy-on-write) rather than delete its rows by position: it loses
        at least ``fraction`` of its live rows (0: always)."""
        return self.found.positions.size >= fraction * self.found.live_rows


@dataclass(frozen=True)
class FilesHoldingKeys:
    """The live files holding changed keys (what the merge rewrites or deletes rows of), found on the driver from
    their key columns."""

    files: tuple[FileHits, ...]
    #: Changed keys the lake held a row for, and how many of them the round deleted.
    replaced_keys: int = 0
    deleted_stored_keys: int = 0


def files_holding_keys(
    table: Table, changes: RoundChanges, key: MergeKey, deletes: DeletedPositions | None = None
) -> FilesHoldingKeys:
    """The live files that hold one of the changed keys: those statistics cannot rule out, whose key columns
    (read one file at a time) do hold one in a live row (their delete files read once, into ``deletes``)."""
    found: list[FileHits] = []
    replaced = deleted_stored = 0
    deletes = deletes or DeletedPositions(table.io)
    for task in candidate_tasks(table, changes.keys, key.columns):
        hits = key_positions(table, task, changes.keys, key.columns, deletes)
        if hits.positions.size:
            found.append(FileHits(task, hits))
            replaced += hits.positions.size
            deleted_stored += count_keys_in(hits.keys, changes.deleted, key.columns)
    return FilesHoldingKeys(tuple(found), replaced, deleted_stored)


@dataclass(frozen=True)
class MergeTarget:
    """The lake table a merge commits into, and where and how it writes its files."""

    name: str
    load_table: Callable[[], Table | None]
    #: The lake's schema (Arrow) and partitioning, which every written file follows.
    schema: pa.Schema
    partitioner: RowPartitioner
    storage: LakeStorage
    #: The attempt's staging directory; each try of the rewrite writes under ``merge-<try>/`` in it.
    directory_uri: str
    target_file_bytes: int
    #: A lake file the round takes at least this fraction of its live rows out of is rewritten; the rows others
    #: lose are deleted by position (0: every file rewritten, copy-on-write only).
    copy_on_write_fraction: float = 0.5

    def write_target(self, directory_uri: str) -> WriteTarget:
        return WriteTarget(
            directory_uri, self.schema, self.partitioner, self.target_file_bytes, dict(self.storage.properties)
        )


@dataclass(frozen=True)
class Rewrite:
    """One try's writes: the lake files it rewrites (removed) and those it deletes rows of, the files it wrote, the
    delete files it wrote and those it replaces, the data files its delete files name, and where and at what
    cost."""

    holding: FilesHoldingKeys
    rewritten: tuple[FileHits, ...]
    deleted_from: tuple[FileHits, ...]
    written: tuple[WrittenFile, ...]
    delete_files: tuple[DataFile, ...]
    obsolete_deletes: tuple[DataFile, ...]
    named_by_deletes: set[str]
    tasks: int
    in_process: bool
    bytes_read: int

    @property
    def removed(self) -> tuple[DataFile, ...]:
        return tuple(h.file for h in self.rewritten)


def rewrite(
    table: Table, changes: RoundChanges, key: MergeKey, target: MergeTarget, writer: SplitWriter, directory_uri: str
) -> Rewrite:
    """Find the files holding changed keys; write those that lose most of their rows again without them, and the
    round's files with only their kept versions, on ``writer``; delete the superseded rows of the others by
    position (a delete file per partition, written here); the updates that left values unchanged get them from the
    lake."""
    deletes = DeletedPositions(table.io)  # read once, for the search and the trim below
    holding = files_holding_keys(table, changes, key, deletes)
    fraction = target.copy_on_write_fraction if row_delta_available() else 0.0
    rewritten = tuple(h for h in holding.files if h.rewritten(fraction))
    deleted_from = tuple(h for h in holding.files if not h.rewritten(fraction))
    splits = merge_splits([h.file for h in rewritten], changes.to_filter, target.target_file_bytes)
    # The changed keys travel with every task only when there are lake files to remove them from (a first load's
    # millions of keys would not).
    reader = MergeRewriteReader(
        table, changes.keys if rewritten else None, key.columns, target.storage,
        deletes={h.file.file_path: tuple(h.task.delete_files) for h in rewritten},
    )  # fmt: skip
    written = writer.write(reader, splits, target.schema, target.write_target(directory_uri))
    if changes.to_fill is not None:
        stored = stored_rows_of(table, [h.task for h in holding.files], changes.keys, key.columns)
        earlier = earlier_versions(changes.round_files, changes.to_fill, key, target.storage)
        filled = fill_unchanged(changes.to_fill, stored, key, target.schema, earlier)
        written += write_data_files(
            filled.to_batches(),
            target.schema,
            directory_uri,
            "filled",
            len(splits),
            target.partitioner,
            target.target_file_bytes,
            storage=target.storage,
        )
    removed = {h.file.file_path for h in rewritten}
    trim = trim_delete_files(
        table.io, [d for h in rewritten for d in h.task.delete_files],
        {f.file_path: f for f in live_data_files(table) if f.file_path not in removed}, deletes,
    )  # fmt: skip
    delete_files = write_position_deletes(
        table, [*(FileDeletes(h.file, h.found.positions) for h in deleted_from), *trim.carried],
        f"{directory_uri}/deletes", target.storage,
    )  # fmt: skip
    return Rewrite(
        holding,
        rewritten,
        deleted_from,
        tuple(written),
        tuple(delete_files),
        trim.removed,
        {*(h.file.file_path for h in deleted_from), *(c.data_file.file_path for c in trim.carried)},
        len(splits),
        len(splits) <= 1 and writer.writes_single_split_locally,
        sum(s.bytes for s in splits),
    )


def merge_files(
    target: MergeTarget,
    files: Sequence[WrittenFile],
    key: MergeKey,
    writer: SplitWriter,
    *,
    properties: dict[str, str],
    table_properties: dict[str, str],
    fence: Callable[[Table], None],
    max_conflict_retries: int = 5,
    hot_keys: pa.Table | None = None,
) -> MergeResult:
    """Merge the round's ``files`` (see the module's docstring) and commit one snapshot with ``properties``,
    setting ``table_properties`` in the same swap; with ``hot_keys``, also remove the lake's keys absent from them
    and from the round's rows.

    Raises:
        FencedError: from ``fence``: nothing was committed.
        CommitConflict: the files to rewrite kept changing, or the catalog's swap kept being lost.
        LakeError: the table disappeared, or holds delete files this merge would not apply.
        SourceError: a rewrite task failed (its error, condensed).
    """
    # A newer attempt's commit deletes the files of older epochs: a stale attempt must learn it is fenced, not
    # fail on its vanished files.
    _fenced_now(target, fence)
    try:
        changes = reduce_round(files, key, target.schema, target.storage)
    except FileNotFoundError:
        _fenced_now(target, fence)
        raise

    def commit_once(table: Table, try_number: int) -> MergeResult:
        fence(table)
        merging = changes
        if hot_keys is not None:  # against the snapshot this try commits onto
            merging = with_keys_removed(changes, keys_absent(table, hot_keys, changes.keys, key.columns))
        done = rewrite(table, merging, key, target, writer, f"{target.directory_uri}/merge-{try_number}")
        added = (*changes.as_written, *done.written)
        _commit_merge(table, done, added, fence, properties, table_properties)
        snapshot_id = committed_snapshot_id(target.load_table(), name=target.name, what="merge")
        return _merge_result(snapshot_id, changes, done, added)

    merged, _ = fenced_commit(
        target.load_table, commit_once, name=target.name, what="merge commit", max_tries=max_conflict_retries + 1
    )
    return merged


def _fenced_now(target: MergeTarget, fence: Callable[[Table], None]) -> Table:
    table = target.load_table()
    if table is None:
        raise LakeError(f"Iceberg table {target.name} disappeared before the commit")
    fence(table)
    return table


def _commit_merge(
    table: Table,
    done: Rewrite,
    added: Sequence[WrittenFile],
    fence: Callable[[Table], None],
    properties: dict[str, str],
    table_properties: dict[str, str],
) -> None:
    """One fenced snapshot: the rewritten files (and the delete files that name nothing else) out, the written files
    and delete files in, ``table_properties`` set in the same swap. Its fence adds that every file it removes, and
    every file its deletes name, is still live: a position delete names a file and a row, and a compaction that
    replaced the file meanwhile would leave it naming nothing (an update lost, a deleted row back)."""
    removed_paths = {f.file_path for f in done.removed}
    named = done.named_by_deletes

    def fenced(refreshed: Table) -> None:
        fence(refreshed)
        live = {f.file_path for f in live_data_files(refreshed)}
        if not removed_paths <= live:
            raise CommitConflict("files the merge rewrites were replaced meanwhile (a compaction)")
        if not named <= live:
            raise CommitConflict("files the merge deletes rows of were replaced meanwhile (a compaction)")

    entries = [data_file(table, f) for f in added]
    with fenced_transaction(table, fenced) as tx:
        set_name_mapping(tx)
        tx.set_properties(dict(table_properties))
        if done.delete_files or done.obsolete_deletes:
            commit_row_delta(
                tx, table, properties=properties, added_data=entries, added_deletes=done.delete_files,
                removed_data=done.removed, removed_deletes=done.obsolete_deletes,
            )  # fmt: skip
        else:
            replace_data_files(tx, table, done.removed, entries, properties)


def _merge_result(
    snapshot_id: int, changes: RoundChanges, done: Rewrite, added: tuple[WrittenFile, ...]
) -> MergeResult:
    holding = done.holding
    return MergeResult(
        snapshot_id,
        added,
        len(done.rewritten),
        changes.kept_rows,
        changes.deleted_keys,
        0 if changes.to_fill is None else changes.to_fill.num_rows,
        inserted_rows=changes.kept_rows - (holding.replaced_keys - holding.deleted_stored_keys),
        updated_rows=holding.replaced_keys - holding.deleted_stored_keys,
        deleted_rows=holding.deleted_stored_keys,
        rewrite_tasks=done.tasks,
        rewritten_in_process=done.in_process,
        rewrite_bytes_read=done.bytes_read,
        rewrite_bytes_written=sum(f.bytes for f in done.written),
        delete_files=tuple(
            WrittenFile(f.file_path, f.record_count, f.file_size_in_bytes, 0, kind=FileKind.POSITION_DELETES)
            for f in done.delete_files
        ),
        files_given_deletes=len(done.deleted_from),
        rows_deleted_by_position=sum(h.found.positions.size for h in done.deleted_from),
    )
