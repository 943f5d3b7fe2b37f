"""A stream group's change log rows (``change_log_rows.py``): a change's values survive the round trip through the
log exactly; the reader keeps whole transactions of the window only, each table's changes from its join on; a table's
rows turn back into the messages the kernel applies, transactions a first load saw passed over (their position still
moved past), a change the stream could not read failing the table there. And the snapshot visibility a PostgreSQL
table's first load records (``group_member.py: saw``)."""

from __future__ import annotations

import math
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, HotTableReplaced
from airflow_provider_tiering.sources.change_stream.change_log_rows import (
    SEEN_BY_LOAD,
    LogRowsReader,
    LogWindow,
    decode_values,
    encode_values,
    messages_of,
)
from airflow_provider_tiering.sources.change_stream.messages import (
    UNCHANGED,
    Begin,
    Change,
    Commit,
    Origin,
    Relation,
    Truncate,
    Unreadable,
)
from airflow_provider_tiering.sources.postgres.group_member import parse_snapshot, saw

ORDERS = Relation(1, ("id", "name", "doc"), (20, 25, 25), "public", "orders")
ITEMS = Relation(2, ("id", "qty"), (20, 23), "public", "items")
OTHER = Relation(3, ("id",), (20,), "public", "other")


def test_values_survive_the_log_exactly() -> None:
    values = (1, "é 'q' \"d\"", None, UNCHANGED, b"\x00\xff", Decimal("1.50"), 0.1, math.inf, -math.inf, 2**63 - 1)
    columns = tuple(f"c{n}" for n in range(len(values)))
    text = encode_values(columns, values)
    assert list(decode_values(text)) == list(values)
    nan = decode_values(encode_values(("x",), (math.nan,)))[0]
    assert isinstance(nan, float) and math.isnan(nan)
    assert "NaN" not in encode_values(("x",), (math.nan,)), "the log's JSON is JSON every reader parses"


def window(start: int = 0, end: int | None = None, max_changes: int | None = None, **joined: int) -> LogWindow:
    return LogWindow(
        start, end, {f"public.{t}": p for t, p in (joined or {"orders": 0, "items": 0}).items()},
        lambda r: f"{r.namespace}.{r.name}" if r.name in ("orders", "items") else None,
        lambda table, r: ("id",), str, max_changes,
    )  # fmt: skip


def transactions() -> list[object]:
    return [
        ORDERS, ITEMS, OTHER,
        Begin(10, 100, 1_000), Change("I", 1, new=(1, "a", "x")), Change("I", 3, new=(9,)), Commit(10, 20),
        Begin(20, 101), Change("U", 1, new=(2, "b", UNCHANGED), old=(1, None, None)), Change("I", 2, new=(5, 3)),
        Commit(20, 30),
        Begin(30, 102), Change("D", 2, old=(5, None)), Truncate((1,)), Commit(30, 40),
        Begin(40, 103), Change("I", 2, new=(6, 1)), Commit(40, 50),
    ]  # fmt: skip


def test_the_reader_keeps_whole_transactions_of_its_window_and_each_table_from_its_join() -> None:
    rows = LogRowsReader(window(start=20, end=45, orders=0, items=35)).read(transactions())
    table = rows.table()
    assert table.column("position").to_pylist() == [30, 40]  # the first one ends at the start; the last past the end
    assert table.column("source_table").to_pylist() == ["public.orders", "public.orders"]  # items joined at 35
    assert table.column("op").to_pylist() == ["update", "truncate"]
    assert table.column("key").to_pylist() == ['{"id":2}', None]
    assert rows.last_end == 40 and rows.changes == {"public.orders": 2} and rows.cut
    capped = LogRowsReader(window(max_changes=2)).read(transactions())
    assert capped.last_end == 30 and capped.count == 3, "the transaction holding the cap's change is taken whole"


def test_a_tables_rows_turn_back_into_its_messages() -> None:
    rows = LogRowsReader(window()).read(transactions()).table()
    orders = rows.filter(pa.compute.equal(rows.column("source_table"), "public.orders"))
    found = list(messages_of(orders.to_batches(), "orders"))
    relation = Relation(1, ORDERS.columns, ORDERS.type_ids)
    assert found == [
        Begin(10, 100), relation, Change("I", 1, new=(1, "a", "x")), Commit(10, 20),
        Begin(20, 101), Change("U", 1, new=(2, "b", UNCHANGED), old=(1, None, None)), Commit(20, 30),
        Begin(30, 102), Truncate((1,)), Commit(30, 40),
    ]  # fmt: skip
    skipped = list(messages_of(orders.to_batches(), "orders", skip=lambda xid, commit_at: xid == 101))
    assert skipped[4:7] == [Begin(20, 101), Origin(SEEN_BY_LOAD), Commit(20, 30)]


@pytest.mark.parametrize(("replaced", "error"), [(True, HotTableReplaced), (False, ChangeStreamUnavailable)])
def test_a_change_the_stream_could_not_read_fails_the_table_where_it_lies(replaced: bool, error: type) -> None:
    messages = [ORDERS, Begin(10), Unreadable("public", "orders", replaced, "dropped at binlog.000001:4"),
                Change("I", 1, new=(1, "a", "x")), Commit(10, 20)]  # fmt: skip
    rows = LogRowsReader(window()).read(messages).table()
    assert rows.column("op").to_pylist()[0] == ("replaced" if replaced else "unreadable")
    with pytest.raises(error, match="dropped at binlog"):
        list(messages_of(rows.to_batches(), "orders"))


def test_a_snapshot_saw_what_committed_before_it_and_nothing_in_progress() -> None:
    xmin, xmax, xip = parse_snapshot("4294967290:4294967300:4294967295,4294967298")
    snapshot = {"xmin": xmin, "xmax": xmax, "xip": xip, "until": "0/0"}
    assert saw(snapshot, 4294967280)  # before xmin
    assert saw(snapshot, 4294967292) and not saw(snapshot, 4294967295)  # between: unless in progress
    assert saw(snapshot, 1)  # 2**32 + 1 after the wraparound: the 32 bits pgoutput sends, in xmax's epoch
    assert not saw(snapshot, 4) and not saw(snapshot, 4294967298)  # at or past xmax, or in progress
