"""A change stream's Relation messages placed among the table's columns by attribute number
(``sources/postgres/relation_columns.py``): every sequence of column changes between two rounds that leaves one
reading places the changes' values; one that leaves two reads the touched rows again by key; and the reducer reads
such rows again instead of guessing (``sources/change_stream/reduce.py``)."""

from __future__ import annotations

import pytest

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable
from airflow_provider_tiering.sources.change_stream.reduce import ChangeWindow, RelationColumns, apply_changes
from airflow_provider_tiering.sources.postgres.pgoutput import UNCHANGED_TOAST, Begin, Change, Commit, Relation
from airflow_provider_tiering.sources.postgres.relation_columns import Attribute, ColumnLayout, MessageColumn

INT8, INT4, TEXT, FLOAT4, VARCHAR = 20, 23, 25, 700, 1043
#: The lake's record when its last round planned: id (1), ver (2), b (3), q (4), f (5).
START = {1: INT8, 2: INT8, 3: TEXT, 4: INT4, 5: FLOAT4}


def now(*attributes: tuple[int, str | None, int]) -> list[Attribute]:
    return [Attribute(n, name, kind) for n, name, kind in attributes]


def message(*columns: tuple[str, int]) -> list[MessageColumn]:
    return [MessageColumn(name, kind) for name, kind in columns]


BEFORE = message(("id", INT8), ("ver", INT8), ("b", TEXT), ("q", INT4), ("f", FLOAT4))


def test_a_column_renamed_twice_between_two_rounds_is_placed_by_its_number():
    layout = ColumnLayout(
        START, 5, now((1, "id", INT8), (2, "ver", INT8), (3, "b4", TEXT), (4, "q", INT4), (5, "f", FLOAT4))
    )
    while_b2 = message(("id", INT8), ("ver", INT8), ("b2", TEXT), ("q", INT4), ("f", FLOAT4))
    assert layout.place(while_b2, ["id"]) == RelationColumns(("id", "ver", "b4", "q", "f"))
    assert layout.place(BEFORE, ["id"]) == RelationColumns(("id", "ver", "b4", "q", "f"))


def test_a_column_added_and_dropped_again_between_two_rounds_has_its_values_ignored():
    layout = ColumnLayout(
        START, 5, now((1, "id", INT8), (2, "ver", INT8), (3, "b", TEXT), (4, "q", INT4), (5, "f", FLOAT4), (6, None, 0))
    )
    while_added = [*BEFORE, MessageColumn("c", INT4)]
    assert layout.place(while_added, ["id"]) == RelationColumns(("id", "ver", "b", "q", "f", None))
    assert layout.place(BEFORE, ["id"]) == RelationColumns(("id", "ver", "b", "q", "f"))


def test_a_column_dropped_and_added_again_under_its_name_is_told_apart_by_its_type():
    """``q integer`` dropped, ``q text`` added: a change made before names the old one, after the new one."""
    layout = ColumnLayout(
        START, 5, now((1, "id", INT8), (2, "ver", INT8), (3, "b", TEXT), (4, None, 0), (5, "f", FLOAT4), (6, "q", TEXT))
    )
    assert layout.place(BEFORE, ["id"]) == RelationColumns(("id", "ver", "b", None, "f"))
    after = message(("id", INT8), ("ver", INT8), ("b", TEXT), ("f", FLOAT4), ("q", TEXT))
    assert layout.place(after, ["id"]) == RelationColumns(("id", "ver", "b", "f", "q"))
    between = message(("id", INT8), ("ver", INT8), ("b", TEXT), ("f", FLOAT4))
    assert layout.place(between, ["id"]) == RelationColumns(("id", "ver", "b", "f"))


def test_a_column_dropped_and_added_again_with_its_type_reads_the_rows_again_by_key():
    """Dropped ``f`` and added ``f`` of the same type, the last column both times: a change listing ``f`` last may
    carry either, so only the key is placed and the rows are read again."""
    layout = ColumnLayout(
        START, 5, now((1, "id", INT8), (2, "ver", INT8), (3, "b", TEXT), (4, "q", INT4), (5, None, 0), (6, "f", FLOAT4))
    )
    found = layout.place(BEFORE, ["id"])
    assert found == RelationColumns(("id", None, None, None, None), placed=False)


def test_columns_dropped_before_the_lakes_record_never_count():
    """Attribute 2 was dropped long before the last round: a message can never carry it."""
    layout = ColumnLayout({1: INT8, 3: TEXT}, 3, now((1, "id", INT8), (2, None, 0), (3, "b", TEXT)))
    assert layout.place(message(("id", INT8), ("b", TEXT)), ["id"]) == RelationColumns(("id", "b"))


def test_a_type_changed_in_place_reads_the_rows_again_by_key_and_a_lost_key_is_refused():
    """``varchar`` to ``text`` keeps the column's number and rewrites nothing: no reading fits the types, so the key
    is found by its name and type and the rows are read again. A key that cannot be found fails the round."""
    layout = ColumnLayout({1: INT8, 2: VARCHAR}, 2, now((1, "id", INT8), (2, "b", TEXT)))
    assert layout.place(message(("id", INT8), ("b", VARCHAR)), ["id"]) == RelationColumns(("id", None), placed=False)
    with pytest.raises(ChangeStreamUnavailable, match="key"):
        layout.place(message(("id2", INT8), ("b", VARCHAR)), ["id"])


def _relation(names: tuple[str, ...]) -> Relation:
    return Relation(1, names, (INT8,) * len(names))


def test_changes_that_cannot_be_placed_are_read_again_and_a_later_placed_version_wins():
    unplaced, placed = ("id", "x"), ("id", "b")

    def names(relation: Relation) -> RelationColumns:
        if relation.columns == unplaced:
            return RelationColumns(("id", None), placed=False)
        return RelationColumns(relation.columns)

    messages = [
        Begin(90, 1),
        _relation(unplaced),
        Change("I", 1, new=("1", "x1")),
        Change("I", 1, new=("2", "x2")),
        Change("U", 1, new=("3", "x3"), old=("2", None)),  # the key changed: 2 is gone
        Commit(90, 100),
        Begin(190, 2),
        _relation(placed),
        Change("U", 1, new=("1", "b1")),  # a whole row: it wins
        Change("U", 1, new=("3", UNCHANGED_TOAST)),  # left alone a value only the row read again has
        Commit(190, 200),
    ]
    found = apply_changes(messages, ChangeWindow(("id",), 0, None, names=names))
    assert found.rows[("1",)] is not None and found.rows[("1",)].values == {"id": "1", "b": "b1"}
    assert not found.rows[("1",)].read_again
    assert found.rows[("2",)] is None
    again = found.rows[("3",)]
    assert again is not None and again.read_again and again.values == {"id": "3"}
    assert (found.inserted, found.updated, found.deleted) == (2, 3, 0)
