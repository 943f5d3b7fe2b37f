"""The plans and splits of cursor sources (SQL tables): a round's cursor range, cut into splits of balanced
estimated size.

Splits are balanced by rows, from quantiles of the cursor inside the range, never by key width:
a skewed cursor (most rows in a narrow band of values) still gives splits of similar size.
Pure functions: the source measures, the planner decides. :class:`RangePlan` and :class:`RangeSplit` are the
``Plan`` and ``Split`` of every cursor source (``core/ports.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Cursor values are JSON-native (int, float or an ISO-8601 string with a fixed format).
CursorValue = Any
#: Fractions at which sources measure cursor quantiles: enough for 255 balanced splits.
QUANTILE_FRACTIONS: tuple[float, ...] = tuple(i / 256 for i in range(1, 256))


@dataclass(frozen=True)
class CursorDistribution:
    """What the source measured about the rows in ``(lower, upper]``.

    ``quantiles[i]`` is the cursor value below or at which a fraction ``(i + 1) / (len + 1)``
    of the rows lie; an exact source may give many, a sampling source fewer.
    """

    lower: CursorValue | None
    upper: CursorValue
    estimated_rows: int
    quantiles: Sequence[CursorValue] = ()


@dataclass(frozen=True)
class RangeSplit:
    """One slice of a round, read and written by one Spark task: cursor in ``(lower, upper]``."""

    index: int
    lower: CursorValue | None
    upper: CursorValue
    estimated_rows: int


@dataclass(frozen=True)
class RangePlan:
    """The cursor range a round tiers, after the per-round cap."""

    lower: CursorValue | None
    upper: CursorValue
    estimated_rows: int
    capped: bool
    quantiles: Sequence[CursorValue] = ()
    #: Estimated rows beyond ``upper`` that the cap left for later rounds (0 when not capped).
    remaining_rows: int = 0

    @property
    def is_empty(self) -> bool:
        return self.estimated_rows == 0

    @property
    def backlog(self) -> int:
        return self.remaining_rows


def stride_quantiles(sorted_values: Sequence[Any], fractions: Sequence[float] = QUANTILE_FRACTIONS) -> list[Any]:
    """Exact quantiles of an already sorted sequence."""
    if not sorted_values:
        return []
    last = len(sorted_values) - 1
    return [sorted_values[min(last, max(0, math.ceil(f * len(sorted_values)) - 1))] for f in fractions]


def _quantile(quantiles: Sequence[CursorValue], fraction: float) -> CursorValue | None:
    if not quantiles:
        return None
    position = fraction * (len(quantiles) + 1) - 1
    index = min(max(int(round(position)), 0), len(quantiles) - 1)
    return quantiles[index]


def plan_range(distribution: CursorDistribution, max_rows_per_round: int) -> RangePlan:
    """Decide the range of this round: all of ``(lower, upper]``, or a prefix of about ``max_rows_per_round`` rows."""
    rows = distribution.estimated_rows
    if rows <= 0:
        return RangePlan(distribution.lower, distribution.lower, 0, capped=False)
    if rows <= max_rows_per_round or not distribution.quantiles:
        return RangePlan(distribution.lower, distribution.upper, rows, False, tuple(distribution.quantiles))
    fraction = max_rows_per_round / rows
    capped_upper = _quantile(distribution.quantiles, fraction)
    if capped_upper is None or capped_upper == distribution.lower:
        return RangePlan(distribution.lower, distribution.upper, rows, False, tuple(distribution.quantiles))
    # The quantiles below the cap stay evenly spaced in rows, so they serve to cut the capped range.
    kept = tuple(q for q in distribution.quantiles if q < capped_upper)
    return RangePlan(distribution.lower, capped_upper, max_rows_per_round, True, kept, rows - max_rows_per_round)


def cut_splits(plan: RangePlan, target_rows_per_split: int, parallelism: int = 1) -> list[RangeSplit]:
    """Cut ``plan`` into contiguous splits of about equal estimated rows.

    The count is a multiple of ``parallelism`` (the Spark task slots), so no wave of tasks runs
    half-empty: ``parallelism * ceil(rows / (target_rows_per_split * parallelism))``. There are
    fewer when the cursor has fewer distinct quantiles than that (equal values are never cut apart).
    """
    if plan.is_empty:
        return []
    slots = max(1, parallelism)
    wanted = slots * math.ceil(plan.estimated_rows / (target_rows_per_split * slots))
    boundaries: list[CursorValue] = []
    for k in range(1, wanted):
        value = _quantile(plan.quantiles, k / wanted)
        if value is None:
            break
        if value == plan.upper or (plan.lower is not None and value <= plan.lower):
            continue
        if boundaries and value <= boundaries[-1]:
            continue
        boundaries.append(value)
    edges = [plan.lower, *boundaries, plan.upper]
    count = len(edges) - 1
    per_split = max(1, plan.estimated_rows // count)
    return [RangeSplit(i, edges[i], edges[i + 1], per_split) for i in range(count)]
