"""The one commit loop of every lake write (a round's append and merge, a compaction or backfill rewrite): load the
table, check the fence, commit in a fenced transaction, and when the catalog's swap is lost to another commit, back
off and start over from a fresh table, a bounded number of times."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from airflow_provider_tiering.core.errors import CommitConflict, LakeError

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction

log = logging.getLogger(__name__)

R = TypeVar("R")


def fenced_commit(
    load_table: Callable[[], Table | None],
    commit_once: Callable[[Table, int], R],
    *,
    name: str,
    what: str,
    max_tries: int,
    back_off: bool = True,
) -> tuple[R, int]:
    """Run ``commit_once(table, try_number)`` on a freshly loaded table until it commits; returns its result and
    the number of tries. ``commit_once`` checks its fence (raising :class:`FencedError`, which ends the loop) and
    commits in a :func:`~airflow_provider_tiering.lake.fenced_transaction.fenced_transaction`; a
    :class:`CommitConflict` or pyiceberg's ``CommitFailedException`` from it means the swap was lost to an unrelated
    commit: the loop waits (``back_off``: 0.1 s doubling up to 2 s) and tries again.

    Raises:
        CommitConflict: every one of ``max_tries`` tries lost; nothing was committed.
        LakeError: the table ``name`` disappeared.
    """
    from pyiceberg.exceptions import CommitFailedException

    for try_number in range(max_tries):
        table = load_table()
        if table is None:
            raise LakeError(f"Iceberg table {name} disappeared before the {what}")
        try:
            return commit_once(table, try_number), try_number + 1
        except (CommitConflict, CommitFailedException) as exc:
            log.warning(
                "%s lost the catalog swap (try %d of %d): %s; trying again", what, try_number + 1, max_tries, exc
            )
            if back_off:
                time.sleep(min(2.0, 0.1 * 2**try_number))
    raise CommitConflict(f"the {what} lost {max_tries} times to other commits; nothing was committed")


def committed_snapshot_id(table: Table | None, *, name: str, what: str) -> int:
    """The snapshot a commit just made: ``table``'s current one (None: the table is gone)."""
    snapshot = None if table is None else table.current_snapshot()
    if snapshot is None:
        raise LakeError(f"Iceberg table {name} disappeared after the {what}'s commit")
    return int(snapshot.snapshot_id)


def replace_data_files(
    tx: Transaction, table: Table, removed: Sequence[DataFile], added: Sequence[DataFile], properties: dict[str, str]
) -> None:
    """In ``tx``, one overwrite snapshot with ``properties`` in its summary: ``removed`` out, ``added`` in."""
    from pyiceberg.table.snapshots import Operation

    # pyiceberg's public overwrite deletes by row filter, not by file, and pyiceberg 0.12 cannot summarise a
    # "replace" snapshot: its file-level overwrite producer.
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    overwrite = _OverwriteFiles(
        operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties
    )
    with overwrite as producer:
        for entry in removed:
            producer.delete_data_file(entry)
        for entry in added:
            producer.append_data_file(entry)
