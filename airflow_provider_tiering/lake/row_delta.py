"""One snapshot that adds and removes data files *and* position-delete files: the commit of a merge-on-read round
(new row versions as data files, superseded rows as position deletes, files that lose most of their rows rewritten)
and of a compaction that applies deletes (rewritten files in, their delete files out). ADR 0017.

pyiceberg 0.12 reads position deletes but has no public API to commit them: its snapshot producers write added
files into *data* manifests only, and rewrite a manifest that loses an entry with a data-manifest writer. This module
is the one place that uses its private producer (``_SnapshotProducer``) and manifest writer (``ManifestWriterV2``):
a producer whose manifests keep each file's kind (a data manifest for data files, a delete manifest for delete
files, in added, removed and kept entries alike). It is pinned to the pyiceberg version it was checked against
(``PYICEBERG_VERSION``); on another, :func:`row_delta_available` is False and rounds merge copy-on-write only, and the
contract test (``tests/integration/test_row_delta_contract.py``) fails, naming the version.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table.update.snapshot import _SnapshotProducer  # private: see the module's description

from airflow_provider_tiering.core.errors import LakeError

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction

#: The pyiceberg version whose private producer this module was written and contract-tested against.
PYICEBERG_VERSION = "0.12.0"


def row_delta_available() -> bool:
    """Whether the installed pyiceberg is the one this module's private calls were checked against."""
    import pyiceberg

    return str(pyiceberg.__version__) == PYICEBERG_VERSION


class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, writing a manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_SnapshotProducer["RowDelta"]):
    """Adds and removes data and position-delete files in one snapshot (see the module's description)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._added_delete_files: list[DataFile] = []
        self._removed_delete_files: set[DataFile] = set()
        self._read_entries: dict[str, list[ManifestEntry]] = {}

    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        self._added_delete_files.append(delete_file)
        return self

    def remove_delete_file(self, delete_file: DataFile) -> RowDelta:
        self._removed_delete_files.add(delete_file)
        return self

    def _writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        if content == ManifestContent.DATA:
            return self.new_manifest_writer(self.spec(spec_id))
        return DeleteManifestWriter(
            spec=self.spec(spec_id),
            schema=self.schema(),
            output_file=self.new_manifest_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )

    def _validate_concurrency(self) -> None:
        """Nothing here: pyiceberg's generic check refuses any data file appended concurrently, while a row
        delta conflicts only with a commit that removed a file it removes or its deletes name; the caller's
        fence checks exactly that on every retry (``fenced_transaction``)."""

    def _spec_id_of(self, data_file: DataFile) -> int:
        found = getattr(data_file, "_spec_id", None)  # DataFile.spec_id raises when from_args was not given one
        return self._transaction.table_metadata.default_spec_id if found is None else int(found)

    def _removed(self) -> set[DataFile]:
        return self._deleted_data_files | self._removed_delete_files

    def _parent_manifests(self) -> list[ManifestFile]:
        if self._parent_snapshot_id is None:
            return []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        return [] if parent is None else list(parent.manifests(io=self._io))

    def _entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        """A parent manifest's live entries, read once per commit (both passes below need them)."""
        found = self._read_entries.get(manifest.manifest_path)
        if found is None:
            found = self._read_entries[manifest.manifest_path] = manifest.fetch_manifest_entry(
                io=self._io, discard_deleted=True
            )
        return found

    def _existing_manifests(self) -> list[ManifestFile]:
        """The parent's manifests, those holding a removed file written again without it, by a writer of the
        manifest's own kind (none read when nothing is removed: a round that only adds files and deletes)."""
        removed, kept_manifests = self._removed(), []
        if not removed:  # as pyiceberg's fast append: manifests left listing only removed files are dropped
            return [m for m in self._parent_manifests() if m.has_added_files() or m.has_existing_files()]
        for manifest in self._parent_manifests():
            entries = self._entries(manifest)
            if not any(entry.data_file in removed for entry in entries):
                kept_manifests.append(manifest)
                continue
            kept = [entry for entry in entries if entry.data_file not in removed]
            if not kept:
                continue
            with self._writer(manifest.content, manifest.partition_spec_id) as writer:
                for entry in kept:
                    writer.existing(entry)
            kept_manifests.append(writer.to_manifest_file())
        return kept_manifests

    def _removed_entries(self) -> list[tuple[ManifestEntry, int]]:
        """The parent's entries of the removed files, each with its manifest's partition spec."""
        removed, found = self._removed(), []
        if not removed:
            return []
        for manifest in self._parent_manifests():
            for entry in self._entries(manifest):
                if entry.data_file in removed:
                    found.append((entry, manifest.partition_spec_id))
        missing = {f.file_path for f in removed} - {e.data_file.file_path for e, _ in found}
        if missing:
            raise ValueError(f"files to remove are not in the snapshot committed onto: {sorted(missing)[:3]}")
        return found

    def _deleted_entries(self) -> list[ManifestEntry]:
        return [entry for entry, _ in self._removed_entries()]

    def _manifests(self) -> list[ManifestFile]:
        written: list[ManifestFile] = []
        added: dict[tuple[ManifestContent, int], list[DataFile]] = defaultdict(list)
        for data_file in self._added_data_files:
            added[(ManifestContent.DATA, self._spec_id_of(data_file))].append(data_file)
        for delete_file in self._added_delete_files:
            added[(ManifestContent.DELETES, self._spec_id_of(delete_file))].append(delete_file)
        for (content, spec_id), files in added.items():
            with self._writer(content, spec_id) as writer:
                for data_file in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=data_file,
                        )
                    )
            written.append(writer.to_manifest_file())
        deleted: dict[tuple[ManifestContent, int], list[ManifestEntry]] = defaultdict(list)
        for entry, spec_id in self._removed_entries():
            content = (
                ManifestContent.DATA if entry.data_file.content == DataFileContent.DATA else ManifestContent.DELETES
            )
            deleted[(content, spec_id)].append(entry)
        for (content, spec_id), entries in deleted.items():
            with self._writer(content, spec_id) as writer:
                for entry in entries:
                    writer.delete(entry)
            written.append(writer.to_manifest_file())
        return written + self._existing_manifests()

    def _summary(self, snapshot_properties: dict[str, str] | None = None) -> Any:
        # The summary counts added and removed delete files from the same lists as data files.
        added, removed = self._added_data_files, self._deleted_data_files
        self._added_data_files = [*added, *self._added_delete_files]
        self._deleted_data_files = removed | self._removed_delete_files
        try:
            return super()._summary(snapshot_properties or {})
        finally:
            self._added_data_files, self._deleted_data_files = added, removed


