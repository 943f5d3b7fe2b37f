"""A chaos run: writers insert into PostgreSQL hot tables while a worker runs tiering rounds and faults hit at random.

::

    report = ChaosRun(ChaosConfig(workdir=tmp_path, seconds=60)).run()
    assert report.lost == report.duplicated == 0

Parts, all real: a throw-away PostgreSQL server (``testbed.pg_server``, ``wal_level = logical``), the round worker
process (``round_worker.py``: local Spark, pyiceberg SQL catalog on SQLite, a JSON state document per table), the
warehouse on a size-limited tmpfs, writers with transactions held open (``testbed.hot_writers``) on the cursor tables,
a writer that inserts, updates (keys too), deletes and re-inserts on each change-stream table (``cdc.py``; the table
is tiered from its replication slot, source kind ``postgres_cdc``), and the faults of ``faults.py``, injected one at
a time once the change-stream tables have their first load, each either at a random moment or when the round in
progress (of any table, or of the one it is aimed at) reaches a chosen phase.

At the end the writers stop, a last batch of rows (changes) is committed to every table (so the last round commits,
which is when a round cleans up after failed attempts), the worker runs until every table has nothing left to tier,
and the lake is checked against the hot store with code that shares nothing with the code under test: every cursor
table equals its hot table row for row (count and content hash) and every acknowledged insert is in it once; every
change-stream table equals its hot table by key (no key lost, extra, different or held twice; content hash through
pyiceberg and through the Parquet files) and its replication slot is not ahead of the lake's LSN; no data file is
left that no snapshot references, and each table's state document names the lake's latest tiering snapshot.
"""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from pyiceberg.catalog import load_catalog
from pyiceberg.table.snapshots import Snapshot

from testbed.hot_writers import COLUMNS, Writers, create_hot_table, insert_rows
from testbed.lake_check import digest, lake_rows, postgres_rows, unreferenced_data_files
from testbed.pg_server import PostgresServer
from tests.chaos import cdc
from tests.chaos.cdc import ChangeWriter
from tests.chaos.faults import CatalogOutage, LakeCommitRace, WarehouseMount, kill_process_group
from tests.chaos.report import CdcTableCheck, FaultRecord, Report, RoundRecord, TableCheck, summarize
from tests.chaos.round_worker import NAMESPACE

REPO = Path(__file__).resolve().parents[2]
KINDS = ("sigkill", "postgres_restart", "catalog_outage", "lake_commit_race", "disk_full")
#: Phases of a round at which a SIGKILL lands (see core/round.py PHASES); "start" is before planning.
KILL_PHASES = ("start", "planned", "acquired", "writing", "written", "committed", "recorded")
FINAL_ROWS = 500
#: What a change-stream table is not put through, and why (shown in the report).
CDC_NOT_APPLICABLE = {
    "laggard writers committing below visible cursor values": "a change stream has no cursor and is read in commit "
    "order; its writer holds some transactions open for seconds and rolls some back instead",
    "the acknowledged-insert check": "its rows change and leave, so it is checked by key against the hot table "
    "(lost, extra and differing keys, content hash) and its slot against the lake's LSN",
}


@dataclass
class Trigger:
    """What :meth:`ChaosRun.when_phase` waits for: a round (of ``table``, when set) reaching one of ``phases``."""

    phases: set[str]
    table: str | None
    action: Callable[[dict[str, Any]], None]
    fired: threading.Event

    def matches(self, phase: str | None, table: str | None) -> bool:
        return phase in self.phases and (self.table is None or table == self.table)


@dataclass
class ChaosConfig:
    workdir: Path
    seconds: float = 60.0
    tables: int = 2
    #: Tables tiered from their PostgreSQL change stream (``postgres_cdc``), changed by updates and deletes too.
    cdc_tables: int = 1
    seed: int = 1
    mean_fault_interval: float = 8.0
    kinds: tuple[str, ...] = KINDS
    warehouse_mb: int = 512
    #: Keep injecting the kinds that have not struck a round, or a change-stream table's round, yet (a short run
    #: must show every kind biting) ...
    until_each_kind_hits: bool = False
    #: ... but stop injecting after this many seconds anyway.
    max_seconds: float | None = None
    progress: Callable[[str], None] | None = None


