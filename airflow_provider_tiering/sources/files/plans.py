"""The plans and splits of a landing zone: files to tier, and files bin-packed by size into splits."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_provider_tiering.core.offsets import Offsets, SafeEnd
from airflow_provider_tiering.sources.files.listing import LandedFile


@dataclass(frozen=True)
class FilePlan:
    """A round of a landing zone: ``files`` to tier, oldest first, from the committed offsets ``start``.

    ``end`` is the (opaque) safe end the watermark saw; ``left`` counts the complete files that
    ``max_files_per_round`` left for later rounds.
    """

    start: Offsets | None
    end: SafeEnd
    files: tuple[LandedFile, ...]
    left: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.files

    @property
    def backlog(self) -> int:
        return self.left

    @property
    def capped(self) -> bool:
        return self.left > 0


@dataclass(frozen=True)
class FileSplit:
    """The files one Spark task reads, oldest first."""

    index: int
    files: tuple[LandedFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def bin_pack(files: Sequence[LandedFile], target_bytes_per_split: int, parallelism: int) -> list[FileSplit]:
    """Bin-pack files by bytes (largest first into the least-loaded split).

    The count is ``parallelism * ceil(bytes / (target_bytes_per_split * parallelism))``, at most one
    split per file.
    """
    if not files:
        return []
    slots = max(1, parallelism)
    total = sum(f.size for f in files)
    wanted = slots * math.ceil(max(total, 1) / (target_bytes_per_split * slots))
    count = min(wanted, len(files))
    bins: list[list[LandedFile]] = [[] for _ in range(count)]
    loads = [(0, i) for i in range(count)]
    for landed in sorted(files, key=lambda f: (-f.size, f.path)):
        load, index = heapq.heappop(loads)
        bins[index].append(landed)
        heapq.heappush(loads, (load + landed.size, index))
    return [FileSplit(i, tuple(sorted(b, key=lambda f: (f.mtime_ns, f.path)))) for i, b in enumerate(bins)]
