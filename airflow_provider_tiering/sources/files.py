"""A landing zone of files (JSON lines, CSV, Parquet): every complete file is tiered exactly once.

Files may arrive in any order of name or modification time (a late file moved in with ``mv``
keeps its old mtime), so the offsets are not a watermark but the *set* of tiered files. The set
is kept in the lake, next to the table's metadata, as a gzip'd, sorted list of relative paths
named by its sha256; the offsets in the lake's snapshot only reference it::

    {"files": 1234, "bytes": 567890, "log": "<table location>/metadata/tiering-source-files/<sha256>.txt.gz",
     "sha256": "<sha256 of the uncompressed list>"}

A file's relative path is its identity: once tiered, a file of the same relative path is never
tiered again, even if it is rewritten. Files are read whole, with pyarrow's readers.
"""

from __future__ import annotations

import csv
import fnmatch
import gzip
import hashlib
import heapq
import json
import math
import os
import re
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.planner import RangePlan, Split
from airflow_provider_tiering.core.spec import DECIMAL_TYPE, TIMESTAMP_TYPE, FileSourceSpec
from airflow_provider_tiering.sources.base import Offsets, SafeWatermark, Source

#: Offsets logs live under ``<table location>/`` this folder.
LOG_DIR = "metadata/tiering-source-files"
#: A rejected record keeps at most this much of its raw text.
REJECT_RECORD_BYTES = 64 * 1024
BATCH_ROWS = 65_536
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowKeyError)
_PYARROW_ROW_SUFFIX = re.compile(r" in row \d+$")


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a column type name accepted by :class:`FileSourceSpec`."""
    decimal = DECIMAL_TYPE.match(name)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    timestamp = TIMESTAMP_TYPE.match(name)
    if timestamp:
        return pa.timestamp("us", tz=timestamp.group(1))
    return pa.type_for_alias(name)


def open_filesystem(location: str, options: Mapping[str, Any] | None = None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path inside it, for a local path or a URI.

    ``options`` (from an Airflow connection's extra) configure pyarrow's S3 or GCS filesystem, or
    an fsspec filesystem for other schemes; without them, credentials come from the environment.
    """
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location).rstrip("/") or "/"
    if not options:
        filesystem, path = pafs.FileSystem.from_uri(location)
        return filesystem, path.rstrip("/")
    scheme, rest = location.split("://", 1)
    if scheme in ("s3", "s3a"):
        return pafs.S3FileSystem(**options), rest.rstrip("/")
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(**options), rest.rstrip("/")
    import fsspec

    fsspec_filesystem = fsspec.filesystem(scheme, **options)
    path = fsspec_filesystem._strip_protocol(location)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_filesystem)), str(path).rstrip("/")


@dataclass(frozen=True)
class LandedFile:
    """A complete file of the landing zone, as the plan saw it."""

    path: str  # relative to the landing zone, "/"-separated
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class FilePlan(RangePlan):
    """A round of a file source: ``files`` to tier, oldest first.

    ``estimated_rows`` and ``remaining_rows`` count *files* (rows are unknown before reading):
    the files of this round, and the complete files left for later rounds by ``max_files_per_round``.
    ``lower`` is the start offsets, ``upper`` the (opaque) safe end.
    """

    files: tuple[LandedFile, ...] = ()


