"""What a lake table records of its hot table, in table properties: the identity a commit saw, each column's id in
the hot store, and the work a change of the hot table's shape left pending (``core/shape.py``: ``LakeShape``).

Each property has one writer, so a commit never overwrites what another kind of commit recorded meanwhile:

* ``tiering.hot-identity``: the hot table's identity (table and storage id, each column's id, and the type ids a change
  stream aligns its older descriptions of the columns with) as the last tiering commit's round saw it when it planned
  (or as a round found it unchanged in content);
* ``tiering.hot-columns``: per lake field id, the hot column's id (PostgreSQL's ``attnum``; null where the store keeps
  none) and whether the hot table dropped it; written with every change of the lake's schema;
* ``tiering.pending-reload``: why the next round must read the whole hot table again and merge it (set with the
  schema change that made it necessary, cleared by the commit of that reload);
* ``tiering.pending-backfill``: field ids whose initial default must be written into the table's files (set with
  the schema change, cleared by the backfill's commit).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.shape import HotIdentity, LakeShape

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

IDENTITY_PROPERTY = "tiering.hot-identity"
COLUMNS_PROPERTY = "tiering.hot-columns"
RELOAD_PROPERTY = "tiering.pending-reload"
BACKFILL_PROPERTY = "tiering.pending-backfill"


@dataclass(frozen=True)
class RecordedColumn:
    """A lake field as the lake recorded its hot column: the column's id in the hot store (None: the store keeps
    none), and whether the hot table dropped it (it stays in the lake)."""

    hot_id: int | None = None
    dropped: bool = False


def recorded_columns(table: Table) -> dict[int, RecordedColumn] | None:
    """Per lake field id, its hot column as recorded; None when nothing was recorded (a table tiered by a version
    that did not record it: its columns are followed by name until the next change of schema records them)."""
    text = table.properties.get(COLUMNS_PROPERTY)
    if not text:
        return None
    found = json.loads(text)
    return {int(k): RecordedColumn(v.get("id"), bool(v.get("dropped"))) for k, v in found.items()}


def columns_property(columns: Mapping[int, RecordedColumn]) -> dict[str, str]:
    document = {
        str(field_id): {"id": column.hot_id, **({"dropped": True} if column.dropped else {})}
        for field_id, column in sorted(columns.items())
    }
    return {COLUMNS_PROPERTY: json.dumps(document, sort_keys=True, separators=(",", ":"))}


def identity_property(identity: HotIdentity) -> dict[str, str]:
    return {IDENTITY_PROPERTY: json.dumps(identity.to_json(), sort_keys=True, separators=(",", ":"))}


def recorded_identity(table: Table) -> HotIdentity | None:
    text = table.properties.get(IDENTITY_PROPERTY)
    if not text:
        return None
    return HotIdentity.from_json(json.loads(text))


def reload_property(reason: str | None) -> dict[str, str]:
    """Set (a reason) or clear (None) the pending reload; an empty value means none."""
    return {RELOAD_PROPERTY: reason or ""}


def backfill_property(field_ids: Iterable[int]) -> dict[str, str]:
    return {BACKFILL_PROPERTY: json.dumps(sorted(set(field_ids)))}


def pending_backfill_ids(properties: Mapping[str, str]) -> list[int]:
    text = properties.get(BACKFILL_PROPERTY)
    return [int(i) for i in json.loads(text)] if text else []


def former_names(table: Table) -> dict[str, str]:
    """Every name a field of the current schema was known by (the name mapping keeps a renamed field's old names, for
    files written before the rename), mapped to the field's current name; current names map to themselves."""
    from pyiceberg.table import TableProperties

    schema = table.schema()
    current = {field.field_id: field.name for field in schema.fields}
    found: dict[str, str] = {name: name for name in current.values()}
    text = table.properties.get(TableProperties.DEFAULT_NAME_MAPPING)
    if text:
        for entry in json.loads(text):
            field_id = entry.get("field-id")
            for name in entry.get("names") or ():
                if field_id in current and name not in found:
                    found[name] = current[field_id]
    return found


def initial_defaults(schema: Schema) -> dict[str, Any]:
    """Each top-level field's initial default (what rows written before it existed read), where it has one."""
    return {f.name: f.initial_default for f in schema.fields if f.initial_default is not None}


def lake_shape(table: Table) -> LakeShape:
    """What ``table`` recorded of its hot table (see the module's description)."""
    schema = table.schema()
    columns = recorded_columns(table) or {}
    dropped = {field.name for field in schema.fields if (c := columns.get(field.field_id)) is not None and c.dropped}
    names: dict[str, str | None] = {old: (None if now in dropped else now) for old, now in former_names(table).items()}
    by_id = {field.field_id: field.name for field in schema.fields}
    return LakeShape(
        identity=recorded_identity(table),
        columns=tuple(field.name for field in schema.fields),
        former_names=names,
        defaults=initial_defaults(schema),
        pending_reload=table.properties.get(RELOAD_PROPERTY) or None,
        pending_backfill=tuple(by_id[i] for i in pending_backfill_ids(table.properties) if i in by_id),
    )
