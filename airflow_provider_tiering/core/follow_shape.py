"""How a round follows its hot table when the table's shape or identity changed, or refuses (``docs/design.md``,
"When the hot table changes"). Run before planning, after the lake table exists.

1. **Another table.** A hot table whose id differs from the one the lake recorded (PostgreSQL: dropped and created
   again) is refused (:class:`HotTableReplaced`, non-retryable) with the ways out, unless an operator chose to
   continue with it (``reset --adopt-hot-table``): the round then reads it from its start, keeping the lake's rows.
2. **Rows replaced under the same name.** When the table's storage changed (TRUNCATE, VACUUM FULL, a rewriting ALTER
   TABLE; SQLite: any DDL), the rows the lake holds are looked at: how many lie at or below its offsets, and the
   newest of them, value for value. More rows than the lake holds, or other newest rows, mean other rows below the
   offsets (truncated and reloaded, re-created): an append table refuses, a merge table reads the whole table again
   and merges it (a reload), and a merge table reconciles its keys in any case (rows deleted with a TRUNCATE). A
   change-stream table gets its truncates from the stream.
3. **Columns** (``Lake.follow_shape``): renamed, added, promoted, dropped. An added column's values in the rows the
   lake holds come from the hot store (``Source.added_column_values``): NULL in all (nothing to do), one value in all
   (it becomes the field's Iceberg initial default, and with ``lake.backfill_added_columns`` is also written into
   the files), or a value of their own in each (an append table refuses; a merge or change-stream table reloads). A
   promoted column of a rewritten table is compared with the lake's values (an ``ALTER ... TYPE ... USING`` may have
   changed them): an append table refuses when they differ, a merge table reloads; a change-stream table reads the
   rows whose values differ again by key, with its changes.
   A change stream places the columns of its changes by column id, aligned with the layout the lake recorded, so a
   name reused for another column needs nothing more (where no layout was recorded, by an earlier version, it
   reloads: its stream would map the name to the wrong column).

A reload is recorded in the lake with the schema change that needs it (``LakeShape.pending_reload``), so a round
that dies before committing it leaves it pending; the commit of the reload clears it.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic

from airflow_provider_tiering.core.errors import HotTableReplaced, SchemaConflict
from airflow_provider_tiering.core.offsets import Offsets
from airflow_provider_tiering.core.ports import Lake, LakeCommit, MergeKey, PlanT, Source, SplitT, SplitWriter
from airflow_provider_tiering.core.shape import (
    AddedValuesKind,
    ColumnHistory,
    HotIdentity,
    LakeShape,
    ShapeChanges,
    ShapeDecision,
)
from airflow_provider_tiering.core.spec import TableSpec
from airflow_provider_tiering.core.state import TableState

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class Mode(enum.StrEnum):
    """How a table's rounds write: what a change of its hot table can be followed with."""

    APPEND = "append"
    MERGE = "merge"
    CHANGE_STREAM = "change_stream"

    @classmethod
    def of(cls, key: MergeKey | None) -> Mode:
        if key is None:
            return cls.APPEND
        return cls.CHANGE_STREAM if key.from_change_stream else cls.MERGE


@dataclass(frozen=True)
class ShapeOutcome:
    """What following the hot table's shape decided for this round."""

    #: The hot table's identity as this round plans with it: its commit records it.
    identity: HotIdentity
    #: Whether the lake's record of the identity differs from ``identity`` (recorded at the round's end).
    identity_changed: bool = False
    #: Why this round reads the whole hot table again and merges it (None: it does not).
    reload: str | None = None
    #: The hot table is another one an operator chose to continue with: read from its start, the lake's rows kept.
    adopting: bool = False
    #: This merge round also reconciles its keys (the table's storage was replaced: a TRUNCATE deletes rows
    #: without a change each).
    reconcile: bool = False


def _primitive(value: Any) -> bool:
    """Whether a value can be an Iceberg initial default (a primitive type's; not a list or a map)."""
    return not isinstance(value, (list, tuple, dict))