@dataclass(frozen=True)
class FileSplit(Split):
    """The files one Spark task reads; ``estimated_rows`` counts files."""

    files: tuple[LandedFile, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class _Record:
    line: int  # 1-based line of the record's first line in its file
    raw: bytes


class _BadRecord(Exception):
    def __init__(self, record: _Record, reason: str) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason


def _ignored(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


class FileSource(Source):
    """Files landing in a directory (local or an object store), read by pyarrow inside Spark tasks.

    A file is complete once its mtime is ``settle_seconds`` old, or, with ``marker_suffix``, once its
    marker file exists. Filesystems are opened lazily, so the instance pickles to Spark executors.
    """

    def __init__(
        self,
        spec: FileSourceSpec,
        filesystem_options: Mapping[str, Any] | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.spec = spec
        self.filesystem_options = dict(filesystem_options or {})
        self._secrets = [s for s in secrets if s]
        self.display_name = f"landing zone {spec.path} ({spec.format})"
        # Resolved on the driver: executors may run in another working directory.
        self.location = spec.path if "://" in spec.path else os.path.abspath(spec.path)
        self.archive_location: str | None = None
        if spec.archive_path is not None:
            self.archive_location = (
                spec.archive_path if "://" in spec.archive_path else os.path.abspath(spec.archive_path)
            )
            self._check_archive_location(self.archive_location)
        self._filesystem: tuple[pafs.FileSystem, str] | None = None
        self._log_dir: str | None = None
        self._schema: pa.Schema | None = None
        self._pending: tuple[str, list[LandedFile]] | None = None
        self._committed_cache: dict[str, frozenset[str]] = {}
        self._rejects: list[dict[str, Any]] = []

    def __getstate__(self) -> dict[str, Any]:
        # Executors need neither the driver's listings nor its open filesystem.
        state = dict(self.__dict__)
        state.update(_filesystem=None, _pending=None, _committed_cache={}, _rejects=[])
        return state

    def _check_archive_location(self, archive: str) -> None:
        scheme = self.location.split("://", 1)[0] if "://" in self.location else "file"
        archive_scheme = archive.split("://", 1)[0] if "://" in archive else "file"
        if scheme != archive_scheme:
            raise SourceError(f"{self.display_name}: archive_path {archive!r} must be on the landing zone's filesystem")
        inside = archive.rstrip("/").removeprefix(self.location.rstrip("/") + "/")
        if archive.rstrip("/") == self.location.rstrip("/") or (inside != archive.rstrip("/") and not _ignored(inside)):
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
        try:
            infos = filesystem.get_file_info(
                pafs.FileSelector(root, recursive=self.spec.recursive, allow_not_found=True)
            )
        except OSError as exc:
            raise SourceError(f"{self.display_name}: cannot list the landing zone: {exc}") from None
        present: dict[str, pafs.FileInfo] = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[len(root) :].lstrip("/")
            if not _ignored(relative):
                present[relative] = info
        suffix = self.spec.marker_suffix
        patterns = self.spec.file_patterns()
        settled_before = time.time_ns() - int(self.spec.settle_seconds * 1e9)
        complete = []
        for relative, info in present.items():
            if suffix and relative.endswith(suffix):
                continue
            if not any(fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], p) for p in patterns):
                continue
            if "\n" in relative or "\r" in relative:
                raise SourceError(f"{self.display_name}: file name {relative!r} holds a line break; rename it")
            if info.mtime_ns is None:
                raise SourceError(
                    f"{self.display_name}: the filesystem reports no modification time for {relative!r}; "
                    "set marker_suffix"
                )
            if (relative + suffix in present) if suffix else info.mtime_ns <= settled_before:
                complete.append(LandedFile(relative, int(info.size), int(info.mtime_ns)))
        complete.sort(key=lambda f: (f.mtime_ns, f.path))
        return complete

    # -- offsets log ---------------------------------------------------------------------------
    def committed_files(self, committed: Offsets | None) -> frozenset[str]:
        """The relative paths of the files that ``committed`` says are in the lake."""
        if committed is None:
            return frozenset()
        try:
            uri, sha, count = str(committed["log"]), str(committed["sha256"]), int(committed["files"])
        except (KeyError, TypeError, ValueError):
            raise SourceError(
                f"{self.display_name}: committed offsets {committed!r} are not those of a file source"
            ) from None
        cached = self._committed_cache.get(sha)
        if cached is not None:
            return cached
        try:
            filesystem, path = pafs.FileSystem.from_uri(uri)
            with filesystem.open_input_stream(path, compression=None) as stream:
                text = gzip.decompress(stream.read())
        except (OSError, EOFError, zlib.error, pa.ArrowInvalid) as exc:
            raise SourceError(
                f"{self.display_name}: the offsets log {uri} of the committed files is missing or unreadable: {exc}"
            ) from None
        files = frozenset(text.decode("utf-8").splitlines())
        if hashlib.sha256(text).hexdigest() != sha or len(files) != count:
            raise SourceError(
                f"{self.display_name}: the offsets log {uri} is corrupt: it does not hold the {count} files "
                f"of sha256 {sha}"
            )
        self._committed_cache[sha] = files
        return files

    def write_log(self, files: frozenset[str], total_bytes: int) -> Offsets:
        """Write the offsets log of ``files`` (content-addressed: writing it twice is harmless)."""
        if self._log_dir is None:
            raise SourceError(f"{self.display_name}: the lake table is not bound (bind_lake was not called)")
        text = "".join(f"{path}\n" for path in sorted(files)).encode("utf-8")
        sha = hashlib.sha256(text).hexdigest()
        uri = f"{self._log_dir}/{sha}.txt.gz"
        filesystem, path = pafs.FileSystem.from_uri(uri)
        directory = path.rsplit("/", 1)[0]
        temporary = f"{directory}/.{sha}.{uuid.uuid4().hex}.tmp"
        try:
            filesystem.create_dir(directory, recursive=True)
            with filesystem.open_output_stream(temporary, compression=None) as out:
                out.write(gzip.compress(text, mtime=0))
            filesystem.move(temporary, path)
        except OSError as exc:
            raise SourceError(f"{self.display_name}: cannot write the offsets log {uri}: {exc}") from None
        self._committed_cache[sha] = files
        return {"files": len(files), "bytes": total_bytes, "log": uri, "sha256": sha}

    # -- Source --------------------------------------------------------------------------------
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def bind_lake(self, table_location: str) -> None:
        self._log_dir = f"{table_location.rstrip('/')}/{LOG_DIR}"

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
        schemas = []
        for landed in files:
            try:
                with filesystem.open_input_file(f"{root}/{landed.path}") as handle:
                    schemas.append(pq.read_schema(handle))
            except (OSError, *_ARROW_ERRORS) as exc:
                raise SourceError(f"{self.display_name}: cannot read the schema of {landed.path}: {exc}") from None
        try:
            unified = pa.unify_schemas(schemas)
        except _ARROW_ERRORS as exc:
            raise SourceError(f"{self.display_name}: the files' schemas do not agree: {exc}") from None
        self._schema = pa.schema([pa.field(f.name, f.type) for f in unified])
        return self._schema

    def _pending_files(self, start: Offsets | None) -> list[LandedFile]:
        key = json.dumps(start, sort_keys=True)
        if self._pending is None or self._pending[0] != key:
            committed = self.committed_files(start)
            self._pending = (key, [f for f in self.list_complete() if f.path not in committed])
        return self._pending[1]

    def safe_watermark(self, committed: Offsets | None, candidate: dict[str, Any] | None) -> SafeWatermark:
        """Complete files not in ``committed``; the end offset is opaque (``{"pending_files": n}``)."""
        self._pending = None  # a fresh listing each round
        pending = self._pending_files(committed)
        if not pending:
            return SafeWatermark(end=None, observed=None)
        end = {"pending_files": len(pending), "pending_bytes": sum(f.size for f in pending)}
        if self._log_dir is None and self.spec.columns is None:
            # Parquet files arrived after this round found none to take a schema from, so it created no
            # lake table to keep the offsets log in: the next round takes them.
            return SafeWatermark(end=None, observed=end)
        return SafeWatermark(end=end, observed=end)

    def has_rows_after(self, committed: Offsets | None) -> bool:
        tiered = self.committed_files(committed)
        return any(f.path not in tiered for f in self.list_complete())

    def plan_range(self, start: Offsets | None, end: Offsets, max_rows: int) -> FilePlan:
        """The pending files, oldest first, at most ``max_files_per_round`` (``max_rows`` is not applied:
        rows are unknown before the files are read)."""
        pending = self._pending_files(start)
        chosen = tuple(pending[: self.spec.max_files_per_round])
        left = len(pending) - len(chosen)
        return FilePlan(start, end, len(chosen), capped=left > 0, remaining_rows=left, files=chosen)

    def cut_splits(self, plan: RangePlan, target_rows_per_split: int, parallelism: int) -> list[Split]:
        """Bin-pack the plan's files by bytes (largest first into the least-loaded split).

        ``target_bytes_per_split`` of the spec sizes the splits (``target_rows_per_split`` is not
        used). The count is ``parallelism * ceil(bytes / (target_bytes_per_split * parallelism))``,
        at most one split per file.
        """
        files = self._plan_files(plan)
        if not files:
            return []
        slots = max(1, parallelism)
        total = sum(f.size for f in files)
        wanted = slots * math.ceil(max(total, 1) / (self.spec.target_bytes_per_split * slots))
        count = min(wanted, len(files))
        bins: list[list[LandedFile]] = [[] for _ in range(count)]
        loads = [(0, i) for i in range(count)]
        for landed in sorted(files, key=lambda f: (-f.size, f.path)):
            load, index = heapq.heappop(loads)
            bins[index].append(landed)
            heapq.heappush(loads, (load + landed.size, index))
        return [
            FileSplit(i, None, None, len(b), files=tuple(sorted(b, key=lambda f: (f.mtime_ns, f.path))))
            for i, b in enumerate(bins)
        ]

    def end_offsets(self, plan: RangePlan) -> Offsets:
        files = self._plan_files(plan)
        start = plan.lower
        tiered = self.committed_files(start) | {f.path for f in files}
        total = (0 if start is None else int(start["bytes"])) + sum(f.size for f in files)
        return self.write_log(tiered, total)

    def _plan_files(self, plan: RangePlan) -> tuple[LandedFile, ...]:
        if not isinstance(plan, FilePlan):
            raise SourceError(f"{self.display_name}: expected a plan of this source, got {type(plan).__name__}")
        return plan.files

    def take_rejects(self) -> list[dict[str, Any]]:
        rejects, self._rejects = self._rejects, []
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
    def read_split(self, split: Split, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        if not isinstance(split, FileSplit):
            raise SourceError(f"{self.display_name}: expected a split of this source, got {type(split).__name__}")
        filesystem, root = self.filesystem()
        for landed in split.files:
            path = f"{root}/{landed.path}"
            self._check_unchanged(filesystem, path, landed)
            if self.spec.format == "parquet":
                yield from self._read_parquet(filesystem, path, landed, schema)
            else:
                try:
                    with filesystem.open_input_stream(path, compression=None) as stream:
                        data = stream.read()
                except OSError as exc:
                    raise SourceError(f"{self.display_name}: cannot read {landed.path}: {exc}") from None
                if len(data) != landed.size:
                    raise self._changed(landed)
                table = self._read_text(data, landed, schema)
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

    def _read_parquet(
        self, filesystem: pafs.FileSystem, path: str, landed: LandedFile, schema: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        try:
            with filesystem.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                present = [name for name in schema.names if name in parquet.schema_arrow.names]
                if not present:
                    raise SourceError(f"{self.display_name}: file {landed.path} holds none of the columns")
                for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=present):
                    columns = []
                    for field in schema:
                        if field.name not in present:
                            columns.append(pa.nulls(batch.num_rows, field.type))
                            continue
                        column = batch.column(field.name)
                        try:
                            columns.append(column if column.type == field.type else pc.cast(column, field.type))
                        except _ARROW_ERRORS as exc:
                            raise SourceError(
                                f"{self.display_name}: file {landed.path} column {field.name!r}: cannot convert "
                                f"{column.type} to {field.type}: {exc}"
                            ) from None
                    yield pa.RecordBatch.from_arrays(columns, schema=schema)
        except (OSError, *_ARROW_ERRORS) as exc:
            raise SourceError(f"{self.display_name}: cannot read {landed.path}: {exc}") from None

    def _read_text(self, data: bytes, landed: LandedFile, schema: pa.Schema) -> pa.Table:
        """Parse a whole JSON-lines or CSV file with pyarrow; find the bad records only if that fails."""
        if self.spec.format == "jsonl":
            header, parse = b"", _jsonl_parser(schema)
        else:
            header, parse = self._csv_header(data), self._csv_parser(schema)
        try:
            return parse(data)
        except _ARROW_ERRORS as exc:
            whole_file_error = exc
        if self.spec.format == "jsonl":
            records, bad = _jsonl_records(data)
        else:
            self._check_csv_header(header, landed, schema)
            records, bad = self._csv_records(data, header)
        tables = []
        for good_or_bad in _parse_bisecting(records, lambda chunk: parse(header + chunk)):
            if isinstance(good_or_bad, _BadRecord):
                bad.append(good_or_bad)
            else:
                tables.append(good_or_bad)
        if not bad:  # pyarrow refused the file, yet every record parses on its own
            raise SourceError(f"{self.display_name}: cannot read {landed.path}: {whole_file_error}") from None
        bad.sort(key=lambda b: b.record.line)
        if self.spec.on_bad_record == "fail":
            first = bad[0]
            more = f" (and {len(bad) - 1} more bad records)" if len(bad) > 1 else ""
            raise SourceError(
                f"{self.display_name}: file {landed.path} line {first.record.line}: {first.reason}{more}"
            ) from None
        for b in bad:
            self._rejects.append(
                {
                    "source_file": landed.path,
                    "line": b.record.line,
                    "record": b.record.raw[:REJECT_RECORD_BYTES].decode("utf-8", errors="replace").rstrip("\r\n"),
                    "reason": b.reason,
                }
            )
        return pa.concat_tables(tables) if tables else schema.empty_table()

    # -- CSV -----------------------------------------------------------------------------------
    def _csv_parser(self, schema: pa.Schema) -> Callable[[bytes], pa.Table]:
        header = self.spec.csv_header
        parse_options = pacsv.ParseOptions(delimiter=self.spec.csv_delimiter, newlines_in_values=True)
        convert_options = pacsv.ConvertOptions(
            column_types={f.name: f.type for f in schema}, include_columns=list(schema.names)
        )

        def parse(data: bytes) -> pa.Table:
            if not data.strip():
                return schema.empty_table()
            read_options = pacsv.ReadOptions(
                use_threads=False,
                block_size=min(len(data) + 1, 2**31 - 1),
                column_names=None if header else list(schema.names),
            )
            table = pacsv.read_csv(
                pa.BufferReader(data),
                read_options=read_options,
                parse_options=parse_options,
                convert_options=convert_options,
            )
            return table.select(schema.names).cast(schema)

        return parse

    def _csv_header(self, data: bytes) -> bytes:
        if not self.spec.csv_header:
            return b""
        end = data.find(b"\n")
        return data if end < 0 else data[: end + 1]

    def _check_csv_header(self, header: bytes, landed: LandedFile, schema: pa.Schema) -> None:
        if not header:
            return
        names = next(csv.reader([header.decode("utf-8", errors="replace")], delimiter=self.spec.csv_delimiter), [])
        missing = [n for n in schema.names if n not in names]
        if missing:
            raise SourceError(
                f"{self.display_name}: file {landed.path}: the header has no column(s) {', '.join(missing)}"
            )

    def _csv_records(self, data: bytes, header: bytes) -> tuple[list[_Record], list[_BadRecord]]:
        """Split a CSV file into records (quoted values may span lines) with Python's csv module."""
        lines = data[len(header) :].splitlines(keepends=True)
        first_line = 2 if header else 1
        expected = (
            len(next(csv.reader([header.decode("utf-8", errors="replace")], delimiter=self.spec.csv_delimiter)))
            if header
            else len(self.spec.columns or ())
        )
        consumed: list[int] = []

        def feed() -> Iterator[str]:
            for index, line in enumerate(lines):
                consumed.append(index)
                yield line.decode("utf-8", errors="replace")

        reader = csv.reader(feed(), delimiter=self.spec.csv_delimiter)
        records: list[_Record] = []
        bad: list[_BadRecord] = []
        while True:
            try:
                fields: list[str] | None = next(reader)
                reason = None
            except StopIteration:
                break
            except csv.Error as exc:
                fields, reason = None, f"malformed CSV: {exc}"
            if not consumed:
                break
            raw = b"".join(lines[i] for i in consumed)
            if not raw.endswith(b"\n"):
                raw += b"\n"
            record = _Record(first_line + consumed[0], raw)
            consumed.clear()
            if fields == []:  # an empty line
                continue
            if fields is not None and len(fields) != expected:
                reason = f"expected {expected} columns, got {len(fields)}"
            if reason is None:
                records.append(record)
            else:
                bad.append(_BadRecord(record, reason))
        return records, bad


def _jsonl_parser(schema: pa.Schema) -> Callable[[bytes], pa.Table]:
    # pyarrow's JSON reader does not parse dates from strings: they are read as text and cast.
    read_schema = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_date(f.type) else f for f in schema])
    parse_options = pajson.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore")

    def parse(data: bytes) -> pa.Table:
        if not data.strip():
            return schema.empty_table()
        read_options = pajson.ReadOptions(use_threads=False, block_size=min(len(data) + 1, 2**31 - 1))
        table = pajson.read_json(pa.BufferReader(data), read_options=read_options, parse_options=parse_options)
        return table.select(schema.names).cast(schema)

    return parse


