"""The hot-store interface: what a round needs from any source of rows."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_tiering.core.planner import RangePlan, Split

if TYPE_CHECKING:  # pyarrow is imported where used: probing for new rows needs none of it (0.26 s of 0.28 s)
    import pyarrow as pa

Offsets = dict[str, Any]


@dataclass(frozen=True)
class WatermarkBlocker:
    """An open transaction that may still commit rows below the observed high watermark."""

    pid: int | None
    transaction_start: str | None
    age_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "transaction_start": self.transaction_start, "age_seconds": round(self.age_seconds, 1)}


@dataclass(frozen=True)
class SafeWatermark:
    """How far a round may tier without risking a row committed later below it.

    ``end`` is the safe end offset (``None``: nothing is safe beyond what the lake has).
    ``observed`` is the raw high watermark; when it is ahead of ``end``, ``blockers`` say why.
    ``candidate`` is an observation that becomes safe once its blockers have ended; the round
    keeps it in the state document and hands it back next time (a cache: losing it only delays).
    """

    end: Offsets | None
    observed: Offsets | None
    blockers: Sequence[WatermarkBlocker] = ()
    candidate: dict[str, Any] | None = None


class Source(ABC):
    """A hot store that a round reads from. Instances are pickled to Spark executors for ``read_split``.

    Every method may raise :class:`~airflow_provider_tiering.core.errors.SourceError` when the hot
    store is unreachable, the table or a column is missing, or a type cannot be tiered.
    """

    #: Human-readable name for messages (never contains credentials).
    display_name: str

    @abstractmethod
    def schema(self) -> pa.Schema:
        """The Arrow schema of the tiered columns, as written to the lake."""

    @abstractmethod
    def safe_watermark(self, committed: Offsets | None, candidate: dict[str, Any] | None) -> SafeWatermark:
        """The end offset this round may safely tier up to (DESIGN §4, safe high watermark)."""

    @abstractmethod
    def has_rows_after(self, committed: Offsets | None) -> bool:
        """Whether the hot store holds any row beyond ``committed`` (a cheap probe, safe or not)."""

    @abstractmethod
    def plan_range(self, start: Offsets | None, end: Offsets, max_rows: int) -> RangePlan:
        """Measure ``(start, end]`` and cap it at about ``max_rows`` rows."""

    @abstractmethod
    def cut_splits(self, plan: RangePlan, target_rows_per_split: int, parallelism: int) -> list[Split]:
        """Cut a planned range into splits of balanced estimated size; deterministic for equal input."""

    @abstractmethod
    def end_offsets(self, plan: RangePlan) -> Offsets:
        """The offsets the lake holds once ``plan`` is committed."""

    @abstractmethod
    def read_split(self, split: Split, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """Read one split as record batches of exactly ``schema``. Runs inside a Spark task; re-runnable."""

    def secrets(self) -> list[str]:
        """Credentials this source holds, so errors can be masked."""
        return []

    def bind_lake(self, table_location: str) -> None:
        """Called once the lake table exists, with its location (a source may keep offset logs there)."""
        return None

    def take_rejects(self) -> list[dict[str, Any]]:
        """Bad records set aside by the last ``read_split`` (``on_bad_record="side_table"``); emptied on read."""
        return []

    def after_commit(self, committed: Offsets) -> int:
        """Best-effort housekeeping once ``committed`` is in the lake (e.g. archive tiered files); returns a count."""
        return 0
