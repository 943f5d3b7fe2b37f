"""A PostgreSQL table of a stream group: its changes read from the group's change log (``change_stream/
group_member.py``), placed and typed as its own stream's (``change_stream_source.py``).

**Its first load joins a running stream without a slot of its own, a lock or a pause.** The group's slot exists and
cannot export a snapshot again, so the load reads the table in a snapshot of its own (exported from a REPEATABLE READ
transaction, so every split reads the same), and the change log carries the rest. An MVCC snapshot is not a WAL
position: the transactions it saw are not exactly those committed before some LSN. So the load records the snapshot
(``pg_current_snapshot()``: xmin, xmax, the ids in progress) and ``until``, the WAL insert position read after it
was taken (every transaction it saw committed below it), in its offsets (``LoadedSnapshot``), with the position the
log holds every change of the table from (``held_from``: its join, or the log's expiry) as the lake's LSN. Later rounds
apply the log's transactions from that LSN on, leaving out those committed before ``until`` that the snapshot saw
(their rows are in the load): a transaction id below xmin, or below xmax and not in progress, was seen. Two
transactions touching one row commit in the order their locks allow, so the load and the log never disagree on which
version of a row is the later. Once the lake's LSN passes ``until`` the offsets drop the snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.errors import SourceError
from airflow_provider_tiering.core.offsets import LoadedSnapshot, LsnOffsets, Offsets, lsn_offsets
from airflow_provider_tiering.core.source_specs import PostgresCdcSourceSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_member import GroupMember
from airflow_provider_tiering.sources.change_stream.plans import ChangePlan
from airflow_provider_tiering.sources.postgres.change_stream_source import (
    ROWS_PER_BLOCK_GUESS,
    PostgresCdcSource,
    SnapshotLoad,
)
from airflow_provider_tiering.sources.postgres.pgoutput import format_lsn, parse_lsn
from airflow_provider_tiering.sources.postgres.replication import Replication
from airflow_provider_tiering.sources.postgres.table import psycopg_connect
from airflow_provider_tiering.sources.sql_table import quote_identifier

log = logging.getLogger(__name__)

_XID_SPAN = 2**32


def parse_snapshot(text: str) -> tuple[int, int, list[int]]:
    """``pg_current_snapshot()``'s text (``xmin:xmax:xip,...``) as its parts."""
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), [int(x) for x in xip.split(",") if x]


def saw(snapshot: LoadedSnapshot, xid: int) -> bool:
    """Whether a snapshot saw the committed transaction ``xid`` (the 32 bits pgoutput sends, placed in the epoch
    nearest the snapshot's xmax)."""
    xmax = snapshot["xmax"]
    full = (xmax - xmax % _XID_SPAN) + xid % _XID_SPAN
    if full > xmax + _XID_SPAN // 2:
        full -= _XID_SPAN
    elif full < xmax - _XID_SPAN // 2:
        full += _XID_SPAN
    if full < snapshot["xmin"]:
        return True
    return full < xmax and full not in snapshot["xip"]


