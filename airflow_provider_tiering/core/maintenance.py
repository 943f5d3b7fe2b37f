"""One lake maintenance run of a table (compaction, snapshot expiry, orphan removal) and its status document.

Airflow-free: the lake work is done by a :class:`Maintainer` (``lake/maintainer.py`` has the Iceberg one); the
status is kept apart from the table's tiering state (its own document), so maintenance never writes what a
round reads, and a maintenance failure is recorded without touching the table's tiering status.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from airflow_provider_tiering.core.documents import DocumentTime, from_document, to_document
from airflow_provider_tiering.core.error_text import describe_error
from airflow_provider_tiering.core.errors import MaintenanceFailed
from airflow_provider_tiering.core.spec import MaintenanceSpec


class MaintenanceStep(enum.StrEnum):
    """The steps of a maintenance run, in order; ``SETUP`` is an error before the first (a missing connection)."""

    SETUP = "setup"
    COMPACTION = "compaction"
    EXPIRY = "expiry"
    ORPHANS = "orphans"


class CompactionResult(enum.StrEnum):
    COMPACTED = "compacted"
    BELOW_THRESHOLD = "below_threshold"
    GAVE_UP = "gave_up"  # lost the commit race every try
    SKIPPED = "skipped"  # see the outcome's note


class MaintenanceOutcome(enum.StrEnum):
    MAINTAINED = "maintained"
    FAILED = "failed"


@dataclass
class CompactionOutcome:
    """What a compaction did (``outcome``), with the files it looked at, rewrote and wrote."""

    outcome: CompactionResult
    small_files: int
    files_before: int
    files_after: int
    rewritten_files: int = 0
    written_files: int = 0
    snapshot_id: int | None = None
    tries: int = 0
    seconds: float = 0.0
    note: str | None = None
    #: Files rewritten because position deletes hid enough of their rows, the rows those deletes hid (now gone from
    #: the files), and the delete files the compaction removed (they named no live file any more).
    files_with_deletes: int = 0
    deleted_rows_applied: int = 0
    delete_files_removed: int = 0


@dataclass(frozen=True)
class LakeCounts:
    """A lake table's files: of its current snapshot, data files, position-delete files and the rows they delete (as
    the snapshot's summary counts them); and its snapshots."""

    data_files: int
    snapshots: int
    delete_files: int = 0
    deleted_rows: int = 0


class Maintainer(Protocol):
    """The lake side of maintenance, for one table. Every method may raise
    :class:`~airflow_provider_tiering.core.errors.LakeError` (the catalog or the warehouse refused), or the error of
    the split writer's job."""

    def compact(
        self,
        *,
        small_file_bytes: int,
        max_small_files: int,
        target_file_bytes: int,
        deleted_fraction: float = 0.2,
        max_delete_files: int = 10,
    ) -> CompactionOutcome:
        """Rewrite the small files into files of the target size when there are more than ``max_small_files``, and
        the files whose position deletes hide at least ``deleted_fraction`` of their rows (or that
        ``max_delete_files`` delete files apply to) without those rows, removing the delete files that name no live
        file then; a commit that keeps losing to rounds gives up (``GAVE_UP``) and leaves nothing behind."""
        ...

    def expire_snapshots(self, *, older_than: datetime, keep_last: int) -> int:
        """Expire snapshots older than ``older_than``, never those the committed offsets are read from; how many."""
        ...

    def remove_orphan_files(self, *, min_age: timedelta, now: datetime) -> int:
        """Delete unreferenced files older than ``min_age``; how many."""
        ...

    def counts(self) -> LakeCounts:
        """What the current snapshot holds (data and delete files, rows its deletes hide) and how many snapshots."""
        ...


class MaintenanceStore(Protocol):
    """Loads and saves one table's maintenance document; a save replaces it whole."""

    def load(self) -> MaintenanceStatus | None: ...

    def save(self, status: MaintenanceStatus) -> None: ...


