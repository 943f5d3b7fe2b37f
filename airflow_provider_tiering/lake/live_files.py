"""What a lake table's current snapshot holds: its data files, each with the position-delete files that apply to it,
and how many live rows that makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table


def live_data_files(table: Table) -> list[DataFile]:
    """The data files of the table's current snapshot (not its delete files)."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    files = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            files.append(entry.data_file)
    return files


def live_delete_files(table: Table) -> list[DataFile]:
    """The delete files of the table's current snapshot."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    files: list[DataFile] = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content == ManifestContent.DELETES:
            files.extend(e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return files


def live_tasks(table: Table) -> list[FileScanTask]:
    """Each data file of the current snapshot with the delete files that apply to it (pyiceberg's scan planning
    matches them by partition, sequence number and ``file_path`` bounds)."""
    if table.current_snapshot() is None:
        return []
    return list(table.scan().plan_files())


def has_live_delete_files(table: Table) -> bool:
    """Whether the current snapshot has delete files."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    return any(
        m.content == ManifestContent.DELETES and (m.has_added_files() or m.has_existing_files())
        for m in snapshot.manifests(table.io)
    )


def live_row_count(table: Table) -> int:
    """Rows of the current snapshot: its files' rows less those their position deletes delete (each deleted row
    counted once, whatever deletes it; only the delete files are read)."""
    from airflow_provider_tiering.lake.position_deletes import DeletedPositions

    deletes = DeletedPositions(table.io)
    return sum(task.file.record_count - deletes.of(task.file, task.delete_files).size for task in live_tasks(table))