def _jsonl_records(data: bytes) -> tuple[list[_Record], list[_BadRecord]]:
    """Split a JSON-lines file into records; lines that are not a JSON object are bad at once."""
    records: list[_Record] = []
    bad: list[_BadRecord] = []
    for number, line in enumerate(data.splitlines(keepends=True), start=1):
        if not line.strip():
            continue
        record = _Record(number, line if line.endswith(b"\n") else line + b"\n")
        try:
            value = json.loads(line)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            bad.append(_BadRecord(record, f"malformed JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            bad.append(_BadRecord(record, f"not a JSON object but {type(value).__name__}"))
        else:
            records.append(record)
    return records, bad


def _parse_bisecting(records: Sequence[_Record], parse: Callable[[bytes], pa.Table]) -> Iterator[pa.Table | _BadRecord]:
    """Parse records in chunks with pyarrow, halving a chunk that fails until the bad records are alone.

    Bad records are rare, so this costs a few parses per bad record, and a good record is always
    converted by the same reader (and the same rules) as a file without bad records.
    """
    if not records:
        return
    try:
        yield parse(b"".join(r.raw for r in records))
        return
    except _ARROW_ERRORS as exc:
        if len(records) == 1:
            yield _BadRecord(
                records[0], "does not convert to the declared columns: " + _PYARROW_ROW_SUFFIX.sub("", str(exc))
            )
            return
    middle = len(records) // 2
    yield from _parse_bisecting(records[:middle], parse)
    yield from _parse_bisecting(records[middle:], parse)
