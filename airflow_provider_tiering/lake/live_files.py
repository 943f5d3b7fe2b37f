"""What a lake table's current snapshot holds: its data files, and whether it has delete files."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table


def live_data_files(table: Table) -> list[DataFile]:
    """The data files of the table's current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    files = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            files.append(entry.data_file)
    return files


def has_live_delete_files(table: Table) -> bool:
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
