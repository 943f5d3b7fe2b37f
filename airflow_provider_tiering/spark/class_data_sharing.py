"""Record this machine's class data sharing archive for local Spark driver JVMs, once:
``python -m airflow_provider_tiering.spark.class_data_sharing`` (``make spark-cds``, before the tests and the demo).

It starts a local session with a small job like a round's, whose driver JVM records the archive as any first local
session would, and says where the archive is (or why there is none). What the archive is, where it lives and how a
session maps, records and publishes it is ``spark/cds_archive.py``; this module only drives one session to record
it (from above ``spark/session.py``, which never imports it).
"""

from __future__ import annotations

import logging

from airflow_provider_tiering.spark.cds_archive import DIR_ENV, archive_path
from airflow_provider_tiering.spark.session import (
    SparkSettings,
    create_spark_session,
    session_conf,
    stop_spark_session,
)


def _record() -> int:
    """Record this machine's archive unless it exists, with a small job like a round's (``make test`` runs it)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    settings = SparkSettings(master="local[2]")
    path = archive_path(session_conf(settings))
    if path is not None and not path.exists():
        spark = create_spark_session(settings)
        spark.range(0, 2, 1, numPartitions=2).mapInArrow(lambda batches: batches, "id BIGINT").collect()
        stop_spark_session(spark)
    if path is None or not path.exists():
        print(f"Spark class data sharing: no archive (turned off by {DIR_ENV}, no java found, or recording failed)")
    else:
        print(f"Spark class data sharing archive: {path} ({DIR_ENV}=off turns it off)")
    return 0


if __name__ == "__main__":
    raise SystemExit(_record())
