"""The shape and identity of a hot table, and what the lake has recorded of them (``docs/design.md``, "When the hot
table changes").

Values only: a source tells its table's identity (:class:`HotIdentity`) and what the rows it has already tiered
hold in a newly added column (:class:`AddedValues`); the lake tells what it recorded (:class:`LakeShape`) and how
its schema differs from the hot table's (:class:`ShapeChanges`). ``core/follow_shape.py`` decides from them how the
lake follows, or why it refuses.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HotIdentity:
    """How the lake tells the hot table, and each of its columns, from another one of the same name.

    ``table`` changes only when the table is another one (PostgreSQL's ``oid``: dropped and created again); None
    where the store keeps no such id (SQLite, MariaDB). ``storage`` changes whenever the table's rows may have been
    replaced without a change each: PostgreSQL's ``relfilenode`` (TRUNCATE, VACUUM FULL, CLUSTER, a rewriting ALTER
    TABLE), MariaDB's InnoDB table id (TRUNCATE, a rebuild, DROP and CREATE), SQLite's schema version (any DDL in
    the database, VACUUM); a change makes the round check that the rows it tiered are still there. ``columns`` maps
    each column to an id its store keeps across a rename and gives anew to a column dropped and added again
    (PostgreSQL's ``attnum``); empty where the store keeps none, and columns are then followed by name.
    """

    table: str | None = None
    storage: str | None = None
    columns: Mapping[str, int] = field(default_factory=dict)
    #: Where the store's history of writes stood when the identity was read (PostgreSQL: the next transaction id):
    #: a row written later is newer than it. None where the store cannot tell.
    horizon: str | None = None
    #: Each column's type as its store declares it, and its nullability (``numeric(12,2) not null``): a change that
    #: keeps a column's id (a wider ``varchar``, ``DROP NOT NULL``) shows here. Empty where the identity does not
    #: tell (a store whose ``storage`` changes with every change of its tables' definitions: SQLite).
    types: Mapping[str, str] = field(default_factory=dict)
    #: The store's type id of each column id a change stream describes (PostgreSQL: ``atttypid`` by ``attnum``;
    #: generated columns, which the stream never carries, left out), and the highest column id the table ever gave,
    #: dropped columns included (``relnatts``): what a change stream aligns an older description of the table's
    #: columns with (``sources/postgres/relation_columns.py``). Empty and None where the store keeps no column ids.
    type_ids: Mapping[int, int] = field(default_factory=dict)
    last_column_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"table": self.table, "storage": self.storage, "horizon": self.horizon}
        if self.columns:
            found["columns"] = dict(self.columns)
        if self.type_ids:
            found["type_ids"] = {str(k): v for k, v in sorted(self.type_ids.items())}
        if self.last_column_id is not None:
            found["last_column_id"] = self.last_column_id
        return found

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> HotIdentity:
        """An identity as :meth:`to_json` wrote it (a lake's record of it)."""
        return cls(
            table=found.get("table"),
            storage=found.get("storage"),
            columns={str(k): int(v) for k, v in (found.get("columns") or {}).items()},
            horizon=found.get("horizon"),
            type_ids={int(k): int(v) for k, v in (found.get("type_ids") or {}).items()},
            last_column_id=found.get("last_column_id"),
        )

    def shape_json(self) -> dict[str, Any]:
        """The table's identity and shape, without what moves with every write (the horizon): what a due table's
        probe compares with the record the last round left (``TableState.hot_shape``, :func:`shape_change`)."""
        return {
            "table": self.table,
            "storage": self.storage,
            "columns": dict(sorted(self.columns.items())),
            "types": dict(sorted(self.types.items())),
            "last_column_id": self.last_column_id,
        }

    def same_as(self, other: HotIdentity | dict[str, Any] | None) -> bool:
        """The same table in the same storage (the horizon moves with every write and does not count)."""
        if other is None:
            return False
        found = other.to_json() if isinstance(other, HotIdentity) else other
        return (found.get("table"), found.get("storage")) == (self.table, self.storage)


def shape_change(recorded: Mapping[str, Any], now: HotIdentity) -> str | None:
    """How the hot table's identity or shape (``now``) differs from ``recorded`` (:meth:`HotIdentity.shape_json` as
    the last round left it), in words for the task log; None when it does not. Any difference makes a due table's
    task run its round, which follows the change or refuses it (``core/follow_shape.py``)."""
    found = now.shape_json()
    if found == dict(recorded):
        return None
    said: list[str] = []
    if found["table"] != recorded.get("table"):
        said.append(f"its table id {recorded.get('table')} -> {found['table']} (dropped and created again?)")
    elif found["storage"] != recorded.get("storage"):
        said.append(f"its storage {recorded.get('storage')} -> {found['storage']} (truncated, rewritten or DDL)")
    before: Mapping[str, int] = recorded.get("columns") or {}
    after: Mapping[str, int] = found["columns"]
    by_id = {number: name for name, number in before.items()}
    renamed = [f"{by_id[n]} -> {name}" for name, n in after.items() if n in by_id and by_id[n] != name]
    added = [name for name, n in after.items() if n not in by_id]
    dropped = [name for name, n in before.items() if n not in after.values()]
    types_before: Mapping[str, str] = recorded.get("types") or {}
    if not after and not before:  # a store without column ids: columns by name
        added = [name for name in found["types"] if name not in types_before]
        dropped = [name for name in types_before if name not in found["types"]]
    said += [f"renamed {', '.join(renamed)}"] if renamed else []
    said += [f"added {', '.join(added)}"] if added else []
    said += [f"dropped {', '.join(dropped)}"] if dropped else []
    retyped = [
        f"{name} {types_before[name]} -> {kind}"
        for name, kind in found["types"].items()
        if name in types_before and types_before[name] != kind
    ]
    said += [f"retyped {', '.join(retyped)}"] if retyped else []
    return "; ".join(said) or "its columns changed"


class AddedValuesKind(enum.StrEnum):
    """What the rows a table had before a column was added hold in it, in the hot store."""

    #: NULL in every such row (a column added without a default): the lake's rows read NULL too.
    NULL = "null"
    #: One same value in every such row (a constant default, or ``now()`` evaluated once by the ALTER).
    CONSTANT = "constant"
    #: Each row its own value (a volatile default the ALTER evaluated per row, or values written since).
    PER_ROW = "per_row"


@dataclass(frozen=True)
class AddedValues:
    """What a newly added column holds in the rows the lake already has (see :class:`AddedValuesKind`); ``value``
    is the one value of a constant, as the lake's type reads it (Python's ``int``, ``str``, ``Decimal``,
    ``datetime``...)."""

    kind: AddedValuesKind
    value: Any = None
    #: How the source found out, for messages ("the column's missing value", "every tiered row holds 7").
    how: str = ""


@dataclass(frozen=True)
class DeclaredColumnChanges:
    """What a table spec declares about changes of its hot table's columns that the hot store cannot tell (SQLite,
    MariaDB keep no column ids): ``renamed`` maps a former name to the new one; ``dropped`` names former columns
    that are gone for good (a new column is then new, not one of them renamed)."""

    renamed: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShapeChanges:
    """How the lake table's schema differs from the hot table's, column by column (lake names on the left).

    ``renamed``: (lake name, hot name) of the same column; ``added``: hot columns new to the lake; ``dropped``: lake
    columns the hot table no longer has (they stay in the lake, NULL in later rows); ``displaced``: (lake name, name
    it is moved to) of a dropped column whose name a new column takes; ``widened``: (name, lake type, hot type) of
    a promotion Iceberg allows; ``relaxed``: required lake columns the hot table lets be NULL now.
    """

    renamed: tuple[tuple[str, str], ...] = ()
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    displaced: tuple[tuple[str, str], ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()
    relaxed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.renamed or self.added or self.dropped or self.displaced or self.widened or self.relaxed)

    def describe(self) -> str:
        parts = [f"renamed {old} -> {new}" for old, new in self.renamed]
        parts += [f"added {name}" for name in self.added]
        parts += [f"dropped {name} (kept in the lake, NULL in later rows)" for name in self.dropped]
        parts += [f"moved dropped column {old} to {new}" for old, new in self.displaced]
        parts += [f"widened {name} {old} -> {new}" for name, old, new in self.widened]
        parts += [f"{name} made optional" for name in self.relaxed]
        return "; ".join(parts)


@dataclass(frozen=True)
class ShapeDecision:
    """How the lake follows a change of its hot table, as the round decided it: the initial default of each added
    column that has one (what the rows tiered before read), why the whole hot table must be read again and merged
    (None: it need not), and whether the added defaults are also written into the table's files (a backfill, for
    readers that ignore Iceberg's initial defaults)."""

    defaults: Mapping[str, Any] = field(default_factory=dict)
    reload: str | None = None
    backfill: bool = False


@dataclass(frozen=True)
class LakeShape:
    """What the lake table recorded of its hot table: the identity the last commit saw (None: a table tiered by a
    version that did not record it), its columns, the names each column had before (what a change stream
    written before a rename still calls it), each column's initial default (what a row written before the column
    existed holds), and the work a change of shape left pending: a reload of the whole table, a backfill of added
    columns' defaults into the table's files."""

    identity: HotIdentity | None = None
    #: The lake table's columns, by their current names.
    columns: tuple[str, ...] = ()
    former_names: Mapping[str, str | None] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    pending_reload: str | None = None
    pending_backfill: tuple[str, ...] = ()


@dataclass(frozen=True)
class ColumnHistory:
    """What a change stream needs to decode changes made before the hot table's last changes of shape:
    ``former_names`` maps a name a column had (in an earlier Relation message) to its name now (None: a column
    dropped since, whose values no longer count); ``defaults`` what a row written before a column existed holds in
    it (the lake's initial default; absent: NULL)."""

    former_names: Mapping[str, str | None] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: The hot table's identity as the lake recorded it when its last round planned: the columns' layout then
    #: (``HotIdentity.type_ids``, ``last_column_id``), which a change stream aligns its Relation messages with (by
    #: column id, whatever the columns were called in between). None: not recorded.
    start: HotIdentity | None = None


@dataclass(frozen=True)
class InPlaceChanges:
    """Rows of the hot table updated and deleted so far, as the hot store counts them (PostgreSQL's
    ``pg_stat_user_tables``): cumulative counters the round compares with the last round's."""

    updated: int
    deleted: int
