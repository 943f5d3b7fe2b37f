"""A change-stream table's replication set-up on its PostgreSQL server: the checks of the server, the role and the
table; the publication; the slot (status, position, peeking, advancing); and the replication origin eviction's
sessions carry. Every statement runs on a psycopg connection of its own (``connect``) or one the caller passes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.sources.postgres.pgoutput import decode, format_lsn, parse_lsn
from airflow_provider_tiering.sources.postgres.table import psycopg_connect
from airflow_provider_tiering.sources.sql_table import quote_identifier

log = logging.getLogger(__name__)

#: What eviction's session calls, restricted to superusers unless granted (PostgreSQL 14 and later).
ORIGIN_SESSION_FUNCTIONS = ("pg_replication_origin_session_setup(text)", "pg_replication_origin_session_reset()")
ORIGIN_CREATE_FUNCTION = "pg_replication_origin_create(text)"
#: Messages fetched per result chunk while streaming a slot (libpq's chunked rows mode; one at a time costs about a
#: third of a round's decoding).
STREAM_ROWS_PER_FETCH = 2000


@dataclass(frozen=True)
class SlotStatus:
    """The replication slot as the hot server shows it."""

    name: str
    exists: bool
    active: bool = False
    confirmed_flush_lsn: str | None = None
    #: WAL the server keeps for this slot (``pg_current_wal_lsn() - restart_lsn``).
    retained_wal_bytes: int | None = None
    #: ``pg_replication_slots.wal_status``: reserved, extended, unreserved or lost.
    wal_status: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": self.name,
            "exists": self.exists,
            "active": self.active,
            "confirmed_flush_lsn": self.confirmed_flush_lsn,
            "retained_wal_bytes": self.retained_wal_bytes,
            "wal_status": self.wal_status,
        }


class Replication:
    """One table's publication and slot on its server, reached with the table's connection string."""

    def __init__(self, display_name: str, conninfo: str, qualified: str, slot: str, publication: str) -> None:
        self.display_name = display_name
        self.conninfo = conninfo
        #: The table as SQL names it (schema-qualified, quoted).
        self.qualified = qualified
        self.slot = slot
        self.publication = publication

    def connect(self, replication: bool = False) -> Any:
        """A new autocommit psycopg connection (a replication one, for replication commands)."""
        return psycopg_connect(self.display_name, self.conninfo, **({"replication": "database"} if replication else {}))

    def check_replication(self, conn: Any) -> None:
        """Fail with what to change when the server or the role cannot use logical replication at all."""
        (wal_level,) = conn.execute("SHOW wal_level").fetchone()
        if wal_level != "logical":
            raise ChangeStreamUnavailable(
                f"{self.display_name}: the server runs with wal_level = {wal_level}; a change stream needs "
                "wal_level = logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL). Nothing was "
                "tiered"
            )
        (may_replicate,) = conn.execute(
            "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if not may_replicate:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: the connection's role may not use replication slots: ALTER ROLE <the role> "
                "WITH REPLICATION. Nothing was tiered"
            )

    def check_server(
        self, conn: Any, tiered_columns: Callable[[], Sequence[str]], key: Callable[[], Sequence[str]]
    ) -> None:
        """Fail with what to change when the server, the role or the table cannot stream this table's changes.
        ``tiered_columns`` and ``key`` (the merge key) are asked once the table is found."""
        self.check_replication(conn)
        found = conn.execute(
            "SELECT c.relreplident, "
            "ARRAY(SELECT a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = c.oid "
            "AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))) "
            "FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (self.qualified,),
        ).fetchone()
        if found is None:
            raise SourceError(f"{self.display_name} does not exist (or is not visible to this user)")
        identity, identity_columns = found
        generated = [
            name
            for (name,) in conn.execute(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                "AND NOT attisdropped AND attgenerated <> ''",
                (self.qualified,),
            ).fetchall()
            if name in tiered_columns()
        ]
        if generated:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: generated column(s) {generated} never travel in the change stream (pgoutput "
                "leaves them out), so the lake would hold NULL for them: leave them out with source.columns. "
                "Nothing was tiered"
            )
        merge_key = key()
        if identity != "f" and not set(merge_key) <= set(identity_columns):
            kinds = {"d": "DEFAULT (the primary key)", "n": "NOTHING", "i": "USING INDEX"}
            raise ChangeStreamUnavailable(
                f"{self.display_name}: its replica identity is {kinds.get(identity, identity)}, which does not "
                f"carry the merge key {list(merge_key)}: deletes would not say which row left. ALTER TABLE "
                f"{self.qualified} REPLICA IDENTITY USING INDEX <a unique index on the key> (or FULL). Nothing "
                "was tiered"
            )

    def publication_problem(self, conn: Any) -> str | None:
        """What keeps the publication from publishing every change of this very table, whole (None: nothing)."""
        found = conn.execute(
            "SELECT p.pubinsert AND p.pubupdate AND p.pubdelete AND p.pubtruncate, "
            "EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = to_regclass(%s) "
            "AND r.prattrs IS NULL) OR (p.puballtables AND to_regclass(%s) IS NOT NULL) "
            "FROM pg_publication p WHERE p.pubname = %s",
            (self.qualified, self.qualified, self.publication),
        ).fetchone()
        if found is None:
            return "does not exist"
        if not found[1]:
            return "does not publish this table (whole: without a column list); was the table re-created?"
        if not found[0]:
            return "does not publish every kind of change (insert, update, delete, truncate)"
        return None

    def check_publication(self, conn: Any) -> None:
        """The publication must publish this very table (not one dropped and re-created since), every column of
        it, and inserts, updates, deletes and truncates: a change it leaves out would never reach the lake."""
        problem = self.publication_problem(conn)
        if problem is not None:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: publication {self.publication} {problem}. Changes it leaves out would never "
                f"reach the lake: CREATE PUBLICATION {self.publication} FOR TABLE {self.qualified} (or ALTER it), "
                "then load the table again (drop the lake table, then reset the table; with eviction enabled, the "
                "rows only the lake holds would be lost: keep a copy). Nothing was tiered"
            )

    def ensure_publication(self, conn: Any) -> None:
        """Before a load (the first, or one that starts the table again): create the publication, or make the one
        there publish this table (it lost it if the table was dropped and created again); the slot created next
        decodes every later change through it."""
        exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)).fetchone()
        publication = quote_identifier(self.publication)
        try:
            if not exists:
                conn.execute(f"CREATE PUBLICATION {publication} FOR TABLE {self.qualified}")
            elif (
                self.publication_problem(conn) is not None
                and not conn.execute(
                    "SELECT puballtables FROM pg_publication WHERE pubname = %s", (self.publication,)
                ).fetchone()[0]
            ):
                conn.execute(f"ALTER PUBLICATION {publication} SET TABLE {self.qualified}")
        except Exception as exc:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: cannot create or set publication {self.publication}: {exc}. The connection's "
                "role must own the table (or create the publication for it: CREATE PUBLICATION "
                f"{self.publication} FOR TABLE {self.qualified}). Nothing was tiered"
            ) from exc
        self.check_publication(conn)

    def wal_end(self, conn: Any) -> tuple[int, int | None]:
        """The server's flushed WAL position, and the insert position read before it when the flush has passed it
        (a record boundary; None when it has not): where a read of the slot may end, and may stand."""
        try:
            (insert,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            (flushed,) = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        except Exception as exc:
            raise SourceError(f"{self.display_name}: reading the WAL position failed: {exc}") from exc
        boundary = parse_lsn(insert) if parse_lsn(insert) <= parse_lsn(flushed) else None
        return parse_lsn(flushed), boundary

    def status(self, conn: Any = None) -> SlotStatus:
        """The slot as the server shows it (retained WAL, position), asked on ``conn`` when given, else on a
        connection of its own."""
        with nullcontext(conn) if conn is not None else self.connect() as found:
            row = found.execute(
                "SELECT active, confirmed_flush_lsn::text, "
                "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8, wal_status "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot,),
            ).fetchone()
        if row is None:
            return SlotStatus(self.slot, False)
        active, confirmed, retained, wal_status = row
        return SlotStatus(
            self.slot, True, bool(active), confirmed, None if retained is None else int(retained), wal_status
        )

    def drop_slot_left(self, conn: Any) -> None:
        """Drop the slot a first load that never committed left (no lake data depends on it), before a new one."""
        if self.position(conn) is not None:
            log.info("%s: dropping slot %s left by an earlier first load", self.display_name, self.slot)
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))

    def create_slot_exporting_snapshot(self) -> tuple[Any, int, str]:
        """Create the slot over a replication connection that exports the snapshot the slot starts from. Returns
        that connection (the snapshot lives while it is open: the caller closes it once the load is read), the
        slot's consistent point and the snapshot's name."""
        export = self.connect(replication=True)
        try:
            # A replication command, sent as a simple query (psycopg does so for a query without parameters); the
            # slot name is checked by the spec (lower-case letters, digits and underscores).
            cur = export.execute(f"CREATE_REPLICATION_SLOT {self.slot} LOGICAL pgoutput (SNAPSHOT 'export')")
            _, consistent_point, snapshot, _ = cur.fetchone()
        except Exception as exc:
            export.close()
            raise ChangeStreamUnavailable(
                f"{self.display_name}: cannot create replication slot {self.slot}: {exc}. Check "
                "max_replication_slots and max_wal_senders on the server. Nothing was tiered"
            ) from exc
        return export, parse_lsn(consistent_point), str(snapshot)

    def position(self, conn: Any) -> int | None:
        """The slot's confirmed position; None: there is no slot; -1: it lost the WAL it needed."""
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots WHERE slot_name = %s",
            (self.slot,),
        ).fetchone()
        if row is None:
            return None
        if row[1] == "lost":
            return -1
        return parse_lsn(row[0])

    def peek(self, conn: Any, upto_lsn: int | None, upto_changes: int | None) -> Generator[Any, None, None]:
        """The slot's messages (decoded), without consuming them. The values' text is printed by this session (the
        output plugin runs in it): dates and timestamps in ISO form and UTC, floats exactly (the shortest form from 12),
        whatever the server's defaults, so this process can parse them (``text_casts.py``)."""
        try:
            conn.execute(
                "SELECT set_config('DateStyle', 'ISO, YMD', false), set_config('TimeZone', 'UTC', false), "
                "set_config('extra_float_digits', '3', false)"
            )
            for (data,) in conn.cursor().stream(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, CAST(%s AS pg_lsn), %s, "
                "'proto_version', '1', 'publication_names', %s)",
                # publication_names is a list of identifiers, folded to lower case unless quoted
                (
                    self.slot,
                    None if upto_lsn is None else format_lsn(upto_lsn),
                    upto_changes,
                    quote_identifier(self.publication),
                ),
                size=STREAM_ROWS_PER_FETCH,
            ):
                yield decode(data)
        except (SourceError, ValueError):
            raise
        except Exception as exc:
            raise SourceError(f"{self.display_name}: reading replication slot {self.slot} failed: {exc}") from exc

    def advance(self, conn: Any, lsn: int) -> None:
        """Move the slot up to ``lsn`` (never back; a slot that is gone or lost is left to the next round's check)."""
        position = self.position(conn)
        if position is not None and position != -1 and position < lsn:
            conn.execute("SELECT pg_replication_slot_advance(%s, CAST(%s AS pg_lsn))", (self.slot, format_lsn(lsn)))

    def ensure_origin(self, origin: str) -> None:
        """Create the table's eviction origin once; fail naming the grants when this role may not use it."""
        import psycopg

        with self.connect() as conn:
            exists = conn.execute("SELECT 1 FROM pg_replication_origin WHERE roname = %s", (origin,)).fetchone()
            needed = [*ORIGIN_SESSION_FUNCTIONS, *(() if exists else (ORIGIN_CREATE_FUNCTION,))]
            missing = [
                function
                for function in needed
                if not conn.execute("SELECT has_function_privilege(%s, 'EXECUTE')", (function,)).fetchone()[0]
            ]
            if missing:
                raise SourceError(
                    f"{self.display_name}: eviction deletes in sessions tagged with replication origin {origin}, "
                    "which the change stream skips (so the lake keeps the evicted rows); this role may not use "
                    f"replication origins: GRANT EXECUTE ON FUNCTION {', '.join(missing)} TO <the connection's "
                    "role> (superusers may by default). Nothing was evicted"
                )
            if not exists:
                try:
                    conn.execute("SELECT pg_replication_origin_create(%s)", (origin,))
                except psycopg.errors.UniqueViolation:
                    pass  # created meanwhile by another eviction of this table