def commit_row_delta(
    tx: Transaction,
    table: Table,
    *,
    properties: dict[str, str],
    added_data: Sequence[DataFile] = (),
    added_deletes: Sequence[DataFile] = (),
    removed_data: Sequence[DataFile] = (),
    removed_deletes: Sequence[DataFile] = (),
) -> None:
    """In ``tx``, one ``overwrite`` snapshot with ``properties`` in its summary: the data and delete files added and
    removed. Run it in a fenced transaction whose fence checks that the files removed, and those the added deletes
    name, are still live: pyiceberg's own retry applies the snapshot onto whatever was committed meanwhile.

    Raises:
        ValueError: a file to remove is not in the snapshot the transaction commits onto.
        LakeError: the installed pyiceberg is not the one this module was checked against (nothing committed).
    """
    import pyiceberg
    from pyiceberg.table.snapshots import Operation

    if not row_delta_available():
        raise LakeError(
            f"{table.name()}: committing position-delete files needs pyiceberg {PYICEBERG_VERSION} (installed: "
            f"{pyiceberg.__version__}), whose private snapshot producer this provider was checked against; install "
            f"pyiceberg=={PYICEBERG_VERSION}, or compact the table's delete files away with that version first"
        )

    producer = RowDelta(operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties)
    with producer:
        for data_file in removed_data:
            producer.delete_data_file(data_file)
        for delete_file in removed_deletes:
            producer.remove_delete_file(delete_file)
        for data_file in added_data:
            producer.append_data_file(data_file)
        for delete_file in added_deletes:
            producer.add_delete_file(delete_file)
