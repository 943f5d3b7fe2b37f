from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_provider_tiering.core.maintenance import (
    CompactionOutcome,
    CompactionResult,
    MaintenanceOutcome,
    MaintenanceStatus,
    MaintenanceStep,
)
from airflow_provider_tiering.core.spec import MaintenanceSpec

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_status_document_round_trips():
    status = MaintenanceStatus(
        "orders",
        last_run_at=NOW,
        last_outcome=MaintenanceOutcome.MAINTAINED,
        last_compaction_at=NOW,
        last_compaction=CompactionOutcome(CompactionResult.COMPACTED, 200, 200, 1, 200, 1, 42, 1, 3.5),
        last_check=CompactionOutcome(CompactionResult.BELOW_THRESHOLD, 3, 4, 4),
        snapshots_expired=7,
        snapshots_expired_total=9,
        last_error="expiry: LakeError: x",
        last_error_time=NOW - timedelta(hours=1),
        last_error_step=MaintenanceStep.EXPIRY,
    )
    assert MaintenanceStatus.from_json(status.to_json()) == status
    assert MaintenanceStatus.from_json({"table": "t", "added_later": 1}) == MaintenanceStatus("t")


def test_due_after_the_interval_and_at_once_after_a_failure():
    spec = MaintenanceSpec(interval_seconds=600)
    assert MaintenanceStatus("t").is_due(spec, NOW)
    done = MaintenanceStatus("t", last_run_at=NOW, last_outcome=MaintenanceOutcome.MAINTAINED)
    assert not done.is_due(spec, NOW + timedelta(seconds=599))
    assert done.is_due(spec, NOW + timedelta(seconds=600))
    failed = MaintenanceStatus("t", last_run_at=NOW, last_outcome=MaintenanceOutcome.FAILED)
    assert failed.is_due(spec, NOW + timedelta(seconds=1))
