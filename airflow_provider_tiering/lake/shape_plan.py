"""How the lake table's schema follows the hot table's: columns matched by identity, not by name.

A hot column is matched with the lake field recorded under its id in the hot store (PostgreSQL's ``attnum``,
``lake/hot_table_record.py``), so a renamed column is renamed in the lake (metadata only: the field keeps its id
and its values) and a column dropped and added again under its old name is a new field (the old one moves aside
under ``<name>__dropped_<field id>``, keeping its values). Where the store keeps no column ids (SQLite, MariaDB), or
before the lake recorded them, columns are matched by name, and the spec's declarations say what a name cannot:
one column gone while another is new is a rename or a drop and an add, refused (``AmbiguousColumnChange``) unless
``source.renamed_columns`` or ``source.dropped_columns`` tells.

Then, per matched column, the type: the same, a promotion Iceberg allows (int -> long, float -> double, a wider
decimal), or a ``SchemaConflict`` naming both types. A NOT NULL dropped makes the field optional; a column the hot
table dropped stays in the lake, optional (NULL in later rows), unless it is a merge key column (refused).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.errors import AmbiguousColumnChange, SchemaConflict
from airflow_provider_tiering.core.shape import DeclaredColumnChanges, HotIdentity, ShapeChanges
from airflow_provider_tiering.lake.hot_table_record import (
    RecordedColumn,
    backfill_property,
    columns_property,
    pending_backfill_ids,
    recorded_columns,
    reload_property,
)
from airflow_provider_tiering.lake.schema import (
    iceberg_schema_from_arrow,
    name_mapping_keeping_history,
    same_type,
    widens,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction
    from pyiceberg.types import IcebergType, NestedField

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShapePlan:
    """One change of the lake's schema, planned: the kernel's summary (``changes``) and what applying it does."""

    changes: ShapeChanges
    #: (field id, new name): renames, and dropped columns moved aside from a name a new column takes.
    renames: tuple[tuple[int, str], ...] = ()
    #: (hot name, Iceberg type): new columns, added optional.
    adds: tuple[tuple[str, IcebergType], ...] = ()
    #: (field id, promoted type).
    promotions: tuple[tuple[int, IcebergType], ...] = ()
    #: Field ids made optional (a NOT NULL dropped, or the column dropped).
    relaxed_ids: tuple[int, ...] = ()
    #: The hot ids of the lake's columns once applied (added columns: by their hot name, until they have field ids).
    columns: Mapping[int, RecordedColumn] = field(default_factory=dict)
    added_hot_ids: Mapping[str, int | None] = field(default_factory=dict)
    #: Whether the record of hot column ids changes (a first record, or ids newly known).
    records: bool = False


def _moved_aside(name: str, field_id: int) -> str:
    return f"{name}__dropped_{field_id}"


def plan_shape(
    table: Table,
    source: pa.Schema,
    identity: HotIdentity,
    declared: DeclaredColumnChanges | None = None,
    *,
    by_name: bool = False,
    partial: bool = False,
) -> ShapePlan:
    """Compare the lake table's schema with the hot table's (``source``, with the hot column ids of ``identity``).

    ``by_name``: match by name even where ids are recorded (the hot table is another one, adopted with its rows: its
    ids mean nothing to the lake's record). ``partial``: ``source`` holds the columns of what a round reads (a landing
    zone's files), not all the table's: a lake column absent from it is left as it is, and nothing is ambiguous.

    Raises:
        SchemaConflict: a type change Iceberg cannot promote, or a merge key column gone.
        AmbiguousColumnChange: by name, a column is gone and another is new, and the spec does not tell which.
    """
    declared = declared or DeclaredColumnChanges()
    schema = table.schema()
    record = recorded_columns(table)
    wanted = iceberg_schema_from_arrow(source)
    hot_names = [f.name for f in wanted.fields]
    known = record or {}
    live = [f for f in schema.fields if not known.get(f.field_id, RecordedColumn()).dropped]
    use_ids = not by_name and record is not None and bool(identity.columns)
    matched: dict[int, str] = {}
    if use_ids:
        assert record is not None
        by_hot_id = {c.hot_id: i for i, c in record.items() if c.hot_id is not None and not c.dropped}
        for name in hot_names:
            hot_id = identity.columns.get(name)
            field_id = None if hot_id is None else by_hot_id.get(hot_id)
            if field_id is not None:
                matched[field_id] = name
    unmatched_live = {f.name: f.field_id for f in live if f.field_id not in matched}
    for name in hot_names:  # by name: every column where ids cannot tell, and columns the record lacks an id for
        if name in matched.values() or name not in unmatched_live:
            continue
        field_id = unmatched_live[name]
        if use_ids and known.get(field_id, RecordedColumn()).hot_id is not None:
            continue  # a recorded column under another id: dropped, and this one is new
        matched[field_id] = name
        del unmatched_live[name]
    if partial:
        return _plan(table, schema, wanted, matched, identity, record, keep=set(unmatched_live))
    if not use_ids:
        for old, new in declared.renamed.items():
            if new in hot_names and new not in matched.values() and old in unmatched_live and old not in hot_names:
                matched[unmatched_live.pop(old)] = new
        gone = [name for name in unmatched_live if name not in declared.dropped]
        new_columns = [name for name in hot_names if name not in matched.values()]
        if gone and new_columns:
            raise AmbiguousColumnChange(
                f"Iceberg table {'.'.join(table.name())}: column(s) {gone} are gone from the hot table and "
                f"{new_columns} are new, and the hot store keeps no column ids to tell a rename from a drop and an "
                f"add. Declare which in the table spec: source.renamed_columns (e.g. {{{gone[0]!r}: "
                f"{new_columns[0]!r}}}: the same column, its values kept) or source.dropped_columns (e.g. "
                f"[{gone[0]!r}]: gone for good; the new column starts NULL for rows tiered before), then reset the "
                "table. Nothing was committed"
            )
    return _plan(table, schema, wanted, matched, identity, record)


@dataclass
class _Draft:
    """A :class:`ShapePlan` being drawn up, column by column."""

    renamed: list[tuple[str, str]] = field(default_factory=list)
    widened: list[tuple[str, str, str]] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    displaced: list[tuple[str, str]] = field(default_factory=list)
    renames: list[tuple[int, str]] = field(default_factory=list)
    promotions: list[tuple[int, IcebergType]] = field(default_factory=list)
    relaxed_ids: list[int] = field(default_factory=list)
    columns: dict[int, RecordedColumn] = field(default_factory=dict)


def _plan(
    table: Table,
    schema: Schema,
    wanted: Schema,
    matched: dict[int, str],
    identity: HotIdentity,
    record: dict[int, RecordedColumn] | None,
    keep: set[str] | None = None,
) -> ShapePlan:
    name = ".".join(table.name())
    by_id = {f.field_id: f for f in schema.fields}
    draft = _Draft()
    for field_id, hot_name in matched.items():
        _follow_matched(draft, by_id[field_id], wanted.find_field(hot_name), identity.columns.get(hot_name), name)
    final_names = {f.name for f in wanted.fields}
    key = set(schema.identifier_field_ids)
    for lake in schema.fields:
        if lake.field_id not in matched:
            was = (record or {}).get(lake.field_id, RecordedColumn())
            _follow_unmatched(draft, lake, was, keep, lake.field_id in key, lake.name in final_names, name)
    adds = tuple((f.name, f.field_type) for f in wanted.fields if f.name not in matched.values())
    changes = ShapeChanges(
        renamed=tuple(draft.renamed),
        added=tuple(n for n, _ in adds),
        dropped=tuple(draft.dropped),
        displaced=tuple(draft.displaced),
        widened=tuple(draft.widened),
        relaxed=tuple(draft.relaxed),
    )
    return ShapePlan(
        changes,
        tuple(draft.renames),
        adds,
        tuple(draft.promotions),
        tuple(draft.relaxed_ids),
        draft.columns,
        {n: identity.columns.get(n) for n, _ in adds},
        records=record is None or any(record.get(i) != c for i, c in draft.columns.items()),
    )


def _follow_matched(draft: _Draft, lake: NestedField, hot: NestedField, hot_id: int | None, name: str) -> None:
    """A lake column matched to a hot one: renamed, promoted, made optional."""
    field_id, hot_name = lake.field_id, hot.name
    if lake.name != hot_name:
        draft.renamed.append((lake.name, hot_name))
        draft.renames.append((field_id, hot_name))
    if not same_type(lake.field_type, hot.field_type):
        if not widens(lake.field_type, hot.field_type):
            raise SchemaConflict(
                f"column {hot_name!r}: the hot store's type {hot.field_type} cannot be written into the lake's "
                f"{lake.field_type} (only int -> long, float -> double and wider decimals are applied; a narrowing "
                f"or any other type change would lose data). Cast it back, tier it as a new column (add one and "
                f"leave this one out with source.columns), or drop lake table {name} to tier the table again; "
                "nothing was committed"
            )
        draft.widened.append((hot_name, str(lake.field_type), str(hot.field_type)))
        draft.promotions.append((field_id, hot.field_type))
    if lake.required and not hot.required:
        draft.relaxed.append(hot_name)
        draft.relaxed_ids.append(field_id)
    draft.columns[field_id] = RecordedColumn(hot_id)


def _follow_unmatched(
    draft: _Draft,
    lake: NestedField,
    was: RecordedColumn,
    keep: set[str] | None,
    in_key: bool,
    name_taken: bool,
    name: str,
) -> None:
    """A lake column no hot column matches: absent from what a partial round reads (kept), or dropped (made
    optional, and moved aside when a hot column takes its name)."""
    if keep is not None and lake.name in keep:  # absent from what this round reads, not dropped
        if lake.required:
            raise SchemaConflict(
                f"column {lake.name!r}: required ({lake.field_type}) in the lake but absent from what this round "
                "reads; nothing was committed"
            )
        draft.columns[lake.field_id] = was
        return
    if in_key:
        raise SchemaConflict(
            f"column {lake.name!r}: a merge key column of Iceberg table {name} is gone from the hot table (or was "
            "dropped and added again); the lake's rows could no longer be merged by it. Declare another key in "
            f"merge.primary_key and drop lake table {name} to tier the table again; nothing was committed"
        )
    if not was.dropped:
        draft.dropped.append(lake.name)
    if lake.required:
        draft.relaxed_ids.append(lake.field_id)
    if name_taken:
        draft.displaced.append((lake.name, _moved_aside(lake.name, lake.field_id)))
        draft.renames.append((lake.field_id, _moved_aside(lake.name, lake.field_id)))
    draft.columns[lake.field_id] = RecordedColumn(was.hot_id, dropped=True)


def apply_shape(
    tx: Transaction,
    plan: ShapePlan,
    *,
    defaults: Mapping[str, Any] | None = None,
    reload: str | None = None,
    backfill: bool = False,
) -> None:
    """Apply ``plan`` in ``tx``: renames (and columns moved aside) first, then promotions, relaxed NOT NULLs and
    added columns (with an initial default from ``defaults``: what the rows written before read), the name mapping
    keeping every former name with its field, the record of hot column ids, and the pending work: ``reload`` (why the
    whole hot table must be read again and merged) and ``backfill`` (write the added defaults into the files)."""
    from pyiceberg.table import TableProperties

    defaults = defaults or {}
    previous_mapping = tx.table_metadata.properties.get(TableProperties.DEFAULT_NAME_MAPPING)
    if plan.renames:  # first, so an added column may take a name a dropped one moves away from
        with tx.update_schema() as update:
            for field_id, new_name in plan.renames:
                current = tx.table_metadata.schema().find_column_name(field_id)
                assert current is not None  # planned on this very schema
                update.rename_column(current, new_name)
    if plan.promotions or plan.relaxed_ids or plan.adds:
        with tx.update_schema() as update:
            schema = tx.table_metadata.schema()
            for field_id, promoted in plan.promotions:
                update.update_column(schema.find_column_name(field_id) or "", field_type=promoted)
            for field_id in plan.relaxed_ids:
                update.make_column_optional(schema.find_column_name(field_id) or "")
            for column, kind in plan.adds:
                update.add_column(column, kind, default_value=defaults.get(column))
    schema = tx.table_metadata.schema()
    columns = dict(plan.columns)
    for column, hot_id in plan.added_hot_ids.items():
        columns[schema.find_field(column).field_id] = RecordedColumn(hot_id)
    properties = {
        TableProperties.DEFAULT_NAME_MAPPING: name_mapping_keeping_history(previous_mapping, schema),
        **columns_property(columns),
    }
    if reload is not None:
        properties.update(reload_property(reload))
    if backfill:
        added = [schema.find_field(c).field_id for c in defaults]
        properties.update(backfill_property([*pending_backfill_ids(tx.table_metadata.properties), *added]))
    tx.set_properties(properties)