@dataclass
class MaintenanceStatus:
    """The maintenance document of one table: the last run, the last compaction, running totals, the last error."""

    table: str
    last_run_at: DocumentTime | None = None
    last_outcome: MaintenanceOutcome | None = None
    last_duration_seconds: float | None = None
    data_files: int | None = None
    snapshots: int | None = None
    delete_files: int | None = None
    deleted_rows: int | None = None
    last_compaction_at: DocumentTime | None = None
    last_compaction: CompactionOutcome | None = None
    last_check: CompactionOutcome | None = None
    snapshots_expired: int = 0
    snapshots_expired_total: int = 0
    orphans_removed: int = 0
    orphans_removed_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    last_error_time: DocumentTime | None = None
    last_error_step: MaintenanceStep | None = None

    def is_due(self, spec: MaintenanceSpec, now: datetime) -> bool:
        """A failed run is retried at the next task; a successful one waits ``interval_seconds``."""
        if self.last_run_at is None or self.last_outcome != MaintenanceOutcome.MAINTAINED:
            return True
        return now - self.last_run_at >= timedelta(seconds=spec.interval_seconds)

    def to_json(self) -> dict[str, Any]:
        return to_document(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MaintenanceStatus:
        return from_document(cls, doc)


def run_maintenance(
    table: str,
    spec: MaintenanceSpec,
    maintainer: Maintainer,
    store: MaintenanceStore,
    *,
    target_file_bytes: int,
    now: datetime,
    secrets: Iterable[str] = (),
) -> MaintenanceStatus:
    """Compact, then expire snapshots, then remove orphan files; record the outcome. A failing step stops the run,
    is recorded (``last_error`` names the step) and raises :class:`MaintenanceFailed`; what earlier steps did
    stays recorded."""
    status = store.load() or MaintenanceStatus(table)
    started = time.monotonic()
    status.snapshots_expired = status.orphans_removed = 0
    step = MaintenanceStep.COMPACTION
    try:
        check = maintainer.compact(
            small_file_bytes=int(spec.small_file_mb * 1024 * 1024),
            max_small_files=spec.max_small_files,
            target_file_bytes=target_file_bytes,
            deleted_fraction=spec.deleted_fraction,
            max_delete_files=spec.max_delete_files,
        )
        status.last_check = check
        if check.outcome == CompactionResult.COMPACTED:
            status.last_compaction, status.last_compaction_at = check, now
        step = MaintenanceStep.EXPIRY
        status.snapshots_expired = maintainer.expire_snapshots(
            older_than=now - timedelta(seconds=spec.snapshot_retention_seconds), keep_last=spec.min_snapshots_to_keep
        )
        status.snapshots_expired_total += status.snapshots_expired
        step = MaintenanceStep.ORPHANS
        status.orphans_removed = maintainer.remove_orphan_files(
            min_age=timedelta(seconds=spec.orphan_min_age_seconds), now=now
        )
        status.orphans_removed_total += status.orphans_removed
        counts = maintainer.counts()
        status.data_files, status.snapshots = counts.data_files, counts.snapshots
        status.delete_files, status.deleted_rows = counts.delete_files, counts.deleted_rows
    except Exception as exc:
        raise _record_failure(status, store, step, exc, now, secrets, time.monotonic() - started) from exc
    status.last_run_at, status.last_outcome = now, MaintenanceOutcome.MAINTAINED
    status.last_duration_seconds = round(time.monotonic() - started, 3)
    status.consecutive_failures = 0
    store.save(status)
    return status


def record_failure_before_maintenance(
    table: str, store: MaintenanceStore, exc: BaseException, *, now: datetime, secrets: Iterable[str] = ()
) -> MaintenanceFailed:
    """Record an error that stopped maintenance before its first step as a failed run (step ``setup``);
    returns the :class:`MaintenanceFailed` to raise."""
    return _record_failure(
        store.load() or MaintenanceStatus(table), store, MaintenanceStep.SETUP, exc, now, secrets, 0.0
    )


def _record_failure(
    status: MaintenanceStatus,
    store: MaintenanceStore,
    step: MaintenanceStep,
    exc: BaseException,
    now: datetime,
    secrets: Iterable[str],
    duration: float,
) -> MaintenanceFailed:
    status.last_run_at, status.last_outcome = now, MaintenanceOutcome.FAILED
    status.last_duration_seconds = round(duration, 3)
    status.consecutive_failures += 1
    status.last_error = f"{step.value}: {describe_error(exc, secrets)}"
    status.last_error_time, status.last_error_step = now, step
    store.save(status)
    return MaintenanceFailed(f"{status.table}: maintenance failed at {status.last_error}")
