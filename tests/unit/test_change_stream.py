"""pgoutput messages decoded, and a change stream applied in commit order: what each kind of change leaves for the
lake (the messages are built here byte for byte as PostgreSQL's protocol documentation lays them out)."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, TableTruncated
from airflow_provider_tiering.sources.change_stream.reduce import ChangeWindow, RowVersion, apply_changes
from airflow_provider_tiering.sources.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    Change,
    Commit,
    Origin,
    PgRelation,
    Truncate,
    decode,
    format_lsn,
    parse_lsn,
)

OID = 16401
COLUMNS = ("id", "name", "doc")


def _tuple(values) -> bytes:
    out = struct.pack("!h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNCHANGED_TOAST:
            out += b"u"
        else:
            data = value.encode()
            out += b"t" + struct.pack("!i", len(data)) + data
    return out


def begin(final_lsn: int, xid: int = 7, committed_us: int = 0) -> bytes:
    """A Begin message; ``committed_us``: its commit time, in microseconds since 2000-01-01 (PostgreSQL's epoch)."""
    return b"B" + struct.pack("!QQi", final_lsn, committed_us, xid)


def commit(end_lsn: int) -> bytes:
    return b"C" + struct.pack("!bQQQ", 0, end_lsn - 8, end_lsn, 0)


def relation(identity: bytes = b"d") -> bytes:
    out = b"R" + struct.pack("!i", OID) + b"public\x00t\x00" + identity + struct.pack("!h", len(COLUMNS))
    for number, name in enumerate(COLUMNS):
        out += struct.pack("!b", 1 if number == 0 else 0) + name.encode() + b"\x00" + struct.pack("!ii", 25, -1)
    return out


def insert(*values) -> bytes:
    return b"I" + struct.pack("!i", OID) + b"N" + _tuple(values)


def update(*values, old=None, whole_old_row: bool = False) -> bytes:
    out = b"U" + struct.pack("!i", OID)
    if old is not None:
        out += (b"O" if whole_old_row else b"K") + _tuple(old)
    return out + b"N" + _tuple(values)


def delete(key: str) -> bytes:
    return b"D" + struct.pack("!i", OID) + b"K" + _tuple((key, None, None))


def origin(name: str) -> bytes:
    return b"O" + struct.pack("!Q", 0) + name.encode() + b"\x00"


def truncate() -> bytes:
    return b"T" + struct.pack("!ibi", 1, 0, OID)


def transaction(end_lsn: int, *changes: bytes, tag: str | None = None) -> list[bytes]:
    return [begin(end_lsn - 8), *([origin(tag)] if tag else []), *changes, commit(end_lsn)]


def stream(*transactions: list[bytes]) -> list:
    return [decode(m) for m in [relation(), *(m for t in transactions for m in t)]]


def apply(messages, start=0, end=None, keys_in_memory=None, spill=None, **window):
    window_ = ChangeWindow(("id",), start, end, **window)
    return apply_changes(messages, window_, keys_in_memory=keys_in_memory, spill=spill)


def test_messages_decode_as_the_protocol_lays_them_out():
    # 2026-01-01 UTC, 12 seconds past, as PostgreSQL counts (from 2000-01-01) and as Unix counts.
    assert decode(begin(0x1_0000_0010, 42, 820_540_812_000_000)) == Begin(0x1_0000_0010, 42, 1_767_225_612_000_000)
    assert decode(commit(0x200)) == Commit(0x1F8, 0x200)
    assert decode(relation(b"f")) == PgRelation(OID, COLUMNS, (25,) * len(COLUMNS), "public", "t", "f", ("id",))
    assert decode(insert("1", None, "é")) == Change("I", OID, new=("1", None, "é"))
    changed = decode(update("2", "b", UNCHANGED_TOAST, old=("1", None, None)))
    assert changed == Change("U", OID, new=("2", "b", UNCHANGED_TOAST), old=("1", None, None))
    assert not changed.old_is_row
    assert decode(update("1", "b", "x", old=("1", "a", "x"), whole_old_row=True)).old_is_row
    assert decode(delete("3")) == Change("D", OID, old=("3", None, None))
    assert decode(origin("eviction")) == Origin("eviction")
    assert decode(truncate()) == Truncate((OID,))
    with pytest.raises(ValueError, match="unknown pgoutput message"):
        decode(b"Z")
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"


def test_only_transactions_after_the_lake_and_up_to_the_end_are_applied():
    messages = stream(
        transaction(100, insert("1", "a", "x")),  # the lake has it already
        transaction(200, insert("2", "b", "y")),
        transaction(300, insert("3", "c", "z")),  # past the round's end
    )
    found = apply(messages, start=100, end=200)
    assert set(found.rows) == {("2",)} and found.last_end == 200 and found.inserted == 1


def test_key_updates_deletes_and_reinserts_leave_the_latest_state_per_key():
    found = apply(
        stream(
            transaction(
                100,
                insert("1", "a", "x"),
                update("1", "b", "x"),
                update("1", "c", "x"),  # several updates of one key: the last wins
                update("20", "k", "x", old=("2", None, None)),  # the key changes: 2 leaves, 20 arrives
                delete("3"),
                delete("4"),
                insert("4", "again", "y"),  # deleted, then inserted again
                insert("5", "brief", "y"),
                delete("5"),  # inserted, then deleted
            )
        )
    )
    assert found.rows[("1",)] == RowVersion({"id": "1", "name": "c", "doc": "x"})
    assert found.rows[("2",)] is None and found.rows[("20",)].values["name"] == "k"
    assert found.rows[("3",)] is None and found.rows[("5",)] is None
    assert found.rows[("4",)].values["name"] == "again"
    assert (found.inserted, found.updated, found.deleted) == (3, 3, 3)


def test_the_evictions_own_transactions_are_skipped_whole():
    found = apply(
        stream(transaction(100, delete("1"), tag="tiering_eviction"), transaction(200, delete("2"))),
        skip_origins=frozenset({"tiering_eviction"}),
    )
    assert set(found.rows) == {("2",)} and found.transactions == 1
    assert found.skipped == 1 and found.last_end == 200


def test_values_an_update_left_unchanged_come_from_the_round_or_are_left_to_the_lake():
    found = apply(
        stream(
            transaction(
                100,
                insert("1", "a", "big"),
                update("1", "b", UNCHANGED_TOAST),  # the round carried it: filled here
                update("2", "b", UNCHANGED_TOAST),  # the lake holds it
                update("2", "c", UNCHANGED_TOAST),  # still the lake's
                update("30", "d", UNCHANGED_TOAST, old=("3", None, None)),  # the lake's row of key 3 holds it
                update("4", "e", UNCHANGED_TOAST, old=("4", "x", "old doc"), whole_old_row=True),  # REPLICA FULL
            )
        )
    )
    assert found.rows[("1",)] == RowVersion({"id": "1", "name": "b", "doc": "big"})
    two = found.rows[("2",)]
    assert two.values["name"] == "c" and two.unchanged == ("doc",) and two.fill_from == ("2",)
    thirty = found.rows[("30",)]
    assert thirty.unchanged == ("doc",) and thirty.fill_from == ("3",)
    assert found.rows[("4",)] == RowVersion({"id": "4", "name": "e", "doc": "old doc"})


def test_a_truncate_or_a_change_without_its_key_is_refused():
    with pytest.raises(TableTruncated, match="was truncated"):
        apply(stream(transaction(100, insert("1", "a", "x")), transaction(200, truncate())))
    with pytest.raises(ChangeStreamUnavailable, match="does not carry key column 'id'"):
        apply(stream(transaction(100, delete_without_key())))


def delete_without_key() -> bytes:
    return b"D" + struct.pack("!i", OID) + b"K" + _tuple((None, None, None))


def chunks_of(messages, start=0, end=None, keys_per_chunk=None, **options):
    from airflow_provider_tiering.sources.change_stream.reduce import changes_in_chunks

    found = []
    reducing = changes_in_chunks(messages, ChangeWindow(("id",), start, end, **options), keys_per_chunk=keys_per_chunk)
    while True:
        try:
            found.append(next(reducing))
        except StopIteration as done:
            return found, done.value


def test_a_transaction_larger_than_a_chunk_is_applied_in_chunks_of_keys_a_later_one_superseding():
    big = transaction(
        0x300,
        *(insert(str(i), f"n{i}", "d") for i in range(5)),
        update("1", "n1b", UNCHANGED_TOAST),  # its insert is in the first chunk: the update names it to fill from
        delete("0"),
    )
    chunks, counts = chunks_of(stream(transaction(0x100, insert("9", "x", "y")), big), keys_per_chunk=3)
    assert [list(c) for c in chunks] == [[("9",), ("0",), ("1",)], [("2",), ("3",), ("4",)], [("1",), ("0",)]]
    assert chunks[2][("0",)] is None  # deleted after its insert, in a later chunk
    assert chunks[2][("1",)] == RowVersion({"id": "1", "name": "n1b", "doc": UNCHANGED_TOAST}, ("doc",), ("1",))
    assert (counts.inserted, counts.updated, counts.deleted, counts.transactions) == (6, 1, 1, 2)
    assert counts.last_end == 0x300 and counts.rows == {}
    one, _ = chunks_of(stream(transaction(0x100, insert("9", "x", "y")), big))
    assert len(one) == 1 and one[0][("1",)].values["doc"] == "d"  # one chunk: filled from its own insert


def test_a_plan_over_more_keys_than_it_holds_counts_them_and_keeps_no_rows():
    messages = stream(transaction(0x100, *(insert(str(i), "n", "d") for i in range(10))))
    found = apply(messages, keys_in_memory=4)
    assert not found.rows_complete and found.rows == {} and found.inserted == 10
    assert apply(messages, keys_in_memory=40).rows_complete


def test_a_plan_over_more_keys_than_it_holds_spills_them_in_the_chunks_a_second_read_would_give():
    class Kept:
        def __init__(self):
            self.chunks, self.closed = [], False

        def write(self, rows):
            self.chunks.append(dict(rows))

        def close(self):
            self.closed = True

    big = transaction(
        0x300,
        *(insert(str(i), f"n{i}", "d") for i in range(5)),
        update("1", "n1b", UNCHANGED_TOAST),
        delete("0"),
    )
    messages = stream(transaction(0x100, insert("9", "x", "y")), big)
    spill = Kept()
    found = apply(messages, keys_in_memory=3, spill=spill)
    expected, counts = chunks_of(messages, keys_per_chunk=3)
    assert found.rows_complete and found.rows == {} and found.spilled is spill and spill.chunks == expected
    assert (found.inserted, found.updated, found.deleted) == (counts.inserted, counts.updated, counts.deleted)
    held = apply(messages, keys_in_memory=40, spill=Kept())
    assert held.spilled is None and len(held.rows) == 6


def test_spilled_batches_come_back_in_order_and_leave_no_file():
    import pyarrow as pa

    from airflow_provider_tiering.sources.spilled_batches import SpilledBatches

    spilled = SpilledBatches()
    batches = [pa.RecordBatch.from_pydict({"id": [i, i + 1], "name": [f"n{i}", None]}) for i in range(0, 6, 2)]
    for batch in batches:
        spilled.write(batch)
    assert list(spilled) == batches and list(spilled) == batches  # read back, and again
    assert spilled.rows == 6 and spilled.bytes > 0 and spilled.schema == batches[0].schema
    spilled.close()
    assert spilled.closed and list(SpilledBatches()) == []


def test_a_large_transaction_is_applied_as_it_comes_and_one_the_lake_holds_is_not_held(monkeypatch):
    from airflow_provider_tiering.sources.change_stream import reduce as change_stream

    monkeypatch.setattr(change_stream, "BUFFERED_CHANGES", 2)
    held = transaction(0x100, *(insert(str(i), "a", "d") for i in range(5)))  # the lake has it (start 0x100)
    new = transaction(0x200, *(insert(str(i), "b", "d") for i in range(5)))
    found = apply(stream(held, new), start=0x100)
    assert {k: v.values["name"] for k, v in found.rows.items()} == {(str(i),): "b" for i in range(5)}
    assert found.transactions == 1


def test_a_round_bounded_in_wal_stops_after_the_transaction_that_crosses_the_bound():
    messages = stream(
        transaction(0x100, insert("1", "a", "d")),
        transaction(0x900, insert("2", "b", "d")),  # far larger than the bound: applied whole, then the round ends
        transaction(0xA00, insert("3", "c", "d")),
    )
    found = apply(messages, stop_after=0x200)
    assert sorted(found.rows) == [("1",), ("2",)] and found.last_end == 0x900


def test_a_large_transaction_cut_by_a_plans_end_inside_its_commit_record_is_neither_counted_nor_kept(monkeypatch):
    from airflow_provider_tiering.sources.change_stream import reduce as change_stream

    monkeypatch.setattr(change_stream, "BUFFERED_CHANGES", 2)
    before = transaction(0x60, insert("1", "a", "d"))
    # Its commit record starts before the end (a flushed position inside the record) and ends after it.
    cut = [begin(0x100), *(insert(str(i), "b", "d") for i in range(10, 15)), commit(0x150)]
    found = apply(stream(before, cut), start=0x10, end=0x120)
    assert found.last_end == 0x60 and found.inserted == 1  # the round ends before it
    assert not found.rows_complete and found.rows == {}  # read again up to the round's end, in chunks
    small = apply(stream(before, [begin(0x100), insert("10", "b", "d"), commit(0x150)]), start=0x10, end=0x120)
    assert small.rows_complete and list(small.rows) == [("1",)]
