"""Orphan removal: delete files under a lake table's ``data/`` and ``metadata/`` that nothing references.

Only files older than a safety age go, so a round still writing or committing (its files are new) is never touched.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pyarrow import fs as pafs

from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.warehouse import LakeStorage, strip_scheme

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def referenced_paths(table: Table) -> tuple[set[str], set[str]]:
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
                data.add(strip_scheme(entry.data_file.file_path))
    meta |= seen
    return data, {strip_scheme(path) for path in meta}


def _remove_unreferenced(directory_uri: str, referenced: set[str], cutoff: datetime, storage: LakeStorage) -> list[str]:
    filesystem, root = storage.filesystem_and_path(directory_uri)
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
    storage = LakeStorage.of(table.io.properties)
    removed = _remove_unreferenced(f"{location}/data", data, cutoff, storage)
    removed += _remove_unreferenced(f"{location}/metadata", metadata, cutoff, storage)
    if removed:
        log.info("%s: removed %d orphan files", ".".join(table.name()), len(removed))
    return removed
