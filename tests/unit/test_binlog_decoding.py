"""The binlog's parts decoded here, without a server: row images of each kind of column (bytes as MySQL's and
MariaDB's row format lays them out, the decimals from the MySQL manual's own example), statements that replace a
table's rows told from those that do not, positions across binlog files, and a first load's roll-back of a table's
keys to the versions they had before a window's changes."""

from __future__ import annotations

import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, TableTruncated, UnsupportedColumnType
from airflow_provider_tiering.sources.change_stream.messages import Begin, Change, Commit, Relation, Truncate
from airflow_provider_tiering.sources.change_stream.reduce import ChangeWindow, versions_before
from airflow_provider_tiering.sources.mysql import row_images as t
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, describe, log_bytes, pack, unpack
from airflow_provider_tiering.sources.mysql.binlog_statements import Effect, effect_on, names_column
from airflow_provider_tiering.sources.mysql.row_images import RowImages


def column(kind: int, name: str = "c", **meta: Any) -> SimpleNamespace:
    return SimpleNamespace(type=kind, name=name, unsigned=meta.pop("unsigned", False), **meta)


def image(columns: list[SimpleNamespace], *values: bytes | None) -> bytes:
    """One row image: the NULL bitmap, then each non-NULL value's bytes."""
    nulls = sum(1 << i for i, v in enumerate(values) if v is None)
    return nulls.to_bytes((len(columns) + 7) // 8, "little") + b"".join(v for v in values if v is not None)


def decoded(col: SimpleNamespace, value: bytes) -> object:
    rows = RowImages([col], "t").rows(image([col], value), b"\x01")
    return rows[0][0]


def test_integers_floats_and_years_decode_with_their_sign() -> None:
    assert decoded(column(t.TINY), b"\x80") == -128
    assert decoded(column(t.TINY, unsigned=True), b"\xff") == 255
    assert decoded(column(t.INT24), b"\x00\x00\x80") == -8388608
    assert decoded(column(t.LONGLONG, unsigned=True), b"\xff" * 8) == 2**64 - 1
    assert decoded(column(t.FLOAT), struct.pack("<f", 1.5)) == 1.5
    assert decoded(column(t.YEAR), b"\x00") == 0 and decoded(column(t.YEAR), b"\x7c") == 2024


def test_decimals_decode_exactly_at_any_precision() -> None:
    # The MySQL manual's example: DECIMAL(14,4) 1234567890.1234 and its negative.
    dec = column(t.NEWDECIMAL, precision=14, decimals=4)
    assert decoded(dec, bytes.fromhex("810DFB38D204D2")) == Decimal("1234567890.1234")
    assert decoded(dec, bytes.fromhex("7EF204C72DFB2D")) == Decimal("-1234567890.1234")
    # DECIMAL(38,0) of 38 nines: two leading digits in a byte (99, the sign bit set), then four groups of 999999999.
    nines = b"\xe3" + bytes.fromhex("3B9AC9FF") * 4
    assert decoded(column(t.NEWDECIMAL, precision=38, decimals=0), nines) == Decimal(10**38 - 1)


def test_temporal_values_decode_as_the_integers_arrow_stores() -> None:
    date = column(t.DATE)
    packed = (2024 << 9) | (2 << 5) | 29
    assert decoded(date, packed.to_bytes(3, "little")) == 19782  # days since 1970-01-01
    with pytest.raises(UnsupportedColumnType, match="zero date"):
        decoded(date, b"\x00\x00\x00")
    with pytest.raises(UnsupportedColumnType, match="zero part"):
        decoded(date, ((2024 << 9) | (0 << 5) | 10).to_bytes(3, "little"))
    stamp = column(t.TIMESTAMP2, fsp=3)
    assert decoded(stamp, (1).to_bytes(4, "big") + (1).to_bytes(2, "big")) == 1_000_100  # 1 s and one 100 us unit
    with pytest.raises(UnsupportedColumnType, match="zero TIMESTAMP"):
        decoded(column(t.TIMESTAMP2, fsp=0), bytes(4))
    time = column(t.TIME2, fsp=6)
    minus = (0x800000 << 24) - (((12 << 12) | (34 << 6) | 56) << 24) - 789012  # -12:34:56.789012
    assert decoded(time, minus.to_bytes(6, "big")) == -45_296_789_012
    # -00:00:01.50 with two fractional digits: MySQL stores -2 s (7FFFFE) and the fraction counted from the other end
    # (0x100 - 50 = CE), as its own table of such values shows (7FFFFE.F6 is -00:00:01.10).
    assert decoded(column(t.TIME2, fsp=2), bytes.fromhex("7FFFFECE")) == -1_500_000
    assert decoded(column(t.TIME2, fsp=2), bytes.fromhex("7FFFFEF6")) == -1_100_000


def test_strings_enums_sets_and_bits_decode_as_a_select_prints_them() -> None:
    text = "é😀".encode()
    assert decoded(column(t.VARCHAR, max_length=40, character_set_name="utf8"), bytes([len(text)]) + text) == "é😀"
    assert decoded(column(t.STRING, max_length=4, character_set_name="binary"), b"\x02ab") == b"ab\x00\x00"
    assert decoded(column(t.STRING, max_length=4, character_set_name="cp1252"), b"\x02\x80\x81") == "€\x81"
    assert decoded(column(t.BLOB, length_size=4, character_set_name="binary"), b"\x00\x00\x00\x00") == b""
    assert decoded(column(t.ENUM, size=1, enum_values=["", "a", "bb"]), b"\x02") == "bb"
    assert decoded(column(t.SET, size=1, set_values=["x", "y", "z"]), b"\x05") == "x,z"
    assert decoded(column(t.SET, size=1, set_values=["x", "y", "z"]), b"\x00") == ""
    assert decoded(column(t.BIT, bytes=3), b"\x01\x00\x05") == b"\x01\x00\x05"
    with pytest.raises(UnsupportedColumnType, match="binary JSON"):
        RowImages([column(t.JSON, length_size=4)], "t")


def test_a_row_decodes_alike_with_and_without_nulls_between_its_values() -> None:
    # Neighbouring numbers (read together when no column is NULL), a decimal, a date, strings of each length width.
    cols = [
        column(t.LONGLONG, "a"), column(t.LONG, "b", unsigned=True), column(t.DOUBLE, "c"),
        column(t.NEWDECIMAL, "d", precision=15, decimals=2), column(t.DATE, "e"),
        column(t.VARCHAR, "f", max_length=1200, character_set_name="utf8"), column(t.TINY, "g"),
        column(t.STRING, "h", max_length=3, character_set_name="binary"), column(t.SHORT, "i"),
        column(t.BLOB, "j", length_size=2, character_set_name="utf8"),
    ]  # fmt: skip
    text = "ü" * 300
    values = [
        struct.pack("<q", -5), struct.pack("<I", 2**32 - 1), struct.pack("<d", 0.25),
        bytes.fromhex("7FFFFFFFFFFE9C"),  # -1.99: digits 0000 000000001 99, their bits inverted
        ((2024 << 9) | (2 << 5) | 29).to_bytes(3, "little"), struct.pack("<H", len(text.encode())) + text.encode(),
        b"\xff", b"\x01z", struct.pack("<h", 300), struct.pack("<H", 2) + b"ok",
    ]  # fmt: skip
    whole = (-5, 2**32 - 1, 0.25, Decimal("-1.99"), 19782, text, -1, b"z\x00\x00", 300, "ok")
    present = b"\xff\x03"
    images = RowImages(cols, "t")
    assert images.rows(image(cols, *values), present) == [whole]
    for holes in ([0], [1, 2], [3, 5], [4, 9], [6, 7, 8], list(range(10))):
        row = [None if n in holes else v for n, v in enumerate(values)]
        expected = tuple(None if n in holes else v for n, v in enumerate(whole))
        # Two images back to back: the first's end is where the second starts.
        assert images.rows(image(cols, *row) + image(cols, *values), present) == [expected, whole]
        # Old images of a round: its key's columns only, every other one passed over.
        keyed = RowImages(cols, "t", old_key=("a", "i"))
        key_only = tuple(v if n in (0, 8) else None for n, v in enumerate(expected))
        pair = image(cols, *row) + image(cols, *values)
        assert keyed.rows(pair, present, present) == [(key_only, whole)]
        assert keyed.rows(pair, present, old=True) == [key_only, (-5, *[None] * 7, 300, None)]
        assert not keyed.old_is_row and RowImages(cols, "t", old_key=("a", "gone")).old_is_row


def test_an_update_decodes_both_images_and_a_partial_image_is_refused() -> None:
    cols = [column(t.LONG, "id"), column(t.VARCHAR, "v", max_length=10, character_set_name="utf8")]
    body = image(cols, b"\x01\x00\x00\x00", b"\x01a") + image(cols, b"\x01\x00\x00\x00", None)
    assert RowImages(cols, "t").rows(body, b"\x03", b"\x03") == [((1, "a"), (1, None))]
    with pytest.raises(ChangeStreamUnavailable, match="binlog_row_image"):
        RowImages(cols, "t").rows(body, b"\x03", b"\x01")


@pytest.mark.parametrize(
    "statement, effect",
    [
        ("TRUNCATE TABLE t", Effect.TRUNCATED), ("truncate `db`.`t`", Effect.TRUNCATED), ("TRUNCATE t2", Effect.NONE),
        ("DROP TABLE IF EXISTS `t` /* generated by server */", Effect.REPLACED),
        ("DROP TABLE a, db.t", Effect.REPLACED),
        ("DROP TABLE other.t", Effect.NONE), ("RENAME TABLE t TO t_old, t_new TO t", Effect.REPLACED),
        ("RENAME TABLE a TO b", Effect.NONE), ("ALTER TABLE t ADD COLUMN x INT", Effect.ALTERED),
        ("ALTER TABLE t RENAME COLUMN a TO b", Effect.ALTERED), ("ALTER TABLE `t` RENAME TO u", Effect.REPLACED),
        ("alter online table db.t rename as u", Effect.REPLACED), ("ALTER TABLE t2 ADD COLUMN t INT", Effect.NONE),
        ("CREATE OR REPLACE TABLE t (id int)", Effect.REPLACED), ("CREATE TABLE t2 LIKE t", Effect.NONE),
        ("INSERT INTO t VALUES (1)", Effect.STATEMENT), ("UPDATE t2 SET a = 1", Effect.NONE),
        ("DELETE FROM `t` WHERE 1", Effect.STATEMENT), ("BEGIN", Effect.NONE),
        ("/* c */ TRUNCATE TABLE t", Effect.TRUNCATED),
    ],
)  # fmt: skip
def test_statements_that_replace_a_tables_rows_are_told_from_others(statement: str, effect: Effect) -> None:
    assert effect_on(statement, "db", "db", "t") is effect


def test_a_statement_names_a_column_quoted_or_not() -> None:
    assert names_column("ALTER TABLE t ALTER COLUMN `D` SET DEFAULT 9", "d")
    assert not names_column("ALTER TABLE t ADD COLUMN dd INT", "d")


def test_positions_order_across_files_and_count_their_bytes() -> None:
    files = BinlogFiles.of("binlog.000009")
    first, second = pack("binlog.000009", 4000), pack("binlog.000010", 4)
    assert first < second and unpack(second) == (10, 4) and files.name(10) == "binlog.000010"
    assert describe(first, files) == "binlog.000009:4000"
    assert log_bytes(first, pack("binlog.000011", 100), {9: 5000, 10: 2000, 11: 300}) == 1000 + 2000 + 100


def test_a_windows_first_change_of_each_key_gives_its_version_before_the_window() -> None:
    relation = Relation(7, ("id", "v"))
    messages = [
        relation,
        Begin(90), Change("U", 7, new=(1, "old+"), old=(1, "old"), old_is_row=True), Commit(90, 100),
        Begin(100), Change("I", 7, new=(5, "new")),
        Change("U", 7, new=(1, "again"), old=(1, "old+"), old_is_row=True),
        Change("D", 7, old=(2, "two"), old_is_row=True),
        Change("U", 7, new=(30, "k"), old=(3, "three"), old_is_row=True),
        Commit(100, 110),
        Begin(110), Change("D", 7, old=(5, "new"), old_is_row=True), Commit(110, 120),
        Begin(120), Truncate((7,)), Commit(120, 130),
    ]  # fmt: skip
    found = versions_before(messages, ChangeWindow(("id",), 100, 120))
    assert found == {(5,): None, (1,): {"id": 1, "v": "old+"}, (2,): {"id": 2, "v": "two"},
                     (3,): {"id": 3, "v": "three"}, (30,): None}  # fmt: skip
    with pytest.raises(TableTruncated):
        versions_before(messages, ChangeWindow(("id",), 100, None))
