"""The embedded demo: three SQLite hot tables tiered into an Iceberg SQL catalog on SQLite.

Connections come from the environment that ``demo/run_demo.py`` (``make demo``) sets:
``tiering_demo_hot`` (sqlite) and ``iceberg_default`` (pyiceberg SQL catalog + local warehouse).
Spark runs in local mode (no ``spark_default`` connection): ``orders``' first round is cut into 4 splits and
runs as a Spark job; rounds that fit one split are written by the task process itself, without a JVM.
"""

from __future__ import annotations

from airflow_provider_tiering.dag_factory import build_tiering_dag

HOT = "tiering_demo_hot"

TABLES = [
    {
        "name": "orders",
        "source": {"conn_id": HOT, "table": "orders", "cursor_column": "order_id"},
        "lake": {"namespace": "demo", "table": "orders", "partition_by": ["region"]},
        "target_rows_per_split": 5_000,
        "freshness_seconds": 10,
    },
    {
        "name": "customers",
        "source": {"conn_id": HOT, "table": "customers", "cursor_column": "customer_id"},
        "lake": {"namespace": "demo", "table": "customers"},
        "freshness_seconds": 10,
    },
    {
        "name": "page_views",
        "source": {"conn_id": HOT, "table": "page_views", "cursor_column": "viewed_at"},
        "lake": {"namespace": "demo", "table": "page_views"},
        "freshness_seconds": 10,
    },
]

dag = build_tiering_dag("tiering_demo", TABLES, doc_md=__doc__)
