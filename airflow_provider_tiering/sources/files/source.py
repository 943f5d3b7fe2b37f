"""``FileSource``: a landing zone of files as a hot store (see the package's description)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import Offsets, PendingFiles, SafeEnd, file_offsets
from airflow_provider_tiering.core.ports import (
    LineageDataset,
    RejectedRecord,
    SafeWatermark,
    Source,
    location_dataset_name,
)
from airflow_provider_tiering.core.source_specs import FileSourceSpec
from airflow_provider_tiering.sources.files.column_types import arrow_type
from airflow_provider_tiering.sources.files.filesystems import open_filesystem
from airflow_provider_tiering.sources.files.listing import LandedFile, is_ignored, list_complete
from airflow_provider_tiering.sources.files.offsets_log import OffsetsLog
from airflow_provider_tiering.sources.files.parquet_files import BATCH_ROWS, read_parquet, union_schema
from airflow_provider_tiering.sources.files.plans import FilePlan, FileSplit, bin_pack
from airflow_provider_tiering.sources.files.text_records import TextFileReader


class FileSource(Source[FilePlan, FileSplit]):
    """Files landing in a directory (local or an object store), read by pyarrow inside Spark tasks.

    A file is complete once its mtime is ``settle_seconds`` old, or, with ``marker_suffix``, once its
    marker file exists. The connection, if any, holds the filesystem's options in its extra (credentials
    otherwise come from the environment). Filesystems are opened lazily, so the instance pickles to Spark
    executors.
    """

    reads_offsets_from_lake = True  # its offsets name a log kept in the lake

    def __init__(self, spec: FileSourceSpec, connection: ConnectionInfo | None = None) -> None:
        self.spec = spec
        self.filesystem_options = dict(connection.extra) if connection is not None else {}
        self._secrets = connection.secrets() if connection is not None else []
        self.display_name = f"landing zone {spec.path} ({spec.format})"
        # Resolved on the driver: executors may run in another working directory.
        self.location = spec.path if "://" in spec.path else os.path.abspath(spec.path)
        self.archive_location: str | None = None
        if spec.archive_path is not None:
            self.archive_location = (
                spec.archive_path if "://" in spec.archive_path else os.path.abspath(spec.archive_path)
            )
            self._check_archive_location(self.archive_location)
        self.offsets_log = OffsetsLog(self.display_name)
        self.text_reader = TextFileReader(spec, self.display_name)
        self._filesystem: tuple[pafs.FileSystem, str] | None = None
        self._schema: pa.Schema | None = None
        self._pending: tuple[str, list[LandedFile]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors need neither the driver's listings nor its open filesystem.
        return {**self.__dict__, "_filesystem": None, "_pending": None}

    def _begin_round(self) -> None:
        super()._begin_round()
        self.offsets_log = copy.copy(self.offsets_log)  # bound to the lake by the round, its reads its own
        self.text_reader = TextFileReader(self.spec, self.display_name)  # the round's bad records only
        self._schema = None

    def _check_archive_location(self, archive: str) -> None:
        scheme = self.location.split("://", 1)[0] if "://" in self.location else "file"
        archive_scheme = archive.split("://", 1)[0] if "://" in archive else "file"
        if scheme != archive_scheme:
            raise SourceError(f"{self.display_name}: archive_path {archive!r} must be on the landing zone's filesystem")
        inside = archive.rstrip("/").removeprefix(self.location.rstrip("/") + "/")
        if archive.rstrip("/") == self.location.rstrip("/") or (
            inside != archive.rstrip("/") and not is_ignored(inside)
        ):
            raise SourceError(
                f"{self.display_name}: archive_path {archive!r} is inside the landing zone; "
                "use a folder outside it, or one whose name starts with '_' or '.'"
            )

    # -- file system ---------------------------------------------------------------------------
    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The landing zone's filesystem and its root path inside it (opened on first use)."""
        if self._filesystem is None:
            self._filesystem = open_filesystem(self.location, self.filesystem_options)
        return self._filesystem

    def list_complete(self) -> list[LandedFile]:
        """The complete data files of the landing zone, oldest mtime first, then by path."""
        filesystem, root = self.filesystem()
        return list_complete(filesystem, root, self.spec, self.display_name)

    def committed_files(self, committed: Offsets | None) -> frozenset[str]:
        """The relative paths of the files that ``committed`` says are in the lake."""
        return self.offsets_log.files(committed)

    # -- Source --------------------------------------------------------------------------------
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def lineage_dataset(self) -> LineageDataset:
        namespace, name = location_dataset_name(self.spec.path)
        return LineageDataset(namespace, name)

    def bind_lake(self, table_location: str | None, storage: Mapping[str, str]) -> None:
        self.offsets_log.bind(table_location, storage)

    def schema(self) -> pa.Schema:
        """The declared columns; for Parquet without them, the union of the complete files' schemas.

        Only the ``max_files_per_round`` oldest files are looked at. Empty when there is nothing to
        look at yet (the round then tiers nothing).
        """
        if self._schema is not None:
            return self._schema
        if self.spec.columns is not None:
            self._schema = pa.schema([pa.field(n, arrow_type(t)) for n, t in self.spec.columns.items()])
            return self._schema
        files = self.list_complete()[: self.spec.max_files_per_round]
        if not files:
            return pa.schema([])
        filesystem, root = self.filesystem()
        self._schema = union_schema(filesystem, root, files, self.display_name)
        return self._schema

    def _pending_files(self, start: Offsets | None) -> list[LandedFile]:
        key = json.dumps(start, sort_keys=True)
        if self._pending is None or self._pending[0] != key:
            committed = self.committed_files(start)
            self._pending = (key, [f for f in self.list_complete() if f.path not in committed])
        return self._pending[1]

    def safe_watermark(self, committed: Offsets | None, candidate: JsonObject | None) -> SafeWatermark:
        """Complete files not in ``committed``; the safe end counts them (``PendingFiles``)."""
        self._pending = None  # a fresh listing each round
        pending = self._pending_files(committed)
        if not pending:
            return SafeWatermark(end=None, observed=None)
        end = PendingFiles(pending_files=len(pending), pending_bytes=sum(f.size for f in pending))
        if not self.offsets_log.is_bound and self.spec.columns is None:
            # Parquet files arrived after this round found none to take a schema from, so it created no
            # lake table to keep the offsets log in: the next round takes them.
            return SafeWatermark(end=None, observed=end)
        return SafeWatermark(end=end, observed=end)

    def has_rows_after(self, committed: Offsets | None) -> bool:
        tiered = self.committed_files(committed)
        return any(f.path not in tiered for f in self.list_complete())

    def plan(self, start: Offsets | None, end: SafeEnd, max_rows: int) -> FilePlan:
        """The pending files, oldest first, at most ``max_files_per_round`` (``max_rows`` is not applied:
        rows are unknown before the files are read)."""
        pending = self._pending_files(start)
        chosen = tuple(pending[: self.spec.max_files_per_round])
        return FilePlan(start, end, chosen, left=len(pending) - len(chosen))

    def cut_splits(self, plan: FilePlan, target_rows_per_split: int, parallelism: int) -> list[FileSplit]:
        """Bin-pack the plan's files by bytes (``target_bytes_per_split`` of the spec sizes the splits;
        ``target_rows_per_split`` is not used)."""
        return bin_pack(plan.files, self.spec.target_bytes_per_split, parallelism)

    def end_offsets(self, plan: FilePlan) -> Offsets:
        tiered = self.committed_files(plan.start) | {f.path for f in plan.files}
        total = (0 if plan.start is None else file_offsets(plan.start)["bytes"]) + sum(f.size for f in plan.files)
        return self.offsets_log.write(tiered, total)

    def take_rejects(self) -> list[RejectedRecord]:
        rejects, self.text_reader.rejects = self.text_reader.rejects, []
        return rejects

    def after_commit(self, committed: Offsets) -> int:
        """Delete or archive every complete file in ``committed``'s log that is still in the landing zone."""
        if self.spec.after_commit == "keep":
            return 0
        tiered = self.committed_files(committed)
        filesystem, root = self.filesystem()
        archive_root = (
            None
            if self.archive_location is None
            else open_filesystem(self.archive_location, self.filesystem_options)[1]
        )
        suffix = self.spec.marker_suffix
        done = 0
        for landed in self.list_complete():
            if landed.path not in tiered:
                continue
            names = [landed.path, *([landed.path + suffix] if suffix else [])]
            for name in names:
                source_path = f"{root}/{name}"
                try:
                    if archive_root is None:
                        filesystem.delete_file(source_path)
                    else:
                        target = f"{archive_root}/{name}"
                        filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
                        filesystem.move(source_path, target)
                except FileNotFoundError:
                    continue
            done += 1
        return done

    # -- reading, inside Spark tasks -----------------------------------------------------------
    def read_split(self, split: FileSplit, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        filesystem, root = self.filesystem()
        for landed in split.files:
            path = f"{root}/{landed.path}"
            self._check_unchanged(filesystem, path, landed)
            if self.spec.format == "parquet":
                yield from read_parquet(filesystem, path, landed, schema, self.display_name)
            else:
                try:
                    with filesystem.open_input_stream(path, compression=None) as stream:
                        data = stream.read()
                except OSError as exc:
                    raise SourceError(f"{self.display_name}: cannot read {landed.path}: {exc}") from exc
                if len(data) != landed.size:
                    raise self._changed(landed)
                table = self.text_reader.read(data, landed, schema)
                yield from table.to_batches(max_chunksize=BATCH_ROWS)
            self._check_unchanged(filesystem, path, landed)

    def _changed(self, landed: LandedFile) -> SourceError:
        return SourceError(
            f"{self.display_name}: file {landed.path} changed while being tiered "
            f"(planned with {landed.size} bytes, mtime {landed.mtime_ns} ns)"
        )

    def _check_unchanged(self, filesystem: pafs.FileSystem, path: str, landed: LandedFile) -> None:
        info = filesystem.get_file_info(path)
        if info.type != pafs.FileType.File or info.size != landed.size or info.mtime_ns != landed.mtime_ns:
            raise self._changed(landed)
