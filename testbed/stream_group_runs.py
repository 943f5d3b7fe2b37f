"""Running a stream group's DAGs under a real Airflow (``testbed/stream_group_dags.py``'s file): the reader's DAG,
then the DAGs of the tables it changed, back to back, each run waited for; the e2e tests of PostgreSQL's and
MariaDB's groups share it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from testbed.airflow_cluster import POLL_SECONDS, AirflowCluster


class GroupRuns:
    """The DAGs of one stream group: ``<dag_group>.<stream>`` reads, ``<dag_group>.<table>`` applies."""

    def __init__(self, af: AirflowCluster, dag_group: str, stream: str) -> None:
        self.af, self.dag_group, self.stream = af, dag_group, stream

    def dag(self, name: str) -> str:
        return f"{self.dag_group}.{name}"

    def settled(self, dag_ids: Sequence[str], timeout: float = 600, *, first_runs: bool = False) -> None:
        """Wait until no run of these DAGs is queued or running; with ``first_runs``, until each one's first
        scheduled run (which its creation starts, a scheduler loop after it was parsed) has been and gone. One
        request a second for all of them: a request per DAG kept a 20-table group's api-server busy."""
        deadline = time.monotonic() + timeout
        not_started = set(dag_ids) if first_runs else set()
        while time.monotonic() < deadline:
            if not_started:
                not_started -= {run["dag_id"] for run in self._runs(not_started)}
            busy = not_started | {run["dag_id"] for run in self._runs(dag_ids, ["queued", "running"])}
            if not busy:
                return
            time.sleep(POLL_SECONDS)
        raise AssertionError(f"runs of {sorted(busy)} still active (or not started) after {timeout:.0f} s")

    def _runs(self, dag_ids: Collection[str], states: Sequence[str] = ()) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"dag_ids": sorted(dag_ids), "page_limit": 1000}
        if states:
            body["states"] = list(states)
        return list(self.af.post("/api/v2/dags/~/dagRuns/list", json=body)["dag_runs"])

    def run(self, name: str, timeout: float = 600) -> tuple[str, str | None]:
        """Trigger a run of ``name``'s DAG (the reader's: the stream's name) and wait; its outcome and its task's."""
        dag_id = self.dag(name)
        self.settled([dag_id], timeout)
        run_id = self.af.trigger_dag(dag_id)
        outcome = self.af.wait_for_run(dag_id, run_id, timeout=timeout)
        states = self.af.task_instances(dag_id, run_id)
        return outcome, next(iter(states.values()), None)

    def read(self) -> str | None:
        """A run of the reader; its task's outcome."""
        return self.run(self.stream)[1]

    def tier(self, tables: Sequence[str]) -> dict[str, str | None]:
        """A run of each table's DAG, at once; each one's task outcome."""
        started = {}
        for table in tables:
            dag_id = self.dag(table)
            self.settled([dag_id])
            started[table] = (dag_id, self.af.trigger_dag(dag_id))
        found = {}
        for table, (dag_id, run_id) in started.items():
            self.af.wait_for_run(dag_id, run_id, timeout=600)
            found[table] = next(iter(self.af.task_instances(dag_id, run_id).values()), None)
        return found


class Writers:
    """A writer per table (``ChangingTable``-like sessions, from ``open_table``), changing rows (updates, deletes,
    key changes, re-inserts) until stopped; each writer inserts keys of a range of its own."""

    started = 0

    def __init__(self, open_table: Callable[[str, int], Any], tables: Sequence[str]) -> None:
        self.hot = [open_table(t, 500 + n) for n, t in enumerate(tables)]
        for hot in self.hot:
            Writers.started += 1
            hot.next_id = 1_000_000 * Writers.started
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for hot in self.hot:
                hot.random_changes(3)
            time.sleep(0.05)

    def __enter__(self) -> Writers:
        self.thread.start()
        return self

    def counts(self) -> dict[str, int]:
        """The kinds of change the writers made (inserts, updates, key changes, deletes, re-inserts...), in all."""
        found: dict[str, int] = {}
        for hot in self.hot:
            for kind, number in hot.counts.items():
                found[kind] = found.get(kind, 0) + number
        return found

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        for hot in self.hot:
            hot.close()