class PostgresGroupMember(GroupMember, PostgresCdcSource):
    """A PostgreSQL table read through its stream group's change log (see the module's description)."""

    def __init__(self, spec: PostgresCdcSourceSpec, connection: ConnectionInfo) -> None:
        super().__init__(spec, connection)
        group = spec.stream
        if group is None:
            raise SourceError(f"{self.display_name}: not a table of a stream group")
        self.stream: StreamGroupSpec = group
        self.member_table = f"{spec.db_schema or 'public'}.{spec.table}"
        self.display_name = f"postgres table {self.member_table} (stream group {group.name})"
        self.replication.display_name = self.display_name
        #: The snapshot the table was first loaded in, while the lake's offsets carry it.
        self._loaded: LoadedSnapshot | None = None

    def _begin_round(self) -> None:
        super()._begin_round()
        self._loaded = None

    def _check_table(self) -> None:
        """The server, the role and the table: the replica identity must carry the merge key, and the group's
        publication must publish this very table (one dropped and created again is out of it until the reader adds it
        again: its changes would never reach the log)."""
        with self.replication.connect() as conn:
            self._check_server(conn)
            group = Replication(
                self.display_name, self.table.conninfo, self.replication.qualified, self.stream.slot(),
                self.stream.publication(),
            )  # fmt: skip
            problem = group.publication_problem(conn)
        if problem is not None:
            raise SourceError(
                f"{self.display_name}: stream group {self.stream.name}'s publication {self.stream.publication()} "
                f"{problem}: the group's reader adds it (again) at its next run, from a later position; a lake "
                "older than that needs a new load (drop its lake table, then reset the table)"
            )

    # -- moving in from a stream of its own: its slot up to where it joined ----------------------------------------
    def _own_log_holds(self, position: int) -> bool:
        """Its own slot is there, not past the lake, and its own publication still publishes it."""
        with self.replication.connect() as conn:
            own = self.replication.position(conn)
            return own is not None and 0 <= own <= position and self.replication.publication_problem(conn) is None

    def _bridge_end(self, position: int) -> Offsets:
        # Where it joined is a WAL record boundary (the insert position the reader read): the round ends exactly there.
        return {"lsn": format_lsn(position), "boundary": format_lsn(position)}

    def _release_own_log(self) -> None:
        """Drop its own slot, and its own publication when that publishes this table alone."""
        with self.replication.connect() as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s "
                "AND NOT active",
                (self.replication.slot,),
            )
            (tables,) = conn.execute(
                "SELECT count(*) FROM pg_publication_tables WHERE pubname = %s", (self.replication.publication,)
            ).fetchone()
            if int(tables) <= 1:
                conn.execute(f"DROP PUBLICATION IF EXISTS {quote_identifier(self.replication.publication)}")
        log.info(
            "%s: now read from stream group %s's change log; its own slot %s dropped", self.display_name,
            self.stream.name, self.replication.slot,
        )  # fmt: skip

    # -- the first load's snapshot in the offsets ------------------------------------------------------------
    def _position(self, offsets: Offsets | LsnOffsets) -> int:  # type: ignore[override]  # the same kinds
        found = lsn_offsets(offsets)
        if "loaded" in found:
            self._loaded = found["loaded"]
        return parse_lsn(found["lsn"])

    def _offsets(self, position: int) -> Offsets:
        found: LsnOffsets = {"lsn": format_lsn(position)}
        if self._loaded is not None and position < parse_lsn(self._loaded["until"]):
            found["loaded"] = self._loaded
        return found

    def _seen_by_load(self) -> Callable[[int, int], bool] | None:
        loaded = self._loaded
        if loaded is None:
            return None
        until = parse_lsn(loaded["until"])
        return lambda xid, commit_at: commit_at < until and saw(loaded, xid)

    def _plan_first_load(self) -> ChangePlan:
        """A REPEATABLE READ transaction exports the snapshot the load reads (kept open until the load is written),
        with what the snapshot saw and where the WAL stood after it was taken."""
        _, member = self._member_state(wait=True)
        self._check_table()
        conn = psycopg_connect(self.display_name, self.table.conninfo)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # The snapshot is taken as this statement starts: the insert position it reads lies past every
            # transaction the snapshot saw.
            snapshot, current, insert = conn.execute(
                "SELECT pg_export_snapshot(), pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
            ).fetchone()
            rows, blocks = conn.execute(
                "SELECT reltuples::int8, pg_relation_size(oid) / current_setting('block_size')::int8 "
                "FROM pg_class WHERE oid = to_regclass(%s)",
                (self.replication.qualified,),
            ).fetchone()
        except Exception as exc:
            conn.close()
            raise SourceError(f"{self.display_name}: taking the first load's snapshot failed: {exc}") from exc
        xmin, xmax, xip = parse_snapshot(current)
        self._loaded = {"xmin": xmin, "xmax": xmax, "xip": xip, "until": insert}
        estimate = int(rows) if rows is not None and rows >= 0 else int(blocks or 0) * ROWS_PER_BLOCK_GUESS
        return ChangePlan(
            member.held_from, None, max(estimate, 1), load=SnapshotLoad(str(snapshot), int(blocks or 0)), session=conn
        )
