"""The metrics of a table's task: what a round did, and gauges of the table's health from its state document.

Pure values; the Airflow layer (``airflow_provider_tiering/metrics.py``) sends them through Airflow's ``Stats`` to
whatever backend Airflow is configured with (StatsD, Datadog, OpenTelemetry).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_provider_tiering.core.in_place_changes import changed_in_place
from airflow_provider_tiering.core.state import TableState

if TYPE_CHECKING:
    from airflow_provider_tiering.core.round_result import RoundResult


class MetricKind(enum.StrEnum):
    COUNT = "count"  # added up across rounds
    GAUGE = "gauge"  # the latest value
    TIMING = "timing"  # milliseconds


@dataclass(frozen=True)
class Metric:
    kind: MetricKind
    name: str
    value: float


def round_metrics(result: RoundResult) -> list[Metric]:
    """What one round did: ``rounds.<outcome>`` (1), and for a tiered round its rows, bytes and duration, the lag
    of its newest row (time cursors) and the rows it left for later; for a merge, where its rewrite ran, the lake
    files it rewrote and the bytes its rewrite read and wrote."""
    found = [Metric(MetricKind.COUNT, f"rounds.{result.outcome.value}", 1)]
    metrics = result.metrics
    if metrics is None:
        return found
    found += [
        Metric(MetricKind.COUNT, "rows", metrics.rows),
        Metric(MetricKind.COUNT, "bytes", metrics.bytes),
        Metric(MetricKind.TIMING, "round_duration", metrics.duration_seconds * 1000),
        Metric(MetricKind.GAUGE, "backlog_rows", metrics.backlog_rows or 0),
    ]
    if metrics.lag_seconds is not None:
        found.append(Metric(MetricKind.GAUGE, "lag_seconds", metrics.lag_seconds))
    merge = metrics.merge
    if merge is not None:  # where the merge's rewrite ran is a count per place: merge.rewrites.<task_process|spark>
        found += [
            Metric(MetricKind.COUNT, f"merge.rewrites.{merge.ran_on}", 1),
            Metric(MetricKind.COUNT, "merge.files_rewritten", merge.files_rewritten),
            Metric(MetricKind.COUNT, "merge.bytes_read", merge.bytes_read),
            Metric(MetricKind.COUNT, "merge.bytes_written", merge.bytes_written),
        ]
    return found


def failed_round_metrics() -> list[Metric]:
    return [Metric(MetricKind.COUNT, "rounds.failed", 1)]


def table_gauges(state: TableState, now: datetime) -> list[Metric]:
    """The table's health as its state document tells it: consecutive failures, quarantined (1 or 0), how long
    the oldest open transaction has held the watermark back (0: none), and seconds since the last tiered round."""
    ages = [float(b.get("age_seconds") or 0.0) for b in state.watermark_blockers]
    found = [
        Metric(MetricKind.GAUGE, "consecutive_failures", state.consecutive_failures),
        Metric(MetricKind.GAUGE, "quarantined", 1 if state.quarantined_since is not None else 0),
        Metric(MetricKind.GAUGE, "held_back_seconds", max(ages, default=0.0)),
    ]
    if state.last_tiered_time is not None:
        found.append(Metric(MetricKind.GAUGE, "staleness_seconds", (now - state.last_tiered_time).total_seconds()))
    retained = None if state.change_stream is None else state.change_stream.get("retained_wal_bytes")
    if retained is not None:
        found.append(Metric(MetricKind.GAUGE, "retained_wal_bytes", float(retained)))
    if state.in_place_changes is not None:
        found.append(Metric(MetricKind.GAUGE, "rows_changed_in_place", float(changed_in_place(state))))
    if state.lake_delete_files is not None:
        found.append(Metric(MetricKind.GAUGE, "delete_files", float(state.lake_delete_files)))
        found.append(Metric(MetricKind.GAUGE, "deleted_rows", float(state.lake_deleted_rows or 0)))
    return found
