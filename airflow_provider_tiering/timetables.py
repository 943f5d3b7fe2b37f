"""``StaggeredInterval``: a run every fixed interval, at a phase of the DAG's own within it.

Airflow's ``timedelta`` schedule puts every DAG of the same interval on the same instants (multiples of it since
1970), so a hundred tables due every five minutes would all queue at once, every five minutes, and wait behind one
another and ahead of a stream group's reader. A table's DAG runs instead at ``phase + k * every`` (since 1970),
its phase spread over the interval by its DAG id (:func:`phase_of`): the same instants every time, each table's
own. Registered by the provider's plugin, as Airflow requires of a timetable it did not ship.
"""

from __future__ import annotations

import calendar
import hashlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.timetables.base import DagRunInfo, DataInterval, Timetable
from pendulum import UTC, DateTime

if TYPE_CHECKING:
    from airflow.timetables.base import TimeRestriction


def phase_of(dag_id: str, every: timedelta) -> timedelta:
    """Where in each interval ``dag_id``'s runs fall: its id's hash spread over ``every``, in whole seconds."""
    seconds = int(every.total_seconds())
    if seconds <= 1:
        return timedelta(0)
    return timedelta(seconds=int(hashlib.sha1(dag_id.encode()).hexdigest()[:12], 16) % seconds)


class StaggeredInterval(Timetable):
    """Every ``every``, at ``phase`` within it (see the module's description). A run covers the interval before
    it. A new DAG's first run comes at once (as with a ``timedelta`` schedule), the next at the first instant of its
    grid a whole interval later, then one every interval; without catch-up, a scheduler that was down runs the
    latest instant passed, not the ones it missed."""

    periodic = True

    def __init__(self, every: timedelta, phase: timedelta = timedelta(0)) -> None:
        self.every = every
        self.phase = timedelta(seconds=phase.total_seconds() % every.total_seconds()) if every > timedelta(0) else phase
        self.description = f"every {every}, at +{self.phase} within it"

    @property
    def summary(self) -> str:
        return f"{self.every} (+{self.phase})"

    def validate(self) -> None:
        from airflow.exceptions import AirflowTimetableInvalid

        if self.every <= timedelta(0):
            raise AirflowTimetableInvalid("the interval must be positive")

    def serialize(self) -> dict[str, Any]:
        return {"every": self.every.total_seconds(), "phase": self.phase.total_seconds()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        return cls(timedelta(seconds=data["every"]), timedelta(seconds=data["phase"]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StaggeredInterval):
            return NotImplemented
        return (self.every, self.phase) == (other.every, other.phase)

    def __hash__(self) -> int:
        return hash((self.every, self.phase))

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        return DataInterval(start=run_after - self.every, end=run_after)

    def next_dagrun_info(
        self, *, last_automated_data_interval: DataInterval | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        now = self.now()
        last = last_automated_data_interval
        if last is not None:  # the first instant of its grid a whole interval after the last run
            end = self._boundary(last.end + self.every, up=True)
        elif restriction.catchup and restriction.earliest is not None:
            end = self._boundary(restriction.earliest + self.every, up=True)
        else:  # a new DAG runs at once, as with a timedelta schedule; then on its grid
            end = now
        if not restriction.catchup and last is not None:  # the latest instant passed, not the ones missed before it
            end = max(end, self._boundary(now, up=False))
        if restriction.latest is not None and end - self.every > restriction.latest:
            return None
        return DagRunInfo.interval(start=end - self.every, end=end)

    def now(self) -> DateTime:
        return DateTime.now(UTC)

    def _boundary(self, at: DateTime, *, up: bool) -> DateTime:
        """The instant of the grid ``phase + k * every`` at or before ``at`` (at or after it: ``up``)."""
        # In whole microseconds: a float division would put an instant on the grid a hair past it, a run skipped.
        every, phase = _microseconds(self.every), _microseconds(self.phase)
        since = calendar.timegm(at.utctimetuple()) * 1_000_000 + at.microsecond - phase
        steps = -(-since // every) if up else since // every
        total = steps * every + phase
        return DateTime.fromtimestamp(total // 1_000_000, tz=UTC).add(microseconds=total % 1_000_000)


def _microseconds(span: timedelta) -> int:
    return span // timedelta(microseconds=1)
