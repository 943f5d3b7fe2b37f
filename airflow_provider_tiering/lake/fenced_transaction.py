"""A pyiceberg transaction whose commit retries are fenced (private API of pyiceberg 0.12, on purpose).

When a commit loses the catalog's swap, pyiceberg (0.12) refreshes the table and re-applies the snapshot onto
whatever was committed meanwhile, so a stale attempt would land on top of a newer attempt's commit (its rows tiered
twice, its files perhaps already cleaned). pyiceberg has no public hook between that refresh and the retry; this
subclass overrides ``Transaction._rebuild_snapshot_updates``, which runs exactly there, to check the fence first.
The chaos suite's lake-commit-race fault exercises it on every run.

It also keeps ``table_metadata`` between changes: pyiceberg (0.12) re-applies every staged update and deep-copies the
whole metadata on each access, and a commit reads it dozens of times (about 30 for a merge, a sixth of a small
round's time); the metadata is frozen (pydantic), so one copy serves until the table or the updates change.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.errors import LakeError

if TYPE_CHECKING:
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

#: Raises to stop a retry; given the table as just refreshed from the catalog.
Fence = Callable[["Table"], None]


@cache
def _fenced_transaction_class() -> type[Any]:
    from pyiceberg.table import Transaction

    if not hasattr(Transaction, "_rebuild_snapshot_updates"):  # the hook below would silently never run
        raise LakeError("this pyiceberg version retries commits in a way the tiering fence cannot check")

    class FencedTransaction(Transaction):
        def __init__(self, table: Table, fence: Fence) -> None:
            super().__init__(table)
            self._fence = fence
            #: The metadata as last computed, with the table's metadata and the updates it was computed from.
            self._metadata_of: tuple[TableMetadata, tuple[Any, ...], TableMetadata] | None = None

        @property
        def table_metadata(self) -> TableMetadata:
            # The updates only grow by a new tuple (``_stage``) or are replaced (``_rebuild_snapshot_updates``), and a
            # refresh replaces the table's metadata: identity tells whether either changed.
            base, updates, cached = self._metadata_of or (None, None, None)
            if cached is None or base is not self._table.metadata or updates is not self._updates:
                cached = super().table_metadata
                self._metadata_of = (self._table.metadata, self._updates, cached)
            return cached

        def _rebuild_snapshot_updates(self) -> None:
            self._fence(self._table)  # self._table was just refreshed from the catalog
            super()._rebuild_snapshot_updates()

    return FencedTransaction


def fenced_transaction(table: Table, fence: Fence) -> Transaction:
    """A transaction on ``table`` whose commit retries run ``fence(refreshed_table)`` first; the retry's own
    compare-and-swap then guarantees nothing landed in between."""
    transaction: Transaction = _fenced_transaction_class()(table, fence)
    return transaction
