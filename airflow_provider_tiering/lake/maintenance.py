"""Lake maintenance of a tiered table: compaction of small files, snapshot expiry, removal of orphan files.

All three are safe while rounds run (DESIGN §4):

- **Compaction** rewrites small data files into files of the target size (on Spark, with the rounds' writer) and
  commits one snapshot (an ``overwrite``: pyiceberg 0.12 cannot write ``replace``) that carries the tiering epoch
  and offsets of the latest tiering commit, so readers and the next round see the same committed offsets before
  and after. It is fenced like a round: if a tiering commit lands first, it is committed again with that
  commit's offsets (its files are still valid while every file it replaces is still live), a bounded number of
  times, or gives up and deletes what it wrote.
- **Expiry** removes snapshots older than a retention, never the current snapshot, nor the latest tiering snapshot,
  nor any snapshot between them (the committed offsets are read along that ancestry).
- **Orphan removal** deletes files under the table's ``data/`` and ``metadata/`` that nothing references and that
  are older than a safety age, so a round still writing or committing (its files are new) is never touched.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import CommitConflict, FencedError
from airflow_provider_tiering.core.maintenance import CompactionOutcome
from airflow_provider_tiering.core.planner import Split
from airflow_provider_tiering.lake.data_files import WrittenFile, filesystem_and_path
from airflow_provider_tiering.lake.iceberg import (
    ATTEMPT_PROPERTY,
    END_PROPERTY,
    EPOCH_PROPERTY,
    OPERATION_PROPERTY,
    START_PROPERTY,
    TABLE_PROPERTY,
    IcebergLake,
    LakeCommit,
    fenced_transaction,
    offsets_to_property,
)

log = logging.getLogger(__name__)

#: Rewritten files live under <table location>/data/<COMPACTION_DIR>/<run id>/.
COMPACTION_DIR = "compaction"


@dataclass(frozen=True)
class CompactionSplit(Split):
    """The small files of one partition that one Spark task rewrites."""

    files: tuple[Any, ...] = ()  # pyiceberg DataFile


class LakeFileReader:
    """What a compaction task reads: lake data files through pyiceberg's Arrow scan, so files written under an
    older schema come out in the current one. It offers the part of ``Source`` that the write job uses."""

    def __init__(self, table: Any) -> None:
        self.metadata = table.metadata
        self.io_properties = dict(table.io.properties)
        self.display_name = f"Iceberg table {'.'.join(table.name())}"

    def read_split(self, split: Split, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
        from pyiceberg.table import FileScanTask

        if not isinstance(split, CompactionSplit):
            raise TypeError(f"a compaction reads CompactionSplits, not {type(split).__name__}")
        scan = ArrowScan(self.metadata, PyArrowFileIO(self.io_properties), self.metadata.schema(), AlwaysTrue())
        yield from scan.to_record_batches([FileScanTask(f) for f in split.files])

    def take_rejects(self) -> list[dict[str, Any]]:
        return []

    def secrets(self) -> list[str]:
        return []


@dataclass
class ExpiryResult:
    expired: int
    kept: int
    protected: list[int] = field(default_factory=list)


def live_data_files(table: Any) -> list[Any]:
    """The data files of the table's current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    files = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            files.append(entry.data_file)
    return files


