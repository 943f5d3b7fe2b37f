"""The Arrow types of the column type names a landing zone's spec declares (``FileSourceSpec.columns``)."""

from __future__ import annotations

import pyarrow as pa

from airflow_provider_tiering.core.source_specs import DECIMAL_TYPE, FILE_COLUMN_TYPES, TIMESTAMP_TYPE

#: The plain type names (``FILE_COLUMN_TYPES``) as Arrow types.
_PLAIN_TYPES: dict[str, pa.DataType] = {
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float": pa.float32(),
    "float32": pa.float32(),
    "double": pa.float64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "binary": pa.binary(),
    "date32": pa.date32(),
}
assert set(_PLAIN_TYPES) == FILE_COLUMN_TYPES


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a column type name accepted by :class:`FileSourceSpec`."""
    decimal = DECIMAL_TYPE.match(name)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2)))
    timestamp = TIMESTAMP_TYPE.match(name)
    if timestamp:
        return pa.timestamp("us", tz=timestamp.group(1))
    return _PLAIN_TYPES[name]
