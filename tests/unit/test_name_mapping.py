"""The name mapping of files written without field ids keeps every name with the field it meant
(``lake/schema.py: name_mapping_keeping_history``), where pyiceberg's own would move a name to the field that takes it
last: such files (written by earlier versions of this provider) would then be read into the wrong column."""

from __future__ import annotations

import json

from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from airflow_provider_tiering.lake.schema import name_mapping_keeping_history


def _names(mapping: str) -> dict[int, list[str]]:
    return {entry["field-id"]: entry["names"] for entry in json.loads(mapping)}


def test_a_renamed_field_keeps_its_former_name() -> None:
    before = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "b", StringType()))
    after = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "b2", StringType()))
    mapping = name_mapping_keeping_history(before.name_mapping.model_dump_json(), after)
    assert _names(mapping) == {1: ["id"], 2: ["b", "b2"]}


def test_a_name_stays_with_the_field_it_meant_when_another_field_takes_it() -> None:
    # b dropped (moved aside) and a new b added: files without ids that say "b" mean field 2, not field 3.
    before = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "b", StringType()))
    after = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "b__dropped_2", StringType()),
        NestedField(3, "b", IntegerType()),
    )
    mapping = name_mapping_keeping_history(before.name_mapping.model_dump_json(), after)
    assert _names(mapping) == {1: ["id"], 2: ["b", "b__dropped_2"], 3: []}


def test_swapped_names_stay_with_their_fields() -> None:
    before = Schema(NestedField(1, "a", StringType()), NestedField(2, "b", StringType()))
    after = Schema(NestedField(1, "b", StringType()), NestedField(2, "a", StringType()))
    mapping = name_mapping_keeping_history(before.name_mapping.model_dump_json(), after)
    assert _names(mapping) == {1: ["a"], 2: ["b"]}


def test_without_a_former_mapping_each_field_is_known_by_its_name() -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "b", StringType()))
    assert _names(name_mapping_keeping_history(None, schema)) == {1: ["id"], 2: ["b"]}
