"""Open a landing zone's filesystem: a local directory or an object store, with options from its connection."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pyarrow import fs as pafs


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
    path = fsspec_filesystem._strip_protocol(location)  # fsspec's own path normalisation (no public name for it)
    # pyarrow-stubs declare FSSpecHandler abstract; pyarrow documents wrapping fsspec filesystems with it.
    handler = pafs.FSSpecHandler(fsspec_filesystem)  # type: ignore[abstract]
    return pafs.PyFileSystem(handler), str(path).rstrip("/")
