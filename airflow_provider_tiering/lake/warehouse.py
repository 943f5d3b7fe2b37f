"""Open the warehouse's filesystem for a URI, for writing data files and for cleaning them up."""

from __future__ import annotations

from pyarrow import fs as pafs


def filesystem_and_path(uri: str) -> tuple[pafs.FileSystem, str]:
    """Resolve a warehouse URI (``file://``, ``s3://``, a plain path...) to a pyarrow filesystem and a path in it."""
    return pafs.FileSystem.from_uri(uri)


def strip_scheme(uri: str) -> str:
    """A URI's path as the filesystem lists it (``file:///w/x`` -> ``/w/x``, ``s3://b/x`` -> ``b/x``)."""
    return uri.split("://", 1)[1] if "://" in uri else uri