def has_live_delete_files(table: Any) -> bool:
    """Whether the current snapshot has delete files (another engine's merge-on-read deletes): rewriting data
    files without applying them would bring deleted rows back, so compaction leaves such a table alone."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    return any(
        m.content == ManifestContent.DELETES and (m.has_added_files() or m.has_existing_files())
        for m in snapshot.manifests(table.io)
    )


def _bins(files: Sequence[Any], target_bytes: int) -> list[list[Any]]:
    """Consecutive groups of files of about ``target_bytes`` each (first fit on files sorted by size)."""
    bins: list[list[Any]] = []
    sizes: list[int] = []
    for data_file in sorted(files, key=lambda f: f.file_size_in_bytes, reverse=True):
        for i, size in enumerate(sizes):
            if size + data_file.file_size_in_bytes <= target_bytes:
                bins[i].append(data_file)
                sizes[i] += data_file.file_size_in_bytes
                break
        else:
            bins.append([data_file])
            sizes.append(data_file.file_size_in_bytes)
    return [b for b in bins if len(b) > 1]


def compact(
    lake: IcebergLake,
    writer: Any,
    *,
    target_file_bytes: int,
    small_file_bytes: int,
    max_small_files: int,
    table_name: str,
    max_tries: int = 3,
) -> CompactionOutcome:
    """Rewrite the small files (below ``small_file_bytes``) of each partition into files of ``target_file_bytes``,
    when there are more than ``max_small_files`` of them; one snapshot replaces them. A failure leaves nothing
    behind: what was written is deleted."""
    started = time.monotonic()
    table = lake.load_table()
    if table is None:
        return CompactionOutcome("below_threshold", 0, 0, 0)
    files = live_data_files(table)
    small = [f for f in files if f.file_size_in_bytes < small_file_bytes]
    if len(small) <= max_small_files:
        return CompactionOutcome("below_threshold", len(small), len(files), len(files))
    if has_live_delete_files(table):
        note = "the table has delete files (merge-on-read deletes of another engine); compact it with that engine"
        return CompactionOutcome("skipped", len(small), len(files), len(files), note=note)
    by_partition: dict[tuple[int, tuple[Any, ...]], list[Any]] = defaultdict(list)
    for data_file in small:
        by_partition[(data_file.spec_id, tuple(data_file.partition))].append(data_file)
    groups = [group for part in by_partition.values() for group in _bins(part, target_file_bytes)]
    rewritten = [f for group in groups for f in group]
    if not rewritten:
        return CompactionOutcome("below_threshold", len(small), len(files), len(files))

    run = uuid.uuid4().hex[:16]
    directory = f"{table.location().rstrip('/')}/data/{COMPACTION_DIR}/{run}"
    splits = [
        CompactionSplit(
            index=i, lower=None, upper=i, estimated_rows=sum(f.record_count for f in group), files=tuple(group)
        )
        for i, group in enumerate(groups)
    ]
    try:
        written: list[WrittenFile] = writer.write(
            LakeFileReader(table),
            splits,
            lake.write_schema(),
            directory,
            write_schema=lake.write_schema(),
            partitioner=lake.partitioner(),
            target_file_bytes=target_file_bytes,
        )
        snapshot_id, tries = _commit_replace(
            lake, rewritten, written, table_name=table_name, run=run, max_tries=max_tries
        )
    except (FencedError, CommitConflict) as exc:
        _delete(directory)
        log.warning("%s: compaction gave up: %s", table_name, exc)
        return CompactionOutcome(
            "gave_up",
            len(small),
            len(files),
            len(files),
            len(rewritten),
            0,
            None,
            max_tries,
            round(time.monotonic() - started, 3),
            str(exc),
        )
    except Exception:
        _delete(directory)
        raise
    _delete_unlisted(directory, {f.path for f in written})  # files of Spark task attempts that did not succeed
    after = len(live_data_files(lake.load_table()))
    return CompactionOutcome(
        "compacted",
        len(small),
        len(files),
        after,
        len(rewritten),
        len(written),
        snapshot_id,
        tries,
        round(time.monotonic() - started, 3),
    )


def _commit_replace(
    lake: IcebergLake,
    rewritten: Sequence[Any],
    written: Sequence[WrittenFile],
    *,
    table_name: str,
    run: str,
    max_tries: int,
) -> tuple[int, int]:
    """Commit the rewrite; a tiering commit landing first changes the offsets it must carry: commit again."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    old_paths = {f.file_path for f in rewritten}
    for attempt in range(1, max_tries + 1):
        table = lake.load_table()
        commit = IcebergLake._latest_tiering_commit(table)

        def fence(refreshed: Any, expected: LakeCommit | None = commit) -> None:
            now = IcebergLake._latest_tiering_commit(refreshed)
            if (now is None) != (expected is None) or (
                now is not None
                and expected is not None
                and (now.epoch, now.end_offsets) != (expected.epoch, expected.end_offsets)
            ):
                raise CommitConflict("a tiering round committed during the compaction; its offsets must be carried")
            live = {f.file_path for f in live_data_files(refreshed)}
            if not old_paths <= live:
                raise FencedError("files the compaction rewrote were replaced or removed meanwhile")

        fence(table)
        properties = {
            OPERATION_PROPERTY: "compaction",
            ATTEMPT_PROPERTY: f"compaction-{run}",
            TABLE_PROPERTY: table_name,
        }
        if commit is not None:
            summary = _tiering_summary(table, commit)
            properties.update(summary)
        data_files = [lake._data_file(table, f) for f in written]
        try:
            with fenced_transaction(table, fence) as tx:
                # pyiceberg 0.12 cannot summarize a "replace" snapshot (update_snapshot_summaries raises): an
                # "overwrite" marked with tiering.operation=compaction.
                replace = _OverwriteFiles(
                    operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties
                )
                with replace as producer:
                    for data_file in rewritten:
                        producer.delete_data_file(data_file)
                    for data_file in data_files:
                        producer.append_data_file(data_file)
        except (CommitConflict, CommitFailedException) as exc:
            log.warning("compaction commit try %d: %s", attempt, exc)
            continue
        return int(lake.load_table().current_snapshot().snapshot_id), attempt
    raise CommitConflict(f"the compaction commit lost {max_tries} times to other commits; nothing was committed")


def _tiering_summary(table: Any, commit: LakeCommit) -> dict[str, str]:
    """The tiering properties of the latest tiering commit, carried by the replace snapshot."""
    snapshot = table.snapshot_by_id(commit.snapshot_id)
    summary = snapshot.summary if snapshot is not None else {}
    start = summary.get(START_PROPERTY) if snapshot is not None else None
    return {
        EPOCH_PROPERTY: str(commit.epoch),
        START_PROPERTY: start if start is not None else offsets_to_property(commit.end_offsets),
        END_PROPERTY: offsets_to_property(commit.end_offsets),
    }


def _delete(directory_uri: str) -> None:
    filesystem, path = filesystem_and_path(directory_uri)
    try:
        filesystem.delete_dir(path)
    except FileNotFoundError:
        pass