@dataclass
class _Follow(Generic[PlanT, SplitT]):
    """One round's following of its hot table (see the module's description)."""

    spec: TableSpec
    source: Source[PlanT, SplitT]
    lake: Lake
    state: TableState
    schema: pa.Schema
    key: MergeKey | None
    committed: LakeCommit | None
    now: datetime
    #: A change stream's rewritten table: the rows that differ from the lake's, added columns included, are read again
    #: by key in this round (``_rewritten_rows_read_again``).
    rows_read_again: bool = False

    @property
    def mode(self) -> Mode:
        return Mode.of(self.key)

    @property
    def lake_name(self) -> str:
        return f"{self.spec.lake.namespace}.{self.spec.lake.table}"

    @property
    def tiered(self) -> Offsets | None:
        """The lake's committed offsets: what the rows it already holds reach up to (None: it holds none)."""
        return None if self.committed is None else self.committed.end_offsets

    def run(self, identity: HotIdentity, writer: SplitWriter) -> ShapeOutcome:
        recorded = self.lake.shape() or LakeShape()
        previous = recorded.identity
        adopting = self._adopted(identity)
        if not adopting:
            self._refuse_another_table(previous, identity)
        storage_changed = previous is None or (
            identity.storage is not None and previous.storage is not None and previous.storage != identity.storage
        )
        replaced = self.committed is not None and not adopting and previous is not None and storage_changed

        def decide(changes: ShapeChanges) -> ShapeDecision:
            rows_replaced = self._rows_still_tiered(recorded, identity, changes) if replaced else None
            decision = self._decide(changes, recorded, storage_changed, adopting)
            why = [r for r in (rows_replaced, decision.reload) if r and r != recorded.pending_reload]
            return ShapeDecision(decision.defaults, "; ".join(why) or None, decision.backfill)

        key_columns = () if self.key is None else self.key.columns
        declared = self.spec.source.declared_column_changes()
        changes = self.lake.follow_shape(
            self.schema,
            identity,
            declared,
            decide,
            key=key_columns,
            by_name=adopting,
            partial=self.spec.source.columns_may_be_absent,
        )
        pending = self.lake.shape() or LakeShape()
        reload = pending.pending_reload
        if changes or reload:
            self.state.shape_change = {
                "at": self.now.isoformat(),
                "changes": changes.describe() or None,
                "reload": reload,
            }
            log.info(
                "%s: the lake follows its hot table: %s%s",
                self.spec.name,
                changes.describe() or "no change of columns",
                f"; the whole table is read again ({reload})" if reload else "",
            )
        if pending.pending_backfill:
            rewritten = self.lake.backfill(
                writer, target_file_bytes=self.spec.target_file_bytes, table_name=self.spec.name
            )
            log.info(
                "%s: added columns' defaults %s written into %d lake files",
                self.spec.name,
                list(pending.pending_backfill),
                rewritten,
            )
        self.source.bind_column_history(ColumnHistory(pending.former_names, pending.defaults, recorded.identity))
        return ShapeOutcome(
            identity,
            identity_changed=not identity.same_as(previous),
            reload=reload if not adopting else None,
            adopting=adopting,
            reconcile=replaced and self.mode is Mode.MERGE,
        )

    # -- 1. another table --------------------------------------------------------------------------
    def _refuse_another_table(self, previous: HotIdentity | None, identity: HotIdentity) -> None:
        if previous is None or previous.table is None or identity.table is None or previous.table == identity.table:
            return
        self._refuse(
            f"{self.source.display_name} is not the table lake table {self.lake_name} was tiered from: its id is "
            f"{identity.table}, the lake's rows came from table id {previous.table} (the table was dropped and "
            "created again)",
            identity,
        )

    def _adopted(self, identity: HotIdentity) -> bool:
        """Whether an operator chose to continue with this very hot table (the one a round refused, unchanged since)."""
        return identity.same_as(self.state.adopt_hot_table)

    def _refuse(self, what: str, identity: HotIdentity) -> None:
        self.state.replaced_hot_table = identity.to_json()
        self.state.adopt_hot_table = None
        raise HotTableReplaced(
            f"{what}. Its rows are not the ones the lake holds, and tiering on would mix them unseen. Ways out: drop "
            f"lake table {self.lake_name} and reset the table to load the hot table again; or keep the lake's rows as "
            f"history and tier the new table from its start: airflow tiering reset {self.spec.name} "
            "--adopt-hot-table. Nothing was tiered"
        )

    # -- 2. rows replaced under the same name ------------------------------------------------------
    def _rows_still_tiered(self, recorded: LakeShape, identity: HotIdentity, changes: ShapeChanges) -> str | None:
        """After the storage was replaced: None when the rows the lake holds are still the table's; else why not (an
        append table refuses, a merge or change-stream table reloads).

        Where the store tells when rows were written (PostgreSQL), rows all older than the lake's last round mean the
        table was only moved (VACUUM FULL, CLUSTER), and rows all newer that it was rewritten or reloaded: a merge or
        change-stream table then reloads, unless a promotion explains it (checked column by column) or, for a change
        stream, a TRUNCATE it refuses. Elsewhere, and for an append table, the rows are looked at (``_looked_at``)."""
        tiered = self.tiered
        if tiered is None or recorded.pending_reload:  # a reload pending reads the whole table and its keys anyway
            return None
        horizon = None if recorded.identity is None else recorded.identity.horizon
        streams = self.mode is Mode.CHANGE_STREAM
        rewritten = None if horizon is None else self.source.rows_rewritten(horizon, None if streams else tiered)
        if rewritten is False:
            return None
        what = (
            f"{self.source.display_name} was rewritten, truncated or replaced since the last round (storage "
            f"{(recorded.identity or HotIdentity()).storage} -> {identity.storage})"
        )
        if streams:
            if not rewritten or self.source.truncated_since(tiered):
                return None
            return self._rewritten_rows_read_again(tiered, recorded, changes, what)
        if rewritten and self.mode is Mode.MERGE and not changes.widened:
            return f"{what}: every row at or below the lake's offsets was written since, without a change each"
        return self._looked_at(tiered, recorded, identity, changes, what)

    def _rewritten_rows_read_again(
        self, tiered: Offsets, recorded: LakeShape, changes: ShapeChanges, what: str
    ) -> str | None:
        """A change stream's table whose every row was written since without a change each (a promotion, an ``ALTER
        TABLE ... TYPE ... USING``, a column dropped after one): its rows are compared with the lake's in the columns
        both have, and those that differ are read again by key with the round's changes (the stream carries nothing
        of a rewrite). None when the source can; else why the whole table is read again."""
        why = f"{what}: every row was written since, without a change each (an ALTER TABLE ... USING)"
        if self.key is None:
            return why
        lake_of = {hot: lake for lake, hot in changes.renamed}
        gone = {*changes.dropped, *(old for old, _ in changes.displaced)}
        # Each hot column's lake column; an added one's rows are compared with NULL (its values came with the
        # rewrite, or with changes the stream carries: read again either way).
        lake_names: dict[str, str | None] = {
            column: None if column in changes.added else lake_of.get(column, column)
            for column in self.schema.names
            if column in changes.added
            or (lake_of.get(column, column) in recorded.columns and lake_of.get(column, column) not in gone)
        }
        rows = self.source.tiered_column_values(list(lake_names), tiered)
        if rows is None:
            return why
        differing = self.lake.keys_not_held(rows, self.key.columns, lake_names=lake_names)
        if differing.num_rows and not self.source.read_again(differing):
            return why
        self.rows_read_again = True
        log.info(
            "%s: %s; %d of its rows differ from the lake's and are read again by key", self.spec.name, what,
            differing.num_rows,
        )  # fmt: skip
        return None

    def _looked_at(
        self, tiered: Offsets, recorded: LakeShape, identity: HotIdentity, changes: ShapeChanges, what: str
    ) -> str | None:
        """How many rows lie at or below the lake's offsets, against how many the lake holds, and the newest of them
        against the lake's, in the columns the change of shape leaves alone."""
        sample = self.source.tiered_sample(tiered)
        if sample is None:
            return None
        held = self.lake.total_rows()
        why = None
        if sample.count > held:
            why = (
                f"{sample.count} rows lie at or below the lake's offsets {tiered}, but the lake "
                f"holds {held}: rows arrived below them"
            )
        elif sample.rows is not None and sample.rows.num_rows and sample.cursor is not None:
            moved = {*changes.added, *(n for n, _, _ in changes.widened), *(n for _, n in changes.renamed)}
            common = [n for n in sample.rows.schema.names if n in recorded.columns and n not in moved]
            missing = self.lake.rows_not_held(sample.rows.select(common), cursor=(sample.column, sample.cursor))
            if missing:
                why = (
                    f"{missing} of its newest rows at or below the lake's offsets ({sample.column} = "
                    f"{sample.cursor}) differ from the lake's"
                )
        if why is None:
            return None
        if self.mode is Mode.APPEND:
            self._refuse(f"{what}, and {why} (truncated and reloaded, or dropped and created again)", identity)
        return f"{what}, and {why}"

    # -- 3. columns --------------------------------------------------------------------------------
    def _decide(self, changes: ShapeChanges, recorded: LakeShape, rewritten: bool, adopting: bool) -> ShapeDecision:
        holds_rows = self.committed is not None and not adopting
        tiered = self.tiered
        defaults: dict[str, Any] = {}
        reload: list[str] = []
        for column in changes.added if holds_rows else ():
            values = self.source.added_column_values(column, tiered, rewritten)
            if values.kind is AddedValuesKind.NULL:
                continue
            if values.kind is AddedValuesKind.CONSTANT and _primitive(values.value):
                defaults[column] = values.value
                continue
            if self.rows_read_again:  # the rows holding a value in it are read again by key: NULL for the others
                continue
            what = f"column {column!r} was added with a value of its own in the rows the lake holds ({values.how})"
            if self.mode is Mode.APPEND:
                raise SchemaConflict(
                    f"{self.source.display_name}: {what}, which an append table cannot read again (its rows have no "
                    f"key). Ways out: leave the column out (source.columns), tier the table by key (merge), or drop "
                    f"lake table {self.lake_name} and reset the table to load it again. Nothing was committed"
                )
            reload.append(what)
        if changes.widened and holds_rows and rewritten:
            reload.extend(self._promoted_values(changes, recorded))
        aligned = recorded.identity is not None and bool(recorded.identity.type_ids)
        if self.mode is Mode.CHANGE_STREAM and holds_rows and not aligned:
            # Without a recorded layout the stream's columns are placed by name (``Source.bind_column_history``).
            reused = self._reused_names(changes, recorded)
            if reused:
                reload.append(
                    f"column name(s) {reused} now name other columns than in changes made before, which the change "
                    "stream cannot tell apart"
                )
        return ShapeDecision(
            defaults, "; ".join(reload) or None, backfill=self.spec.lake.backfill_added_columns and bool(defaults)
        )

    def _promoted_values(self, changes: ShapeChanges, recorded: LakeShape) -> list[str]:
        """A promoted column of a rewritten table: its values in the rows the lake holds, compared with the lake's
        (an ``ALTER TABLE ... TYPE ... USING`` may change them; a plain promotion never does). A change stream's rows
        were compared already, every column (``_rewritten_rows_read_again``), where the lake recorded an identity."""
        promoted = [name for name, _, _ in changes.widened]
        what = f"column(s) {promoted} changed type ({'; '.join(f'{n} {a} -> {b}' for n, a, b in changes.widened)})"
        tiered = self.tiered
        if self.mode is Mode.CHANGE_STREAM or tiered is None:
            compared = self.mode is Mode.CHANGE_STREAM and recorded.identity is not None
            return [] if compared else [f"{what} and the table was rewritten, which the change stream does not carry"]
        by = list(self.key.columns) if self.key is not None else [str(self.spec.source.cursor())]
        columns = list(dict.fromkeys([*by, *promoted]))  # a promoted key or cursor once
        rows = self.source.tiered_column_values(columns, tiered)
        if rows is None:
            return []
        former = {new: old for old, new in changes.renamed}
        missing = self.lake.rows_not_held(rows, lake_names={c: former.get(c, c) for c in rows.schema.names})
        if not missing:
            return []
        if self.mode is Mode.APPEND:
            raise SchemaConflict(
                f"{self.source.display_name}: {what}, and {missing} of the rows the lake holds now have other values "
                f"in them than the lake's (an ALTER TABLE ... USING rewrote them): an append table cannot read them "
                f"again. Drop lake table {self.lake_name} and reset the table to load it again. Nothing was committed"
            )
        return [f"{what}, and {missing} of the rows the lake holds now have other values in them"]

    @staticmethod
    def _reused_names(changes: ShapeChanges, recorded: LakeShape) -> list[str]:
        """Names that a change of shape gives to another column than the one they named before."""
        taken = [new for _, new in changes.renamed] + list(changes.added)
        renamed_from = {old for old, _ in changes.renamed}
        reused = {old for old, _ in changes.displaced}
        # a name that meant another column before this change, or that this change takes from another column
        reused |= {n for n in taken if recorded.former_names.get(n, n) != n or n in renamed_from}
        return sorted(reused)


def follow_hot_shape(
    spec: TableSpec,
    source: Source[PlanT, SplitT],
    lake: Lake,
    state: TableState,
    schema: pa.Schema,
    key: MergeKey | None,
    committed: LakeCommit | None,
    writer: SplitWriter,
    now: datetime,
    identity: HotIdentity,
) -> ShapeOutcome:
    """Follow the hot table's shape and identity into the lake, or refuse (see the module's description).
    ``identity`` is the hot table's as the source told it when the round started; ``writer`` backfills added
    columns' defaults where the lake asks for it.

    Raises:
        HotTableReplaced: the hot table is another one than the lake's rows came from (non-retryable); its identity
            is kept in ``state.replaced_hot_table`` for an operator to continue with.
        SchemaConflict: a change the lake cannot follow, or values an append table cannot read again; nothing was
            committed.
    """
    return _Follow(spec, source, lake, state, schema, key, committed, now).run(identity, writer)