class Worker:
    """The round worker process (its own process group) and the thread reading its events."""

    def __init__(self, config: dict[str, Any], log_path: Path, on_event: Callable[[dict[str, Any]], None]) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
        self.log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.round_worker", json.dumps(config)],
            cwd=log_path.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, args=(on_event,), daemon=True)
        self.reader.start()

    def _read(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a library printing to stdout
            on_event(event)

    def kill(self) -> None:
        kill_process_group(self.process.pid)

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait(30)
        self.reader.join(10)
        kill_process_group(self.process.pid)  # stragglers of its group (Python workers)
        self.log.close()
        return code


class ChaosRun:
    def __init__(self, config: ChaosConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.workdir = config.workdir
        self.tables = [f"chaos_{i}" for i in range(1, config.tables + 1)]
        self.cdc_tables = [f"chaos_cdc_{i}" for i in range(1, config.cdc_tables + 1)]
        self.change_writers: list[ChangeWriter] = []
        self.stop_changes = threading.Event()
        self.catalog_db = self.workdir / "catalog.db"
        self.catalog_properties = {
            "type": "sql",
            "uri": f"sqlite:///{self.catalog_db}",
            "warehouse": f"file://{self.workdir / 'warehouse'}",
        }
        self.state_dir = self.workdir / "state"
        self.idle_file = self.workdir / "worker.until-idle"
        self.swap_gate = self.workdir / "worker.swap-gate"
        self.events_log = self.workdir / "events.jsonl"
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.rounds: list[RoundRecord] = []
        self.faults: list[FaultRecord] = []
        self.open_rounds: dict[str, dict[str, Any]] = {}
        self.trigger: Trigger | None = None
        self.round_ended = threading.Condition(self.lock)
        self.races: list[LakeCommitRace] = []
        self.worker: Worker | None = None
        self.incarnation = 0
        self.skipped: dict[str, str] = {}
        self.pg: PostgresServer | None = None
        self.mount: WarehouseMount | None = None

    # -- events -------------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, message: str) -> None:
        if self.config.progress:
            self.config.progress(f"[{self.now():7.1f} s] {message}")

    def on_event(self, event: dict[str, Any]) -> None:
        event["t"] = round(self.now(), 3)
        with self.events_log.open("a") as handle:
            handle.write(json.dumps(event) + "\n")
        table = event.get("table")
        fire = None
        with self.lock:
            if event["event"] == "start":
                self.open_rounds[table] = {"start": event["t"], "phase": "start"}
            elif event["event"] == "phase":
                self.open_rounds.setdefault(table, {"start": event["t"]})["phase"] = event["phase"]
            elif event["event"] == "round":
                opened = self.open_rounds.pop(table, {"start": event["t"]})
                self.rounds.append(
                    RoundRecord(
                        table=table,
                        start=opened["start"],
                        end=event["t"],
                        outcome=event["outcome"],
                        rows=event.get("rows", 0),
                        error_type=event.get("error_type"),
                        error=event.get("error"),
                        commit_retries=event.get("commit_retries", 0),
                    )
                )
                self.round_ended.notify_all()
            phase = event.get("phase") or (event["event"] if event["event"] == "start" else None)
            if self.trigger is not None and self.trigger.matches(phase, table):
                fire, self.trigger = self.trigger, None
        if fire is not None:
            fire.action(event)
            fire.fired.set()

    def when_phase(
        self, phases: set[str], action: Callable[[dict[str, Any]], None], timeout: float, table: str | None = None
    ) -> bool:
        """Run ``action`` (in the event reader) as soon as a round (of ``table``, when given) reaches one of
        ``phases``; False on timeout."""
        fired = threading.Event()
        with self.lock:
            self.trigger = Trigger(phases, table, action, fired)
        if fired.wait(timeout):
            return True
        with self.lock:
            if self.trigger is not None and self.trigger.fired is fired:
                self.trigger = None
                return False
        fired.wait()  # it fired just now
        return True

    def mark_killed_rounds(self) -> None:
        with self.lock:
            for table, opened in self.open_rounds.items():
                self.rounds.append(RoundRecord(table, opened["start"], self.now(), "killed", phase=opened.get("phase")))
            self.open_rounds.clear()

    # -- worker -------------------------------------------------------------------------------
    def worker_config(self) -> dict[str, Any]:
        assert self.pg is not None
        return {
            "tables": self.tables + self.cdc_tables,
            "cdc_tables": self.cdc_tables,
            "dsn": self.pg.dsn,
            "password": self.pg.password,
            "catalog": self.catalog_properties,
            "state_dir": str(self.state_dir),
            "idle_file": str(self.idle_file),
            "swap_gate": str(self.swap_gate),
        }

    def start_worker(self) -> None:
        self.incarnation += 1
        log_path = self.workdir / f"worker-{self.incarnation}.log"
        self.worker = Worker(self.worker_config(), log_path, self.on_event)

    # -- faults -------------------------------------------------------------------------------
    def inject(self, kind: str, target: str | None = None) -> FaultRecord:
        """Inject one fault, at a phase of any table's round or (``target``) of that table's."""
        rng = self.rng
        record = FaultRecord(kind, "", self.now(), target=target)
        wait = self.phase_timeout(target)
        if kind == "sigkill":
            phase = rng.choice(KILL_PHASES)
            worker = self.worker
            assert worker is not None
            hit = self.when_phase({phase}, lambda event: worker.kill(), timeout=wait, table=target)
            if hit or target is None:
                if not hit:
                    worker.kill()
                worker.wait(60)
                self.mark_killed_rounds()
                record.phase = phase if hit else "between rounds"
                record.detail = f"at phase {record.phase}"
                self.start_worker()
            else:  # killing another table's round would not be what was aimed at
                record.detail = f"not injected: no round of {target} reached phase {phase}"
        elif kind == "postgres_restart":
            assert self.pg is not None
            phase = rng.choice(("writing", "acquired"))
            self.when_phase({phase}, lambda event: None, timeout=wait, table=target)
            down = rng.uniform(1.0, 4.0)
            began = time.monotonic()
            self.pg.restart(down_seconds=down)
            record.phase, record.seconds = phase, time.monotonic() - began
            record.detail = f"at phase {phase}, down {record.seconds:.1f} s"
        elif kind == "catalog_outage":
            # SQLite waits 5 s for a lock, so a round's commit fails; a round starting then waits twice (pyiceberg's
            # catalog start-up probes, then creates what it thinks is missing) and may get through.
            seconds = rng.uniform(6.0, 12.0)
            phase = rng.choice(("written", "written", "start"))
            self.when_phase({phase}, lambda event: None, timeout=wait, table=target)
            CatalogOutage(self.catalog_db).hold(seconds, threading.Event())
            record.phase, record.seconds = phase, seconds
            record.detail = f"from phase {phase}, locked {seconds:.1f} s"
        elif kind == "lake_commit_race":
            race = LakeCommitRace(self.catalog_properties, first_id=-1 - 100_000 * len(self.races))
            self.races.append(race)
            raced: dict[str, Any] = {}

            def start_race(event: dict[str, Any]) -> None:
                # The round stands between its fence check and its catalog swap (the worker's swap gate): commit
                # there first, so its swap is lost for sure, then keep appending until the round has ended.
                raced["table"] = race.table = record.table = event["table"]
                raced["at"] = event["t"]
                identifier = (NAMESPACE, event["table"])
                race.append_once(identifier)
                raced["thread"] = threading.Thread(target=race.run, args=(identifier, done), daemon=True)
                raced["thread"].start()
                self.swap_gate.unlink(missing_ok=True)

            done = threading.Event()
            self.swap_gate.write_text(target or "")  # the worker stops only that table's round at the gate
            hit = self.when_phase({"swapping"}, start_race, timeout=wait, table=target)
            self.swap_gate.unlink(missing_ok=True)
            if hit:
                self.wait_round_end(raced["table"], after=raced["at"], timeout=30)
                done.set()
                raced["thread"].join()
                record.phase, record.commits = "swapping", race.committed
                record.detail = f"{race.committed} competing commits on {raced['table']} ({race.lost} lost the swap)"
            else:
                record.detail = "no round reached its catalog swap"
        elif kind == "disk_full":
            assert self.mount is not None
            seconds = rng.uniform(4.0, 8.0)
            self.when_phase({"planned"}, lambda event: None, timeout=wait, table=target)
            filled = self.mount.fill()
            time.sleep(seconds)
            self.mount.free()
            record.phase, record.seconds = "planned", seconds
            record.detail = f"filled {filled >> 20} MiB, full for {seconds:.1f} s"
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        record.end = self.now()
        self.say(f"fault {kind}{f' ({target})' if target else ''}: {record.detail}")
        return record

    @staticmethod
    def phase_timeout(target: str | None) -> float:
        """How long a fault waits for a round to reach its phase; aimed at one table, it waits for that table's
        turn, after another table's round (up to half a minute on a busy machine)."""
        return 30 if target is None else 75

    def wait_first_loads(self, timeout: float) -> None:
        """Until every change-stream table has tiered a round (its first load, from the slot's exported snapshot),
        so that faults strike rounds that apply changes (a first load struck by faults is tested on its own in
        tests/integration/test_change_stream.py); ``timeout`` seconds at most."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not all(any(r.table == t and r.outcome == "tiered" for r in self.rounds) for t in self.cdc_tables):
                left = deadline - time.monotonic()
                if left <= 0:
                    self.say("a change-stream table has not finished its first load; faults begin anyway")
                    return
                self.round_ended.wait(left)
        if self.cdc_tables:
            self.say("change-stream tables loaded; faults begin")

    def wait_round_end(self, table: str, after: float, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not any(r.table == table and r.end >= after for r in self.rounds):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.round_ended.wait(left)

    def inject_faults(self, stop: threading.Event) -> None:
        """Faults one at a time, kinds in shuffled turns, every other one aimed at a change-stream table's round,
        until the time is up and every kind has been injected; with ``until_each_kind_hits``, then only the kinds
        that have not struck a round yet, or not a change-stream table's round yet (aimed at one), up to
        ``max_seconds``."""
        kinds = [k for k in self.config.kinds if k not in self.skipped]
        bag: list[str] = []
        injected: set[str] = set()
        missing_on_cdc: set[str] = set()
        deadline = self.t0 + self.config.seconds
        hard_deadline = self.t0 + max(self.config.seconds, self.config.max_seconds or 0)
        while not stop.is_set():
            if time.monotonic() >= deadline and injected >= set(kinds):
                missing = set()
                if self.config.until_each_kind_hits:
                    missing_on_cdc = set(kinds) - self.kinds_hit(set(self.cdc_tables)) if self.cdc_tables else set()
                    missing = (set(kinds) - self.kinds_hit()) | missing_on_cdc
                if not missing or time.monotonic() >= hard_deadline:
                    return
                bag = [k for k in bag if k in missing] or sorted(missing)
            if stop.wait(self.rng.uniform(0.5, 1.5) * self.config.mean_fault_interval):
                return
            if not bag:
                bag = list(kinds)
                self.rng.shuffle(bag)
            kind = bag.pop()
            aim = kind in missing_on_cdc or (not missing_on_cdc and len(self.faults) % 2 == 1)
            target = self.rng.choice(self.cdc_tables) if self.cdc_tables and aim else None
            record = self.inject(kind, target)
            with self.lock:
                self.faults.append(record)
            injected.add(kind)

    # -- the run ------------------------------------------------------------------------------
    def setup(self, stack: ExitStack) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        logging.getLogger("pyiceberg.table").setLevel(logging.ERROR)  # the competing writer's retries are counted
        self.pg = stack.enter_context(PostgresServer(self.workdir / "pg"))
        for table in self.tables:
            create_hot_table(self.pg.dsn, table)
        for number, table in enumerate(self.cdc_tables):
            writer = ChangeWriter(self.pg.dsn, table, self.config.seed * 1000 + 500 + number, self.stop_changes)
            writer.create()
            self.change_writers.append(writer)
        why_not = WarehouseMount.available()
        if why_not is None:
            self.mount = WarehouseMount(self.workdir / "warehouse", self.config.warehouse_mb)
            self.mount.mount()
            stack.callback(self.mount.unmount)
        else:
            self.skipped["disk_full"] = why_not
        # The SQL catalog's tables are created once, here: several processes creating them at once race.
        catalog = load_catalog("default", **self.catalog_properties)
        catalog.create_namespace_if_not_exists(NAMESPACE)

    def run(self) -> Report:
        with ExitStack() as stack:
            self.setup(stack)
            writers = Writers(self.pg.dsn, self.tables, self.config.seed)
            self.t0 = time.monotonic()
            writers.start()
            stack.callback(lambda: writers.stop_event.set())
            for change_writer in self.change_writers:
                change_writer.start()
            stack.callback(self.stop_changes.set)
            self.start_worker()
            stack.callback(lambda: self.worker and self.worker.kill())
            self.wait_first_loads(timeout=60)
            stop_faults = threading.Event()
            faults = threading.Thread(target=self.inject_faults, args=(stop_faults,), daemon=True)
            faults.start()
            faults.join()  # returns once the time is up and every kind has been injected
            self.say("faults over; stopping the writers")
            writers.stop()
            self.stop_changes.set()
            for change_writer in self.change_writers:
                change_writer.join(30)
                if change_writer.is_alive():
                    raise RuntimeError(f"writer {change_writer.name} did not stop")
            final_started = self.now()
            with psycopg.connect(self.pg.dsn) as conn:
                for table in self.tables:
                    insert_rows(conn, table, "final", 0, FINAL_ROWS, self.rng)
                    conn.commit()
            for change_writer in self.change_writers:
                change_writer.final_changes()
            # The worker finishes its round, then runs rounds until every table has nothing left to tier.
            self.idle_file.write_text("until idle")
            self.say("final rounds until every table has nothing left to tier")
            assert self.worker is not None
            code = self.worker.wait(600)
            self.mark_killed_rounds()
            if code != 0:
                raise RuntimeError(f"the round worker exited with {code} in the final rounds; see {self.workdir}")
            final = Counter(r.outcome for r in self.rounds if r.start >= final_started)
            acknowledged = {table: writers.acknowledged(table) for table in self.tables}
            checks = [self.check_table(table, acknowledged[table]) for table in self.tables]
            cdc_checks = [self.check_cdc_table(writer) for writer in self.change_writers]
            return self.report(writers, checks, cdc_checks, dict(final))

    # -- the final check ----------------------------------------------------------------------
    def check_table(self, table: str, acknowledged: list[int]) -> TableCheck:
        assert self.pg is not None
        hot = postgres_rows(self.pg.dsn, table, COLUMNS)
        everything = lake_rows(self.catalog_properties, (NAMESPACE, table), COLUMNS)
        lake = [row for row in everything if row[1] != "external"]
        external = Counter(row[0] for row in everything if row[1] == "external")
        races = [race for race in self.races if race.table == table]
        external_committed = {i for race in races for i in race.committed_ids}
        external_uncertain = {i for race in races for i in race.uncertain_ids}
        hot_ids = {row[0] for row in hot}
        lake_ids = Counter(row[0] for row in lake)
        return TableCheck(
            table=table,
            hot_rows=len(hot),
            lake_rows=len(lake),
            acknowledged=len(acknowledged),
            lost=len(hot_ids - set(lake_ids)),
            duplicated=sum(n - 1 for n in lake_ids.values()),
            unacknowledged_missing=len(set(acknowledged) - hot_ids),
            digests_equal=digest(hot) == digest(lake),
            external_rows=sum(external.values()),
            external_lost=len(external_committed - set(external)),
            external_duplicated=sum(n - 1 for n in external.values())
            + len(set(external) - external_committed - external_uncertain),
            # Only the rounds' own directory: files another writer left after losing a swap are its to clean.
            orphan_files=unreferenced_data_files(self.catalog_properties, (NAMESPACE, table), under="tiering"),
            state_problems=self.state_problems(table),
        )

    def check_cdc_table(self, writer: ChangeWriter) -> CdcTableCheck:
        """A change-stream table by key (``cdc.compare``), and its replication slot against the lake's LSN."""
        assert self.pg is not None
        table = writer.hot.table
        races = [race for race in self.races if race.table == table]
        external_committed = {i for race in races for i in race.committed_ids}
        external_uncertain = {i for race in races for i in race.uncertain_ids}
        found = cdc.compare(
            self.pg.dsn, table, self.catalog_properties, (NAMESPACE, table), is_external=lambda row: row[0] < 0
        )
        external: Counter[int] = found["external_ids"]
        snapshot = self.latest_tiering_snapshot(table)
        lake_at = None if snapshot is None else cdc.lake_lsn(snapshot.summary.additional_properties)
        slot_at = cdc.slot_lsn(self.pg.dsn, f"tiering_public_{table}")
        return CdcTableCheck(
            table=table,
            hot_rows=found["hot_rows"],
            lake_rows=found["lake_rows"],
            lost_keys=found["lost_keys"],
            extra_keys=found["extra_keys"],
            differing_keys=found["differing_keys"],
            duplicated_keys=found["duplicated_keys"],
            digests_equal=found["digests_equal"],
            parquet_digests_equal=found["parquet_digests_equal"],
            slot_lsn=slot_at,
            lake_lsn=lake_at,
            slot_ahead=slot_at is None or lake_at is None or cdc.parse_lsn(slot_at) > cdc.parse_lsn(lake_at),
            transactions=dict(writer.outcomes),
            changes=writer.counts(),
            external_rows=sum(external.values()),
            external_lost=len(external_committed - set(external)),
            external_duplicated=sum(n - 1 for n in external.values())
            + len(set(external) - external_committed - external_uncertain),
            orphan_files=unreferenced_data_files(self.catalog_properties, (NAMESPACE, table), under="tiering"),
            state_problems=self.state_problems(table),
        )

    def latest_tiering_snapshot(self, table: str) -> Snapshot | None:
        """The lake's latest snapshot a round committed (the competing writer's carry no tiering summary)."""
        iceberg = load_catalog("default", **self.catalog_properties).load_table((NAMESPACE, table))
        snapshot = iceberg.current_snapshot()
        while snapshot is not None and "tiering.epoch" not in (snapshot.summary.additional_properties or {}):
            snapshot = iceberg.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        return snapshot

    def state_problems(self, table: str) -> list[str]:
        """How the table's state document disagrees with its lake's latest tiering snapshot (read here directly)."""
        document = json.loads((self.state_dir / f"{table}.json").read_text())
        snapshot = self.latest_tiering_snapshot(table)
        problems = []
        if snapshot is None:
            return ["the lake has no tiering snapshot"]
        summary = snapshot.summary.additional_properties
        committed = document.get("committed") or {}
        if document.get("status") != "TIERED":
            problems.append(f"status {document.get('status')}")
        if committed.get("snapshot_id") != snapshot.snapshot_id:
            problems.append(f"state names snapshot {committed.get('snapshot_id')}, lake is at {snapshot.snapshot_id}")
        if committed.get("end_offsets") != json.loads(summary["tiering.end-offsets"]):
            problems.append(f"state offsets {committed.get('end_offsets')} != lake {summary['tiering.end-offsets']}")
        if committed.get("epoch") != int(summary["tiering.epoch"]) or document.get("epoch", 0) < committed.get(
            "epoch", 0
        ):
            problems.append(
                f"state epoch {document.get('epoch')}/{committed.get('epoch')} vs lake {summary['tiering.epoch']}"
            )
        return problems

    @staticmethod
    def overlaps(fault: FaultRecord, r: RoundRecord) -> bool:
        if fault.kind == "sigkill":
            return r.outcome == "killed" and fault.start <= r.end <= fault.end + 1
        return r.start <= fault.end + 2 and r.end >= fault.start

    @classmethod
    def hit(cls, fault: FaultRecord, r: RoundRecord) -> bool:
        """Whether the fault visibly struck the round: killed it, failed it, or (a lake commit race) made its
        commit lose the catalog's swap."""
        if not cls.overlaps(fault, r):
            return False
        if fault.kind == "lake_commit_race":
            return r.table == fault.table and (r.commit_retries > 0 or r.outcome in ("failed", "fenced"))
        return r.outcome in ("failed", "killed", "fenced")

    def kinds_hit(self, tables: set[str] | None = None) -> set[str]:
        """The kinds of fault that struck a round (of one of ``tables``, when given)."""
        with self.lock:
            return {
                f.kind
                for f in self.faults
                for r in self.rounds
                if (tables is None or r.table in tables) and self.hit(f, r)
            }

    def report(
        self, writers: Writers, checks: list[TableCheck], cdc_checks: list[CdcTableCheck], final: dict[str, int]
    ) -> Report:
        bad = [r for r in self.rounds if r.outcome in ("failed", "killed", "fenced") or r.commit_retries]
        explained: set[int] = set()
        for fault in self.faults:
            fault.rounds_hit = sum(self.hit(fault, r) for r in self.rounds)
            fault.cdc_rounds_hit = sum(self.hit(fault, r) for r in self.rounds if r.table in self.cdc_tables)
            explained.update(i for i, r in enumerate(bad) if self.overlaps(fault, r))
        by_kind: dict[str, dict[str, Any]] = {}
        for kind in dict.fromkeys(f.kind for f in self.faults):
            faults = [f for f in self.faults if f.kind == kind]
            by_kind[kind] = {
                "injected": len(faults),
                "rounds_hit": sum(f.rounds_hit for f in faults),
                "cdc_rounds_hit": sum(f.cdc_rounds_hit for f in faults),
                "summary": summarize(faults),
                "each": [f"{f.start:.1f} s: {f.detail} ({f.rounds_hit} rounds hit)" for f in faults],
            }
        return Report(
            seconds=round(self.now(), 1),
            seed=self.config.seed,
            rounds=dict(Counter(r.outcome for r in self.rounds)),
            round_errors=dict(Counter(r.error_type for r in self.rounds if r.error_type)),
            rows_tiered=sum(r.rows for r in self.rounds if r.outcome == "tiered"),
            faults=by_kind,
            unexplained_failures=[asdict(r) for i, r in enumerate(bad) if i not in explained],
            commit_retries=sum(r.commit_retries for r in self.rounds),
            competing_commits=sum(race.committed for race in self.races),
            writer_transactions=dict(writers.outcomes()),
            final_rounds=final,
            cdc_rounds=dict(Counter(r.outcome for r in self.rounds if r.table in self.cdc_tables)),
            tables=checks,
            cdc_tables=cdc_checks,
            skipped_kinds=self.skipped,
            cdc_not_applicable=CDC_NOT_APPLICABLE if cdc_checks else {},
        )
