"""The table behind a change stream is a PostgreSQL table without a cursor, built from the change stream's own spec
(no made-up cursor column): asked for the rows below an offset, it refuses before any query. And what the change
stream's slot status tells before a round planned."""

from __future__ import annotations

import pytest

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.source_specs import PostgresCdcSourceSpec
from airflow_provider_tiering.sources.postgres.change_stream_source import PostgresCdcSource
from airflow_provider_tiering.sources.postgres.replication import SlotStatus
from airflow_provider_tiering.sources.sql import SqlSource

CONNECTION = ConnectionInfo("postgres", host="127.0.0.1", port=1, login="u", password="p", schema="db")


def test_the_streamed_table_is_read_by_the_change_streams_spec_without_a_cursor() -> None:
    spec = PostgresCdcSourceSpec(kind="postgres_cdc", conn_id="hot", table="orders", columns=("id", "amount"))
    table = PostgresCdcSource(spec, CONNECTION).table
    assert table.spec is spec and not isinstance(table, SqlSource)
    assert not hasattr(table, "cursor_ref") and not hasattr(table.spec, "cursor_column")
    # Offsets of a change stream are an LSN, which bounds no column: only "every row" can be asked for.
    with pytest.raises(SourceError, match="told apart by a cursor only"):
        table.added_column_values("amount", {"lsn": "0/16B3748"}, rewritten=False)
    with pytest.raises(SourceError, match="told apart by a cursor only"):
        table.rows_rewritten("1000", {"lsn": "0/16B3748"})


def test_a_rounds_slot_status_leaves_the_backlog_out_until_the_round_planned(monkeypatch) -> None:
    """The backlog is what a capped plan left; a round that has not planned (it failed first) cannot tell it, and
    leaves it out, so the state keeps the last plan's (``record_stream``) instead of showing it gone."""
    spec = PostgresCdcSourceSpec(kind="postgres_cdc", conn_id="hot", table="orders")
    kept = PostgresCdcSource(spec, CONNECTION)
    kept._backlog_bytes = 4096  # an earlier round's plan, on an object kept across rounds
    source = kept.for_round()
    status = SlotStatus("tiering_public_orders", exists=True, confirmed_flush_lsn="0/16B3748", retained_wal_bytes=8192)
    monkeypatch.setattr(source.replication, "status", lambda: status)
    found = source.stream_status()
    assert found["retained_wal_bytes"] == 8192 and "backlog_wal_bytes" not in found
