"""Send a table's metrics (``core/table_metrics.py``) through Airflow's ``Stats``, to the backend Airflow's
``[metrics]`` section configures (StatsD, Datadog, OpenTelemetry); nothing is sent when metrics are off.

Names follow Airflow's own per-task metrics (``ti.finish.<dag_id>.<task_id>.<state>``):
``tiering.<metric>.<dag_id>.<table>``, with ``.`` inside an id written ``__`` so the name keeps its hierarchy, under
Airflow's ``statsd_prefix``. Tags (for backends that take them) add ``namespace`` and ``lake_table``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.table_metrics import Metric, MetricKind

log = logging.getLogger(__name__)


def metric_name(metric: str, dag_id: str, table: str) -> str:
    """The full name of one of a table's metrics (before Airflow's prefix)."""
    return f"tiering.{metric}.{dag_id.replace('.', '__')}.{table.replace('.', '__')}"


def send(spec: TableSpec, dag_id: str, metrics: Iterable[Metric]) -> None:
    """Send ``metrics`` of ``spec``'s table; a backend that fails is logged, never fails the task."""
    from airflow.sdk.observability.stats import Stats

    tags = {"namespace": spec.lake.namespace, "lake_table": spec.lake.table}
    try:
        for metric in metrics:
            name = metric_name(metric.name, dag_id, spec.name)
            if metric.kind is MetricKind.COUNT:
                Stats.incr(name, count=int(metric.value), tags=tags)
            elif metric.kind is MetricKind.GAUGE:
                Stats.gauge(name, metric.value, tags=tags)
            else:
                Stats.timing(name, metric.value, tags=tags)
    except Exception as exc:  # metrics are reporting: they never fail a round
        log.warning("%s: sending metrics failed: %s", spec.name, exc)
