"""Iceberg partitioning of a round's data: the table's partition spec, and cutting Arrow data by partition.

Each data file holds one partition, whose value the writer computes with Iceberg's own transforms
(pyiceberg-core) and hands to the commit, which cannot infer it from file statistics for bucket.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_tiering.core.errors import LakeError
from airflow_provider_tiering.core.partitions import PartitionField

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: Iceberg numbers partition fields from 1000.
FIRST_PARTITION_FIELD_ID = 1000


def build_partition_spec(fields: Sequence[PartitionField], schema: Any) -> Any:
    """The pyiceberg ``PartitionSpec`` of ``fields`` over the Iceberg ``schema``; LakeError if a column is
    missing or its type does not take the transform (a day of a string, a bucket of a float...)."""
    from pyiceberg.partitioning import PartitionField as IcebergPartitionField
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.transforms import parse_transform

    built = []
    for offset, field in enumerate(fields):
        try:
            source = schema.find_field(field.column)
        except ValueError as exc:
            raise LakeError(f"partition field {field}: column {field.column!r} is not in the table") from exc
        transform = parse_transform(field.iceberg_transform)
        if not transform.can_transform(source.field_type):
            raise LakeError(
                f"partition field {field}: {field.transform} cannot be applied to column {field.column!r} "
                f"of type {source.field_type}"
            )
        built.append(
            IcebergPartitionField(
                source_id=source.field_id,
                field_id=FIRST_PARTITION_FIELD_ID + offset,
                transform=transform,
                name=field.name,
            )
        )
    return PartitionSpec(*built)


def describe_spec(spec: Any, schema: Any) -> list[str]:
    """A partition spec as comparable text: ``["day(ts)", "bucket[16](id)"]``."""
    return [f"{f.transform}({schema.find_column_name(f.source_id)})" for f in spec.fields]


def partition_to_json(values: Sequence[Any]) -> str:
    """Partition record values (ints, strings, decimals, bytes...) as JSON, to travel back from Spark tasks."""

    def encode(value: Any) -> Any:
        if isinstance(value, Decimal):
            return {"decimal": str(value)}
        if isinstance(value, bytes):
            return {"base64": base64.b64encode(value).decode()}
        return value

    return json.dumps([encode(v) for v in values])


def partition_from_json(text: str) -> list[Any]:
    def decode(value: Any) -> Any:
        if isinstance(value, dict) and "decimal" in value:
            return Decimal(value["decimal"])
        if isinstance(value, dict) and "base64" in value:
            return base64.b64decode(value["base64"])
        return value

    return [decode(v) for v in json.loads(text or "[]")]


class Partitioner:
    """Cuts Arrow data into one piece per partition of ``spec``; picklable, shipped to the Spark tasks."""

    def __init__(self, spec: Any, schema: Any) -> None:
        # An unpartitioned table's keeps neither: a Spark task that unpickles pyiceberg's spec imports pyiceberg
        # (0.1 s of CPU in each Python worker), for the append's, the merge's and the compaction's files alike.
        partitioned = bool(spec.fields)
        self.spec = spec if partitioned else None
        self.schema = schema if partitioned else None

    @classmethod
    def of(cls, table: Table) -> Partitioner:
        """The partitioner of a loaded table's current spec and schema (what its files are written by)."""
        return cls(table.spec(), table.schema())

    @property
    def is_partitioned(self) -> bool:
        return self.spec is not None

    def split(self, table: pa.Table) -> Iterator[tuple[list[object], str, pa.Table]]:
        """Yield ``(partition record values, partition path, rows)`` for each partition present in ``table``."""
        spec, schema = self.spec, self.schema
        if spec is None or schema is None:
            yield [], "", table
            return
        from pyiceberg.partitioning import partition_record_value
        from pyiceberg.typedef import Record

        keys: dict[str, Any] = {}
        for position, field in enumerate(spec.fields):
            source = schema.find_field(field.source_id)
            keys[f"k{position}"] = field.transform.pyarrow_transform(source.field_type)(table.column(source.name))
        key_table = pa.table(keys)
        names = list(keys)
        for row in key_table.group_by(names, use_threads=False).aggregate([]).to_pylist():
            conditions = [
                pc.is_null(key_table.column(name))
                if row[name] is None
                else pc.equal(key_table.column(name), pa.scalar(row[name], key_table.column(name).type))
                for name in names
            ]
            mask = conditions[0]
            for condition in conditions[1:]:
                mask = pc.and_(mask, condition)
            values = [
                None if row[name] is None else partition_record_value(field, row[name], schema)
                for name, field in zip(names, spec.fields)
            ]
            yield values, spec.partition_to_path(Record(*values), schema), table.filter(mask)
