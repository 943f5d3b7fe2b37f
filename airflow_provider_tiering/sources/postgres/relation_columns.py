"""Where each column of a change stream's Relation message stands now: placed by its attribute number, not its name.

A Relation message describes the table as it was when the changes after it were made: its columns in attribute
order (``attnum``), dropped and generated ones left out, each with its name and type id then. Names change (a column
renamed twice between two rounds carries a name neither the table nor the lake ever knew); attribute numbers do not:
PostgreSQL keeps every ``attnum`` it gave, dropped columns included, and gives a column added later a higher one. So
the message's columns are an ordered selection of the table's attribute numbers, and which selection is known from:

* the layout the lake recorded when its last round planned (``HotIdentity.type_ids``, ``last_column_id``): the
  columns live then, with their type ids, and the highest number given by then. Every change the round decodes was
  made after it;
* the table's attributes now, dropped ones included (``pg_attribute``).

A column live then and now was live when the change was made; one live then and dropped now may or may not have been
dropped yet; a column numbered past the recorded highest one was added since, and the message has it exactly when it
was added before the change (columns added in number order) and not yet dropped. Each selection of that kind with as
many columns as the message, whose type ids agree with the ones known (now, for a live column; when recorded, for a
column live then), is a candidate. When every candidate gives each column of the message the same column now (or
none, for one dropped since), the changes under the message are placed by it. Otherwise (a column dropped and added
again under its name and type, with no change in between to tell when; a type changed in place, such as ``varchar``
to ``text``) their values cannot be told apart: only the key columns are placed, and the rows those changes touched
are read again by key from the hot table (``RelationColumns.placed`` False).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable
from airflow_provider_tiering.sources.change_stream.reduce import RelationColumns

#: Columns whose presence in a message is unknown (dropped since the lake's record, or added and dropped since),
#: past which the candidates are not enumerated (2^n of them): the changes are then read again by key.
MAX_UNSURE_COLUMNS = 12


@dataclass(frozen=True)
class Attribute:
    """One of the table's attributes now: its number, its name (None: dropped), its type id, and whether it is a
    generated column (never in a Relation message)."""

    number: int
    name: str | None
    type_id: int
    generated: bool = False


@dataclass(frozen=True)
class MessageColumn:
    """A column as a Relation message describes it."""

    name: str
    type_id: int


@dataclass(frozen=True)
class ColumnLayout:
    """The table's columns when the lake's last round planned (``start_types``: type id by attribute number of the
    columns a message carried then; ``start_last``: the highest attribute number given by then) and now."""

    start_types: Mapping[int, int]
    start_last: int
    now: Sequence[Attribute]
    table: str = "the table"

    def place(self, columns: Sequence[MessageColumn], key: Sequence[str]) -> RelationColumns:
        """Each of ``columns``' name now (see the module's description); ``key``: the merge key's columns (now).

        Raises:
            ChangeStreamUnavailable: not even the key columns can be placed (the rows cannot be read again).
        """
        live = {a.number: a for a in self.now if a.name is not None and not a.generated}
        candidates = set(self._candidates(columns, live))
        named = {tuple(live[n].name if n in live else None for n in found) for found in candidates}
        if len(named) == 1:
            return RelationColumns(next(iter(named)), placed=True)
        return RelationColumns(self._key_only(columns, key, live, candidates), placed=False)

    def _candidates(self, columns: Sequence[MessageColumn], live: Mapping[int, Attribute]) -> Iterator[tuple[int, ...]]:
        """The attribute numbers a message of ``columns`` may describe, each selection in number order."""
        dropped = {a.number for a in self.now if a.name is None}
        start = self.start_types
        always = [n for n in live if n in start]
        # Live now, numbered no higher than the record's highest, but not carried then (a generated column made a
        # plain one since): present or not.
        unsure_live = [n for n in live if n <= self.start_last and n not in start]
        gone = [n for n in start if n in dropped]
        added = sorted(n for n in live if n > self.start_last)
        added_gone = sorted(n for n in dropped if n > self.start_last)
        if len(unsure_live) + len(gone) + len(added_gone) > MAX_UNSURE_COLUMNS:
            return
        for upto in sorted({self.start_last, *added, *added_gone}):  # the highest number given when the change was made
            base = always + [n for n in added if n <= upto]
            optional = unsure_live + gone + [n for n in added_gone if n <= upto]
            wanted = len(columns) - len(base)
            if not 0 <= wanted <= len(optional):
                continue
            for extra in combinations(optional, wanted):
                found = tuple(sorted([*base, *extra]))
                if self._fits(found, columns, live):
                    yield found

    def _fits(self, found: tuple[int, ...], columns: Sequence[MessageColumn], live: Mapping[int, Attribute]) -> bool:
        for number, column in zip(found, columns, strict=True):
            if number in live and live[number].type_id != column.type_id:
                return False
            if number in self.start_types and self.start_types[number] != column.type_id:
                return False
        return True

    def _key_only(
        self,
        columns: Sequence[MessageColumn],
        key: Sequence[str],
        live: Mapping[int, Attribute],
        candidates: set[tuple[int, ...]],
    ) -> tuple[str | None, ...]:
        """The message's columns with only the key's named: where every candidate puts each key column, or, with no
        candidate at all, the one column of the message with its name and type now."""
        numbers = {a.name: n for n, a in live.items()}
        places: dict[int, str] = {}
        for name in key:
            number = numbers.get(name)
            if number is None:
                break
            if candidates:
                at = {found.index(number) if number in found else None for found in candidates}
            else:
                at = {i for i, c in enumerate(columns) if c.name == name and c.type_id == live[number].type_id}
            place = at.pop() if len(at) == 1 else None
            if place is None:
                break
            places[place] = name
        else:
            return tuple(places.get(i) for i in range(len(columns)))
        raise ChangeStreamUnavailable(
            f"{self.table}: a change in its stream describes the table's columns as "
            f"{[c.name for c in columns]}, in which its key {list(key)} cannot be found (the key's columns changed "
            "more than once between two rounds): the rows it changed cannot be read again. Load the table again: drop "
            "the lake table, then reset the table (the next round takes a new snapshot). Nothing was tiered"
        )
