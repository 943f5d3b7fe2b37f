"""A landing zone's offsets: the set of tiered files, kept in the lake as a content-addressed log.

The log is a gzip'd, sorted list of relative paths under ``<table location>/metadata/tiering-source-files/``,
named by its sha256; the lake snapshot's offsets only reference it, so writing it twice is harmless and a log
cannot change once a snapshot names it.
"""

from __future__ import annotations

import gzip
import hashlib
import uuid
import zlib
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import Offsets, file_offsets
from airflow_provider_tiering.lake.warehouse import LOCAL_STORAGE, LakeStorage

#: Offsets logs live under ``<table location>/`` this folder.
LOG_DIR = "metadata/tiering-source-files"


class OffsetsLog:
    """Reads and writes the file logs of one lake table (bound to its location once the table exists), through the
    lake's storage properties (the catalog's; bound before a probe reads a log, with the location in a round)."""

    def __init__(self, display_name: str) -> None:
        self.display_name = display_name
        self._directory: str | None = None
        self._storage = LOCAL_STORAGE
        self._read: dict[str, frozenset[str]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_read": {}}  # executors need none of the driver's logs

    def bind(self, table_location: str | None, storage: Mapping[str, str]) -> None:
        """Use the lake's ``storage`` properties; with ``table_location`` (the table exists), write logs there."""
        if table_location is not None:
            self._directory = f"{table_location.rstrip('/')}/{LOG_DIR}"
        self._storage = LakeStorage(dict(storage))

    @property
    def is_bound(self) -> bool:
        return self._directory is not None

    def files(self, committed: Offsets | None) -> frozenset[str]:
        """The relative paths of the files that ``committed`` says are in the lake."""
        if committed is None:
            return frozenset()
        log = file_offsets(committed)
        uri, sha, count = log["log"], log["sha256"], log["files"]
        cached = self._read.get(sha)
        if cached is not None:
            return cached
        try:
            filesystem, path = self._storage.filesystem_and_path(uri)
            with filesystem.open_input_stream(path, compression=None) as stream:
                text = gzip.decompress(stream.read())
        except (OSError, EOFError, zlib.error, pa.ArrowInvalid) as exc:
            raise SourceError(
                f"{self.display_name}: the offsets log {uri} of the committed files is missing or unreadable: {exc}"
            ) from exc
        files = frozenset(text.decode("utf-8").splitlines())
        if hashlib.sha256(text).hexdigest() != sha or len(files) != count:
            raise SourceError(
                f"{self.display_name}: the offsets log {uri} is corrupt: it does not hold the {count} files "
                f"of sha256 {sha}"
            )
        self._read[sha] = files
        return files

    def write(self, files: frozenset[str], total_bytes: int) -> Offsets:
        """Write the log of ``files`` (by rename, content-addressed) and return the offsets that name it."""
        if self._directory is None:
            raise SourceError(f"{self.display_name}: the lake table is not bound (bind_lake was not called)")
        text = "".join(f"{path}\n" for path in sorted(files)).encode("utf-8")
        sha = hashlib.sha256(text).hexdigest()
        uri = f"{self._directory}/{sha}.txt.gz"
        filesystem, path = self._storage.filesystem_and_path(uri)
        directory = path.rsplit("/", 1)[0]
        temporary = f"{directory}/.{sha}.{uuid.uuid4().hex}.tmp"
        try:
            filesystem.create_dir(directory, recursive=True)
            with filesystem.open_output_stream(temporary, compression=None) as out:
                out.write(gzip.compress(text, mtime=0))
            filesystem.move(temporary, path)
        except OSError as exc:
            raise SourceError(f"{self.display_name}: cannot write the offsets log {uri}: {exc}") from exc
        self._read[sha] = files
        return {"files": len(files), "bytes": total_bytes, "log": uri, "sha256": sha}
