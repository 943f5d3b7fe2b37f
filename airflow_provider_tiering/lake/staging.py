"""Where rounds write their data files before committing them, and how files of dead attempts are deleted.

Data files of tiering rounds live under ``<table location>/data/tiering/epoch-NNNNNNNNNN/attempt-<id>/``: no reader
sees them until a commit references them. After a commit, files that no snapshot references are deleted, for this
attempt (Spark task retries, speculation) and for the older epochs, whose attempts can never commit any more. Files
of the committed epoch and above are never touched: a newer attempt may be writing them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyarrow import fs as pafs

from airflow_provider_tiering.lake.tiering_commits import tiering_epoch
from airflow_provider_tiering.lake.warehouse import LakeStorage, strip_scheme

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: Data files of tiering rounds live under <table location>/data/<STAGING_DIR>/epoch-NNNNNNNNNN/attempt-<id>/.
STAGING_DIR = "tiering"
_EPOCH_DIR = re.compile(r"^epoch-(\d+)$")


def epoch_dir(epoch: int) -> str:
    return f"epoch-{epoch:010d}"


def staging_root(location: str) -> str:
    return f"{location.rstrip('/')}/data/{STAGING_DIR}"


def attempt_uri(location: str, epoch: int, attempt: str) -> str:
    """Where one attempt of a round writes its data files."""
    return f"{staging_root(location)}/{epoch_dir(epoch)}/attempt-{attempt}"


def referenced_paths(table: Table, prefixes: Iterable[str], epochs: Iterable[int] | None = None) -> set[str]:
    """Data-file paths under ``prefixes`` referenced by any snapshot of the table.

    With ``epochs`` (those the prefixes hold files of), when each of them has its tiering snapshot in the
    table, only the manifests those snapshots added are read: a round's files are added by its own commit,
    and that snapshot's manifest lists them for as long as any snapshot can (one or two manifests, instead of
    every manifest of every snapshot: that made each round's clean-up O(rounds so far)). Otherwise (an
    epoch that never committed, or whose snapshot was expired) every snapshot is read.
    """
    prefixes = tuple(prefixes)
    snapshots = table.snapshots()
    wanted = None if epochs is None else set(epochs)
    own = [s for s in snapshots if wanted is not None and tiering_epoch(s) in wanted]
    only_added = wanted is not None and {tiering_epoch(s) for s in own} == wanted
    seen_manifests: set[str] = set()
    referenced: set[str] = set()
    for snapshot in own if only_added else snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests or (
                only_added and manifest.added_snapshot_id != snapshot.snapshot_id
            ):
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                path = strip_scheme(entry.data_file.file_path)
                if path.startswith(prefixes):
                    referenced.add(path)
    return referenced


def clean_epochs(table: Table, committed_epoch: int, since_epoch: int = 0) -> int:
    """Delete staged files of epochs in ``(since_epoch, committed_epoch)`` that no snapshot references; returns
    how many."""
    filesystem, root = LakeStorage.of(table.io.properties).filesystem_and_path(staging_root(table.location()))
    entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    doomed_dirs = []
    doomed_epochs = set()
    for info in entries:
        match = _EPOCH_DIR.match(info.base_name)
        if info.type == pafs.FileType.Directory and match and since_epoch < int(match.group(1)) < committed_epoch:
            doomed_dirs.append(info.path)
            doomed_epochs.add(int(match.group(1)))
    if not doomed_dirs:
        return 0
    referenced = referenced_paths(table, doomed_dirs, epochs=doomed_epochs)
    removed = 0
    for directory in doomed_dirs:
        files = filesystem.get_file_info(pafs.FileSelector(directory, recursive=True))
        keep = False
        for info in files:
            if info.type != pafs.FileType.File:
                continue
            if info.path in referenced:
                keep = True
                continue
            filesystem.delete_file(info.path)
            removed += 1
        if not keep:
            filesystem.delete_dir(directory)
    return removed


def clean_attempt(directory_uri: str, keep: Iterable[str], storage: LakeStorage) -> int:
    """Delete the files under an attempt's directory other than ``keep`` (Spark task retries and speculation, or
    all of a fenced attempt's); returns how many."""
    filesystem, directory = storage.filesystem_and_path(directory_uri)
    kept = {strip_scheme(p) for p in keep}
    removed = 0
    for info in filesystem.get_file_info(pafs.FileSelector(directory, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File and info.path not in kept:
            filesystem.delete_file(info.path)
            removed += 1
    if not kept:
        try:
            filesystem.delete_dir(directory)
        except FileNotFoundError:
            pass
    return removed
