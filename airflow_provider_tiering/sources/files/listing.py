"""Find the complete data files of a landing zone: matching names, not hidden, settled or marked done."""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass

from pyarrow import fs as pafs

from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.source_specs import FileSourceSpec


@dataclass(frozen=True)
class LandedFile:
    """A complete file of the landing zone, as the plan saw it."""

    path: str  # relative to the landing zone, "/"-separated
    size: int
    mtime_ns: int


def is_ignored(relative: str) -> bool:
    """Files and folders whose name starts with ``_`` or ``.`` are never data (writers' temporary files)."""
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def list_complete(filesystem: pafs.FileSystem, root: str, spec: FileSourceSpec, display_name: str) -> list[LandedFile]:
    """The complete data files under ``root``, oldest mtime first, then by path.

    A file is complete once its mtime is ``settle_seconds`` old, or, with ``marker_suffix``, once its
    marker file exists (marker files are never data).
    """
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=spec.recursive, allow_not_found=True))
    except OSError as exc:
        raise SourceError(f"{display_name}: cannot list the landing zone: {exc}") from exc
    present: dict[str, pafs.FileInfo] = {}
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].lstrip("/")
        if not is_ignored(relative):
            present[relative] = info
    suffix = spec.marker_suffix
    patterns = spec.file_patterns()
    settled_before = time.time_ns() - int(spec.settle_seconds * 1e9)
    complete = []
    for relative, info in present.items():
        if suffix and relative.endswith(suffix):
            continue
        if not any(fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], p) for p in patterns):
            continue
        if "\n" in relative or "\r" in relative:
            raise SourceError(f"{display_name}: file name {relative!r} holds a line break; rename it")
        if info.mtime_ns is None:
            raise SourceError(
                f"{display_name}: the filesystem reports no modification time for {relative!r}; set marker_suffix"
            )
        if (relative + suffix in present) if suffix else info.mtime_ns <= settled_before:
            complete.append(LandedFile(relative, int(info.size), int(info.mtime_ns)))
    complete.sort(key=lambda f: (f.mtime_ns, f.path))
    return complete
