"""A change stream's plan and splits: a first load, or the transactions committed between two log positions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_provider_tiering.sources.change_stream.reduce import ChangeSet


@dataclass(frozen=True)
class ChangePlan:
    """A round of a change-stream table: the first load (``load``: the database's description of its snapshot), or
    the transactions committed in ``(start, end]``."""

    end: int
    start: int | None = None
    changes: int = 0
    #: Transactions in the window the stream skips (eviction's): a round of none but these still moves the lake's
    #: position past them (a slot follows the lake, and is never ahead of it).
    skipped: int = 0
    #: What the first load reads, the database's own (picklable: Spark tasks read it); None: a round of changes.
    load: object | None = None
    #: More changes were waiting than a round takes (``max_rows_per_round``, or a bound on the log it reads).
    capped: bool = False
    #: The log between the round's end and the end it planned against, when capped: what is left.
    backlog_bytes: int = 0
    #: No change of the table, but the log since the lake's position grew past ``IDLE_ADVANCE_BYTES``: the round
    #: commits only the new position.
    advance: bool = False
    #: The round's own state, kept in this process: the session a first load's snapshot lives in (closed once the
    #: load is written), and the changes the plan read (a split read here is typed from them, without reading the
    #: log again).
    session: Any = field(default=None, compare=False, repr=False)
    found: ChangeSet | None = field(default=None, compare=False, repr=False)

    @property
    def is_empty(self) -> bool:
        return self.load is None and self.changes == 0 and self.skipped == 0 and not self.advance

    @property
    def backlog(self) -> int:
        """Changes left for later rounds, estimated from this round's changes per byte of log (the log is not read
        ahead to count them)."""
        if not self.capped:
            return 0
        span = max(1, self.end - (self.start or 0))
        return max(1, round(self.changes * self.backlog_bytes / span))


@dataclass(frozen=True)
class ChangeSplit:
    """One split of a round: a part of the first load (``load``, the database's own), or the round's changes."""

    index: int
    end: int
    start: int | None = None
    load: object | None = None
