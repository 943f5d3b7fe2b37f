from __future__ import annotations

import bisect
import random

from airflow_provider_tiering.core.planner import CursorDistribution, cut_splits, plan_range, stride_quantiles


def rows_per_split(values, splits):
    counts = []
    for split in splits:
        lo = 0 if split.lower is None else bisect.bisect_right(values, split.lower)
        counts.append(bisect.bisect_right(values, split.upper) - lo)
    return counts


def test_skewed_cursor_gives_balanced_splits():
    rng = random.Random(7)
    # 90% of the rows sit in 1% of the key range: cutting by key width would put them in one split.
    values = sorted([rng.randint(0, 10_000) for _ in range(9_000)] + [rng.randint(0, 1_000_000) for _ in range(1_000)])
    distribution = CursorDistribution(None, values[-1], len(values), stride_quantiles(values))
    splits = cut_splits(plan_range(distribution, max_rows_per_round=10**9), target_rows_per_split=1_000)
    counts = rows_per_split(values, splits)
    assert sum(counts) == len(values)
    assert len(splits) == 10
    assert max(counts) <= 1.3 * (len(values) / len(splits))


def test_splits_are_contiguous_and_cover_the_range():
    values = list(range(1, 1001))
    distribution = CursorDistribution(0, 1000, 1000, stride_quantiles(values))
    splits = cut_splits(plan_range(distribution, 10**9), target_rows_per_split=100, parallelism=4)
    assert splits[0].lower == 0 and splits[-1].upper == 1000
    assert all(a.upper == b.lower for a, b in zip(splits, splits[1:]))
    assert [s.index for s in splits] == list(range(len(splits)))


def test_round_is_capped_by_rows():
    values = list(range(1, 100_001))
    distribution = CursorDistribution(None, 100_000, len(values), stride_quantiles(values))
    plan = plan_range(distribution, max_rows_per_round=25_000)
    assert plan.capped and plan.remaining_rows == 75_000
    assert 23_000 <= plan.upper <= 27_000
    assert plan_range(distribution, max_rows_per_round=200_000).remaining_rows == 0
    counts = rows_per_split(values, cut_splits(plan, 5_000))
    assert abs(sum(counts) - plan.upper) == 0
    assert max(counts) <= 1.3 * 5_000


def test_equal_cursor_values_are_never_cut_apart():
    values = [5] * 500 + [6] * 500
    distribution = CursorDistribution(None, 6, len(values), stride_quantiles(values))
    splits = cut_splits(plan_range(distribution, 10**9), target_rows_per_split=100)
    assert sum(rows_per_split(values, splits)) == 1000
    assert len(splits) == 2


def test_empty_range_has_no_splits():
    plan = plan_range(CursorDistribution(10, 10, 0), 100)
    assert plan.is_empty and cut_splits(plan, 10) == []


def test_split_count_is_a_multiple_of_the_parallelism():
    values = list(range(1, 6_001))
    distribution = CursorDistribution(None, 6_000, len(values), stride_quantiles(values))
    splits = cut_splits(plan_range(distribution, 10**9), target_rows_per_split=850, parallelism=2)
    assert len(splits) == 8  # ceil(6000 / 850) = 8 is even already
    splits = cut_splits(plan_range(distribution, 10**9), target_rows_per_split=1_000, parallelism=4)
    assert len(splits) == 8  # 6 rounded up to a multiple of 4
    assert sum(rows_per_split(values, splits)) == 6_000
