"""A PostgreSQL stream group's log: one logical replication slot and one publication over the group's tables, read
with ``pgoutput`` once for all of them (``change_stream/group_reader.py`` writes what it reads to the change log).

**Joining.** A table joins by being added to the publication (``ALTER PUBLICATION ... ADD TABLE``, a SHARE UPDATE
EXCLUSIVE lock that waits for no reader or writer of the table). The slot then decodes the table's changes made after
that commit; a transaction already open then may have changed the table before it, and those changes it would never
decode. So the reader waits (``join_wait_seconds``) until every transaction that held a transaction id when the table
was added has ended, and only then takes the position the table joins at (the WAL insert position): every
transaction committed after it started after the table was published, so the log holds all of its changes. A table
that could break its application once published is refused: without a replica identity, PostgreSQL fails every
UPDATE and DELETE of a table whose publication publishes them.

**Leaving** drops it from the publication. The slot is moved only after the change log's commit (``release``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from airflow_provider_tiering.core.connections import ConnectionInfo
from airflow_provider_tiering.core.documents import JsonObject
from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.core.offsets import Offsets, SafeEnd, lsn_offsets
from airflow_provider_tiering.core.source_specs import ChangeStreamSpec
from airflow_provider_tiering.core.stream_spec import StreamGroupSpec
from airflow_provider_tiering.sources.change_stream.group_reader import GroupLog
from airflow_provider_tiering.sources.change_stream.messages import Message, Relation
from airflow_provider_tiering.sources.change_stream.source import IDLE_ADVANCE_BYTES, closing_messages
from airflow_provider_tiering.sources.postgres.pgoutput import PgRelation, format_lsn, parse_lsn
from airflow_provider_tiering.sources.postgres.replication import Replication
from airflow_provider_tiering.sources.postgres.table import libpq_conninfo
from airflow_provider_tiering.sources.sql_table import quote_identifier

log = logging.getLogger(__name__)

#: How often the reader looks whether the transactions open when a table joined have ended.
JOIN_POLL_SECONDS = 0.5


def qualified(table: str) -> str:
    """``schema.table`` as SQL names it (each part quoted)."""
    schema, _, name = table.partition(".")
    return f"{quote_identifier(schema)}.{quote_identifier(name)}"


class PostgresGroupLog(GroupLog):
    """A stream group's slot and publication on its PostgreSQL server (see the module's description)."""

    def __init__(self, group: StreamGroupSpec, connection: ConnectionInfo) -> None:
        super().__init__()
        self.group = group
        self.display_name = f"postgres stream group {group.name}"
        # One Replication for the slot's own statements (its table is none: the group's tables are many).
        self.replication = Replication(
            self.display_name, libpq_conninfo(connection), "", group.slot(), group.publication()
        )
        self._secrets = connection.secrets()
        #: The tables the read in progress is about.
        self._tables: frozenset[str] = frozenset()

    def _connect(self) -> Any:
        return self.replication.connect()

    def secrets(self) -> list[str]:
        return self._secrets

    def table_name(self, source: ChangeStreamSpec) -> str:
        return f"{source.db_schema or 'public'}.{source.table}"

    # -- the server ------------------------------------------------------------------------------------
    def check(self) -> None:
        with self._connection() as conn:
            self.replication.check_replication(conn)

    def start(self) -> int:
        """The publication (empty until tables join: pgoutput reads it as of each change, so it must exist before the
        slot), then the slot, or the one a run that never committed left (no log depends on it yet)."""
        with self._connection() as conn:
            self._ensure_publication(conn, ())
            position = self.replication.position(conn)
            if position is not None and position != -1:
                return position
            if position == -1:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (self.replication.slot,))
            try:
                (lsn,) = conn.execute(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                    (self.replication.slot,),
                ).fetchone()
            except Exception as exc:
                raise ChangeStreamUnavailable(
                    f"{self.display_name}: cannot create replication slot {self.replication.slot}: {exc}. Check "
                    "max_replication_slots on the server. Nothing was read"
                ) from exc
        log.info("%s: created replication slot %s at %s", self.display_name, self.replication.slot, lsn)
        return parse_lsn(lsn)

    def held_from(self, position: int) -> None:
        slot = self.replication.slot
        with self._connection() as conn:
            found = self.replication.position(conn)
            if found is None or found == -1:
                state = "is gone" if found is None else "lost the WAL it needed (max_slot_wal_keep_size)"
                raise ChangeStreamUnavailable(
                    f"{self.display_name}: replication slot {slot} {state}: the changes after the change log's "
                    f"position {format_lsn(position)} can no longer be read. Start the group again: drop its change "
                    "log and its tables' lake tables (each loads again), then reset the tables"
                )
            if found > position:
                raise SourceError(
                    f"{self.display_name}: replication slot {slot} is at {format_lsn(found)}, ahead of the change "
                    f"log's position {format_lsn(position)}: another run of the reader committed meanwhile (the next "
                    "try reads from there); if none did, the slot was moved by something else and changes in between "
                    "are missing: start the group again"
                )
            if found < position:
                self.replication.advance(conn, position)
            self._ensure_publication(conn, ())

    def end(self) -> tuple[int, int | None]:
        with self._connection() as conn:
            return self.replication.wal_end(conn)

    def messages(
        self, start: int, end: int | None, tables: Sequence[str], budget: int | None = None
    ) -> AbstractContextManager[Iterator[Message]]:
        self._tables = frozenset(tables)

        def read() -> Iterator[Message]:
            with self._connection() as conn:
                yield from self.replication.peek(conn, end, budget)

        return closing_messages(read())

    def release(self, position: int) -> None:
        with self._connection() as conn:
            self.replication.advance(conn, position)

    # -- the group's tables ----------------------------------------------------------------------------
    def join(self, tables: Sequence[str], position: int, members: Sequence[str]) -> Mapping[str, int | str]:
        found: dict[str, int | str] = {}
        with self._connection() as conn:
            ready = []
            for table in tables:
                problem = self._not_joinable(conn, table)
                if problem is None:
                    ready.append(table)
                else:
                    found[table] = problem
            if not ready:
                return found
            self._ensure_publication(conn, ready)
            (horizon,) = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8").fetchone()
            blockers = self._wait_for_older_transactions(conn, int(horizon))
            if blockers:
                note = (
                    "joining: waiting for transactions open when it was added to the publication to end (pids "
                    f"{blockers}); the next run of the reader looks again"
                )
                return {**found, **dict.fromkeys(ready, note)}
            (insert,) = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        return {**found, **dict.fromkeys(ready, parse_lsn(insert))}

    def leave(self, tables: Sequence[str], members: Sequence[str]) -> None:
        with self._connection() as conn:
            published = self._published(conn)
            gone = [t for t in tables if t in published]
            if gone:
                names = ", ".join(qualified(t) for t in gone)
                conn.execute(f"ALTER PUBLICATION {quote_identifier(self.replication.publication)} DROP TABLE {names}")
                log.info("%s: %s left the publication", self.display_name, ", ".join(gone))

    def lost(self, members: Sequence[str]) -> list[str]:
        """Members the publication no longer holds (a table dropped, and perhaps created again: the publication held
        the dropped one); a renamed table is lost under its old name too (its spec names the old one)."""
        if not members:
            return []
        with self._connection() as conn:
            published = self._published(conn)
        return [t for t in members if t not in published]

    def _not_joinable(self, conn: Any, table: str) -> str | None:
        """Why ``table`` cannot join (None: it can): it does not exist, or has no replica identity (PostgreSQL would
        then refuse its application's UPDATEs and DELETEs once it is published)."""
        row = conn.execute(
            "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) "
            "FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (qualified(table),),
        ).fetchone()
        if row is None:
            return f"not joined: {table} does not exist (or is not visible to the connection's role)"
        identity, has_key = row
        if identity == "n" or (identity == "d" and not has_key):
            return (
                f"not joined: {table} has no replica identity (no primary key, and none set): published, its "
                "UPDATEs and DELETEs would fail. ALTER TABLE ... REPLICA IDENTITY USING INDEX <a unique index> (or "
                "FULL), or give it a primary key"
            )
        return None

    def _published(self, conn: Any) -> set[str]:
        rows = conn.execute(
            "SELECT schemaname::text || '.' || tablename::text FROM pg_publication_tables WHERE pubname = %s",
            (self.replication.publication,),
        ).fetchall()
        return {name for (name,) in rows}

    def _ensure_publication(self, conn: Any, tables: Sequence[str]) -> None:
        """The group's publication, publishing every kind of change, with ``tables`` in it."""
        publication = quote_identifier(self.replication.publication)
        try:
            exists = conn.execute(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.replication.publication,)
            ).fetchone()
            if not exists:
                conn.execute(f"CREATE PUBLICATION {publication}")
            missing = [t for t in tables if t not in self._published(conn)]
            if missing:
                conn.execute(f"ALTER PUBLICATION {publication} ADD TABLE {', '.join(qualified(t) for t in missing)}")
                log.info("%s: %s added to publication %s", self.display_name, ", ".join(missing), publication)
        except Exception as exc:
            raise ChangeStreamUnavailable(
                f"{self.display_name}: cannot create or change publication {self.replication.publication}: {exc}. "
                "The connection's role must own the group's tables (or create the publication and add them: CREATE "
                f"PUBLICATION {publication}; ALTER PUBLICATION {publication} ADD TABLE ...). Nothing was read"
            ) from exc

    def _wait_for_older_transactions(self, conn: Any, horizon: int) -> list[int]:
        """Wait until no transaction with an id below ``horizon`` is open (at most ``join_wait_seconds``); the pids of
        those still open when it gives up (empty: none)."""
        deadline = time.monotonic() + self.group.join_wait_seconds
        while True:
            (oldest,) = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8").fetchone()
            if int(oldest) >= horizon:
                return []
            if time.monotonic() >= deadline:
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
                    "ORDER BY xact_start LIMIT 5"
                ).fetchall()
                return [int(pid) for (pid,) in rows] or [-1]  # -1: a prepared transaction, which has no session
            time.sleep(JOIN_POLL_SECONDS)

    # -- positions and relations -----------------------------------------------------------------------
    def table_of(self, relation: Relation) -> str | None:
        name = f"{relation.namespace}.{relation.name}"
        return name if name in self._tables else None

    def key_of(self, table: str, relation: Relation) -> Sequence[str]:
        return relation.key_columns if isinstance(relation, PgRelation) else ()

    def offsets(self, position: int) -> Offsets:
        return {"lsn": format_lsn(position)}

    def position(self, offsets: SafeEnd) -> int:
        return parse_lsn(lsn_offsets(offsets)["lsn"])

    def describe(self, position: int) -> str:
        return format_lsn(position)

    def idle_advance_bytes(self) -> int:
        return min(IDLE_ADVANCE_BYTES, int(self.group.max_retained_wal_mb * 1024 * 1024) // 4)

    def status(self) -> JsonObject:
        with self._connection() as conn:
            found = self.replication.status(conn).to_json()
        found["publication"] = self.replication.publication
        found["max_retained_wal_bytes"] = int(self.group.max_retained_wal_mb * 1024 * 1024)
        found["position"] = found.get("confirmed_flush_lsn")
        found["log_needed_bytes"] = found.get("retained_wal_bytes")
        return found

    def alert(self, status: JsonObject) -> str | None:
        retained, bound = status.get("retained_wal_bytes"), status.get("max_retained_wal_bytes")
        if isinstance(retained, int) and isinstance(bound, int) and retained > bound:
            return (
                f"{self.display_name}: replication slot {self.replication.slot} holds back {retained} bytes of WAL, "
                f"past max_retained_wal_mb ({bound} bytes): the reader is behind the server's WAL"
            )
        return None
