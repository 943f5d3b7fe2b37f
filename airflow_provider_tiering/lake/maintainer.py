"""``IcebergMaintainer``: the lake side of a maintenance run (``core/maintenance.py``) for one Iceberg table."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow_provider_tiering.core.maintenance import CompactionOutcome, LakeCounts
from airflow_provider_tiering.core.ports import SplitWriter
from airflow_provider_tiering.lake.compaction import compact
from airflow_provider_tiering.lake.iceberg import IcebergLake
from airflow_provider_tiering.lake.live_files import live_data_files
from airflow_provider_tiering.lake.orphan_files import remove_orphan_files
from airflow_provider_tiering.lake.snapshot_expiry import expire_snapshots


class IcebergMaintainer:
    """:class:`~airflow_provider_tiering.core.maintenance.Maintainer` of one Iceberg table: compaction (on the
    rounds' split writer, whose Spark session starts only when there is something to compact, and is stopped
    after it), snapshot expiry, orphan removal."""

    def __init__(self, lake: IcebergLake, writer: SplitWriter, table_name: str) -> None:
        self.lake = lake
        self.writer = writer
        self.table_name = table_name

    def compact(
        self,
        *,
        small_file_bytes: int,
        max_small_files: int,
        target_file_bytes: int,
        deleted_fraction: float = 0.2,
        max_delete_files: int = 10,
    ) -> CompactionOutcome:
        try:
            return compact(
                self.lake,
                self.writer,
                target_file_bytes=target_file_bytes,
                small_file_bytes=small_file_bytes,
                max_small_files=max_small_files,
                deleted_fraction=deleted_fraction,
                max_delete_files=max_delete_files,
                table_name=self.table_name,
            )
        finally:
            self.writer.stop()

    def expire_snapshots(self, *, older_than: datetime, keep_last: int) -> int:
        return expire_snapshots(self.lake, older_than=older_than, keep_last=keep_last).expired

    def remove_orphan_files(self, *, min_age: timedelta, now: datetime) -> int:
        return len(remove_orphan_files(self.lake, min_age=min_age, now=now))

    def counts(self) -> LakeCounts:
        table = self.lake.load_table()
        if table is None:
            return LakeCounts(0, 0)
        snapshot = table.current_snapshot()
        summary = {} if snapshot is None or snapshot.summary is None else snapshot.summary
        return LakeCounts(
            len(live_data_files(table)),
            len(table.snapshots()),
            int(summary.get("total-delete-files") or 0),
            int(summary.get("total-position-deletes") or 0),
        )