def _delete_unlisted(directory_uri: str, keep: set[str]) -> None:
    filesystem, path = filesystem_and_path(directory_uri)
    kept = {k.split("://", 1)[-1] for k in keep}
    for info in filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.path not in kept:
            filesystem.delete_file(info.path)


def expire_snapshots(lake: IcebergLake, *, older_than: datetime, keep_last: int = 1) -> ExpiryResult:
    """Expire snapshots older than ``older_than``, keeping the ``keep_last`` newest, the current snapshot, and
    every snapshot from it down to the latest tiering snapshot (inclusive)."""
    table = lake.load_table()
    if table is None:
        return ExpiryResult(0, 0)
    protected: list[int] = []
    snapshot = table.current_snapshot()
    while snapshot is not None:  # the ancestry down to the latest tiering snapshot
        protected.append(snapshot.snapshot_id)
        if snapshot.summary is not None and snapshot.summary.get(EPOCH_PROPERTY) is not None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    newest = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)[:keep_last]
    protected.extend(s.snapshot_id for s in newest)
    cutoff = older_than.timestamp() * 1000
    doomed = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff and s.snapshot_id not in protected]
    if doomed:
        table.maintenance.expire_snapshots().by_ids(doomed).commit()
    return ExpiryResult(len(doomed), len(table.snapshots()) - len(doomed), sorted(set(protected)))


def _without_scheme(uri: str) -> str:
    return uri.split("://", 1)[-1]


def referenced_paths(table: Any) -> tuple[set[str], set[str]]:
    """(data files, metadata files) that the table's current metadata reaches, without the URI scheme: every data
    file of any snapshot; the metadata file itself, the previous ones of its log, each snapshot's manifest list
    and manifests, and its statistics files. Each manifest list and manifest is read once."""
    metadata = table.metadata
    data: set[str] = set()
    meta = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    meta.update(f.statistics_path for f in (*metadata.statistics, *metadata.partition_statistics))
    seen: set[str] = set()
    for snapshot in metadata.snapshots:
        meta.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                data.add(_without_scheme(entry.data_file.file_path))
    meta |= seen
    return data, {_without_scheme(path) for path in meta}


def _remove_unreferenced(directory_uri: str, referenced: set[str], cutoff: datetime) -> list[str]:
    filesystem, root = filesystem_and_path(directory_uri)
    removed = []
    for info in filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File or info.path in referenced:
            continue
        if info.mtime is None or info.mtime.replace(tzinfo=info.mtime.tzinfo or UTC) > cutoff:
            continue
        filesystem.delete_file(info.path)
        removed.append(info.path)
    return removed


def remove_orphan_files(lake: IcebergLake, *, min_age: timedelta, now: datetime | None = None) -> list[str]:
    """Delete files under the table's ``data/`` and ``metadata/`` that nothing references and were last modified
    more than ``min_age`` ago (choose it longer than any round takes: a round's files are referenced only once it
    commits). In ``metadata/`` these are the manifests and manifest lists of expired snapshots and the metadata
    files that dropped out of the metadata log (``write.metadata.previous-versions-max``, 100 by default)."""
    table = lake.load_table()
    if table is None:
        return []
    cutoff = (now or datetime.now(UTC)) - min_age
    location = table.location().rstrip("/")
    data, metadata = referenced_paths(table)
    removed = _remove_unreferenced(f"{location}/data", data, cutoff)
    removed += _remove_unreferenced(f"{location}/metadata", metadata, cutoff)
    if removed:
        log.info("%s: removed %d orphan files", ".".join(table.name()), len(removed))
    return removed


class IcebergMaintainer:
    """:class:`~airflow_provider_tiering.core.maintenance.Maintainer` of one Iceberg table. The writer (a Spark
    session, perhaps) is made only when there is something to compact."""

    def __init__(self, lake: IcebergLake, make_writer: Callable[[], Any], table_name: str) -> None:
        self.lake = lake
        self.make_writer = make_writer
        self.table_name = table_name

    def compact(self, *, small_file_bytes: int, max_small_files: int, target_file_bytes: int) -> CompactionOutcome:
        return compact(
            self.lake,
            _LazyWriter(self.make_writer),
            target_file_bytes=target_file_bytes,
            small_file_bytes=small_file_bytes,
            max_small_files=max_small_files,
            table_name=self.table_name,
        )

    def expire_snapshots(self, *, older_than: datetime, keep_last: int) -> int:
        return expire_snapshots(self.lake, older_than=older_than, keep_last=keep_last).expired

    def remove_orphan_files(self, *, min_age: timedelta, now: datetime) -> int:
        return len(remove_orphan_files(self.lake, min_age=min_age, now=now))

    def counts(self) -> tuple[int, int]:
        table = self.lake.load_table()
        return (0, 0) if table is None else (len(live_data_files(table)), len(table.snapshots()))


class _LazyWriter:
    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def write(self, *args: Any, **kwargs: Any) -> list[WrittenFile]:
        writer = self.make()
        try:
            return writer.write(*args, **kwargs)
        finally:
            writer.stop()
