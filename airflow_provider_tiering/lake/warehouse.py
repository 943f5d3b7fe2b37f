"""Open the lake's storage for a URI, with the catalog's storage properties, for writing data files and cleaning up.

Every lake-side file I/O (data files written in Spark tasks and in the task process, offsets logs, rejects, cleanup,
maintenance) opens its filesystem here, from a table's FileIO properties: the catalog's ``s3.endpoint``,
``s3.access-key-id``, ``s3.secret-access-key``, ``s3.region``, ``s3.force-virtual-addressing``... (and, for a REST
catalog, the credentials it vends with the table). pyiceberg's ``PyArrowFileIO`` maps them to a pyarrow filesystem,
as it does for the metadata it writes itself, so data files and metadata go through the same client settings.
``LakeStorage`` is a plain value: Spark tasks receive it in their closure and open the filesystem there, never from
the executor's own environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
from pyarrow import fs as pafs

if TYPE_CHECKING:
    from pyiceberg.io.pyarrow import PyArrowFileIO

#: FileIO properties that say how to reach storage (pyiceberg's ``s3.*``, ``client.*``, ``gcs.*``, ``adls.*``,
#: ``hdfs.*``, ``oss.*``, ``hf.*`` keys and its few unprefixed ones); a catalog's other properties (its URI, token,
#: credential) are not the storage's business and do not travel to Spark tasks.
STORAGE_PREFIXES = ("s3.", "client.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "pyarrow.")
STORAGE_KEYS = frozenset({"py-io-impl", "DEFAULT_SCHEME", "DEFAULT_NETLOC"})


def storage_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The storage part of FileIO (or catalog) properties."""
    return {k: str(v) for k, v in properties.items() if k.startswith(STORAGE_PREFIXES) or k in STORAGE_KEYS}


@lru_cache(maxsize=16)
def _file_io(items: tuple[tuple[str, str], ...]) -> PyArrowFileIO:
    # One FileIO per set of properties and process: its filesystems (and their S3 clients) are cached inside it.
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO(dict(items))


class _LocalFileSystem(pafs.LocalFileSystem):
    """pyiceberg's local filesystem (``PyArrowLocalFileSystem``, 0.12): opening a file creates its directory."""

    def open_output_stream(self, path: str, *args: Any, **kwargs: Any) -> pa.NativeFile:
        self.create_dir(os.path.dirname(path), recursive=True)
        return super().open_output_stream(path, *args, **kwargs)


def _local_path(uri: str, properties: Mapping[str, str]) -> str | None:
    """``uri``'s path when it names a local file (a plain path, or ``file:`` without a host) and the properties do
    not send plain paths elsewhere (``DEFAULT_SCHEME``); None otherwise. pyiceberg's ``parse_location`` reads
    these the same way."""
    if properties.get("DEFAULT_SCHEME", "file") != "file" or properties.get("DEFAULT_NETLOC"):
        return None
    parsed = urlparse(uri)
    if not parsed.scheme:
        return os.path.abspath(uri)
    if parsed.scheme == "file" and not parsed.netloc:
        return parsed.path
    return None


@dataclass(frozen=True)
class LakeStorage:
    """The storage properties of a lake table, and the filesystems they open. Picklable (Spark closures)."""

    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> LakeStorage:
        """From a table's FileIO properties (``table.io.properties``) or a catalog's: only the storage part is kept."""
        return cls(storage_properties(properties))

    def filesystem_and_path(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """A warehouse URI (``file://``, ``s3://``, a plain path...) as a pyarrow filesystem and a path in it
        (``s3://b/x`` -> ``b/x``, ``file:///w/x`` -> ``/w/x``), the filesystem opened as pyiceberg's FileIO opens it
        for these properties (public ``parse_location`` and ``fs_by_scheme``).

        A local path is opened without pyiceberg's FileIO, whose import costs each Spark worker about 0.5 s of CPU:
        the same filesystem, and the same path."""
        local = _local_path(uri, self.properties)
        if local is not None:
            return _LocalFileSystem(), local
        from pyiceberg.io.pyarrow import PyArrowFileIO

        io = _file_io(tuple(sorted(self.properties.items())))
        scheme, netloc, path = PyArrowFileIO.parse_location(uri, io.properties)
        return io.fs_by_scheme(scheme, netloc), path

    def __repr__(self) -> str:  # the values may be credentials: name the keys only
        return f"LakeStorage(keys={sorted(self.properties)})"


#: No storage properties: local paths, or an object store through the environment's defaults (tests, benchmarks).
LOCAL_STORAGE = LakeStorage()


def strip_scheme(uri: str) -> str:
    """A URI's path as the filesystem lists it (``file:///w/x`` -> ``/w/x``, ``s3://b/x`` -> ``b/x``)."""
    return uri.split("://", 1)[1] if "://" in uri else uri
