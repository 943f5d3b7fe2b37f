"""A MariaDB or MySQL server as a change stream needs it: the settings and privileges it checks on every round, where
its binlog ends and which files it still holds, the consistent snapshot that gives the position it stands at, and
the status a table's round reports. Every statement runs on a PyMySQL connection the caller passes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_tiering.core.errors import ChangeStreamUnavailable, SourceError
from airflow_provider_tiering.sources.mysql.binlog_positions import BinlogFiles, file_number, pack, unpack

#: The server settings a change stream needs, each with the value it needs.
REQUIRED_SETTINGS = {
    "log_bin": ("1", "log_bin (start the server with --log-bin)"),
    "binlog_format": ("ROW", "binlog_format = ROW"),
    "binlog_row_image": ("FULL", "binlog_row_image = FULL (every column of a changed row in the binlog)"),
    "binlog_row_metadata": ("FULL", "binlog_row_metadata = FULL (the columns' names in the binlog)"),
    "binlog_checksum": ("CRC32", "binlog_checksum = CRC32 (every event read is checked against its checksum)"),
}


@dataclass(frozen=True)
class BinlogEnd:
    """Where the server's binlog ends, and the files it holds with their sizes, by number."""

    position: int
    files: BinlogFiles
    sizes: dict[int, int]


class BinlogServer:
    """The server of one table's change stream (see the module's description)."""

    def __init__(self, display_name: str, database: str, table: str, server_id: int) -> None:
        self.display_name = display_name
        self.database = database
        self.table = table
        self.server_id = server_id

    def _fail(self, what: str) -> ChangeStreamUnavailable:
        return ChangeStreamUnavailable(f"{self.display_name}: {what}. Nothing was tiered")

    def check(self, conn: Any, table_ref: str | None) -> None:
        """Fail with what to change when the server or the user cannot stream the table's changes: its settings, the
        reader's server id, the user's privileges (replication, binlog monitoring, SELECT on the table; no table: a
        stream group's reader, which reads no table itself)."""
        import pymysql

        with conn.cursor() as cur:
            try:
                names = ", ".join(f"@@GLOBAL.{name}" for name in REQUIRED_SETTINGS)
                cur.execute(f"SELECT {names}, @@GLOBAL.server_id, @@version")
                found = cur.fetchone()
            except pymysql.MySQLError as exc:
                raise self._fail(
                    f"the server lacks a binlog setting a change stream needs ({exc}): MariaDB 10.5 or later, or MySQL "
                    "8.0.14 or later, has them all"
                ) from exc
            wrong = [
                f"{how} (it is {value})"
                for (name, (wanted, how)), value in zip(REQUIRED_SETTINGS.items(), found, strict=False)
                if str(value).upper() != wanted
            ]
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin_compress', 'binlog_transaction_compression')"
            )  # a compressed event's rows cannot be read (MariaDB's, MySQL's: where the server has the setting)
            wrong += [f"{name} = OFF (it is ON)" for name, value in cur.fetchall() if str(value).upper() == "ON"]
            if wrong:
                raise self._fail(f"the server's binlog cannot carry the table's changes: set {'; '.join(wrong)}")
            self._check_server_id(cur, int(found[len(REQUIRED_SETTINGS)]))
            self._check_privileges(cur)
            if table_ref is None:
                return
            try:
                cur.execute(f"SELECT 1 FROM {table_ref} LIMIT 0")
            except pymysql.MySQLError as exc:
                raise self._fail(f"the user may not read the table ({exc}): GRANT SELECT ON {table_ref}") from exc

    def check_key(self, table_ref: str, key: Sequence[str], keys: Sequence[tuple[str, tuple[str, ...], bool]]) -> None:
        """Fail unless the table has a primary key, or a unique key of NOT NULL columns, within the merge key
        ``key`` (``keys``: the table's unique keys, ``MySqlStreamedTable.unique_keys``)."""
        wanted = set(key)
        if not any(set(columns) <= wanted and not_null for _, columns, not_null in keys):
            raise self._fail(
                f"the table has no primary key nor a unique key of NOT NULL columns within the merge key "
                f"{sorted(wanted)}: the binlog's changes could not be told apart by key. Add one (ALTER TABLE "
                f"{table_ref} ADD PRIMARY KEY (...))"
            )

    def _check_server_id(self, cur: Any, own: int) -> None:
        import pymysql

        if self.server_id == 0:
            return  # read as mysqlbinlog reads: never registered, never clashing with a replica
        if self.server_id == own:
            raise self._fail(f"source.server_id {self.server_id} is the server's own id: give the table another, or 0")
        try:
            cur.execute("SHOW SLAVE HOSTS")
            replicas = {int(row[0]) for row in cur.fetchall()}
        except pymysql.MySQLError as exc:
            raise self._fail(
                f"source.server_id {self.server_id} cannot be checked against the server's replicas ({exc}): GRANT "
                "REPLICATION MASTER ADMIN (MySQL: REPLICATION SLAVE) to the user, or use server_id 0 (the default: "
                "never registered, never clashing)"
            ) from exc
        if self.server_id in replicas:
            raise self._fail(
                f"source.server_id {self.server_id} is a replica's: reading the binlog with it would disconnect that "
                "replica. Give the table an id no replica has, or 0"
            )

    def _check_privileges(self, cur: Any) -> None:
        cur.execute("SELECT CURRENT_USER(), CURRENT_ROLE()")
        user, role = cur.fetchone()
        if role not in (None, "NONE"):
            return  # a role's privileges do not show below: a read the server refuses names the grant then
        name, _, host = str(user).rpartition("@")
        cur.execute(
            "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s",
            (f"'{name}'@'{host}'",),
        )
        held = {str(row[0]).upper() for row in cur.fetchall()}
        missing = []
        if not held & {"REPLICATION SLAVE", "REPLICATION REPLICA"}:
            missing.append("REPLICATION SLAVE (to read the binlog)")
        if not held & {"BINLOG MONITOR", "REPLICATION CLIENT", "SUPER"}:
            missing.append("BINLOG MONITOR (MySQL: REPLICATION CLIENT; to see where the binlog ends)")
        if missing:
            raise self._fail(f"the user lacks {' and '.join(missing)}: GRANT them ON *.* to {user}")

    # -- where the binlog stands -------------------------------------------------------------------
    def end(self, conn: Any) -> BinlogEnd:
        """Where the binlog ends (the end of its last whole transaction), and its files."""
        import pymysql

        with conn.cursor() as cur:
            try:
                try:
                    cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.2 and later
                except pymysql.err.ProgrammingError:
                    cur.execute("SHOW MASTER STATUS")
                status = cur.fetchone()
                cur.execute("SHOW BINARY LOGS")
                logs = cur.fetchall()
            except pymysql.MySQLError as exc:
                raise SourceError(f"{self.display_name}: reading where the binlog ends failed: {exc}") from exc
        if status is None:
            raise self._fail("the server writes no binlog (log_bin is off)")
        files = BinlogFiles.of(str(status[0]))
        sizes = {file_number(str(row[0])): int(row[1]) for row in logs}
        return BinlogEnd(pack(str(status[0]), int(status[1])), files, sizes)

    def held_from(self, end: BinlogEnd, position: int, where: str) -> None:
        """Fail unless the server still holds the binlog from ``position`` on (the lake's, ``where`` as the lake
        names it).

        Raises:
            ChangeStreamUnavailable: its file was purged, or the position lies beyond the binlog's end (another
                server, or a binlog lost in a crash).
        """
        number, offset = unpack(position)
        if number not in end.sizes:
            oldest = min(end.sizes, default=None)
            raise self._fail(
                f"the server no longer holds binlog file {where.rpartition(':')[0]} the lake's position {where} is in "
                f"(its oldest is {end.files.name(oldest) if oldest is not None else 'none'}): it was purged (PURGE "
                "BINARY LOGS, binlog_expire_logs_seconds or expire_logs_days) before the lake got its changes, which "
                "can no longer be read. Load the table again: drop the lake table, then reset the table (the next "
                "round takes a new snapshot); and keep the binlog longer than the table's rounds may fall behind"
            )
        if position > end.position or offset > end.sizes[number]:
            raise self._fail(
                f"the lake's position {where} lies beyond the server's binlog (it ends at "
                f"{end.files.name(unpack(end.position)[0])}:{unpack(end.position)[1]}): the lake was tiered from "
                "another server, or the server lost the end of its binlog. Load the table again: drop the lake "
                "table, then reset the table"
            )

    def snapshot_position(self, conn: Any) -> tuple[str, int]:
        """In a transaction just started ``WITH CONSISTENT SNAPSHOT``: the binlog position its snapshot stands at
        (MariaDB's ``binlog_snapshot_file`` and ``binlog_snapshot_position``: no lock needed).

        Raises:
            ChangeStreamUnavailable: the server does not tell it (MySQL).
        """
        with conn.cursor() as cur:
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            found = {str(name).lower(): value for name, value in cur.fetchall()}
        file, position = found.get("binlog_snapshot_file"), found.get("binlog_snapshot_position")
        if not file or position is None:
            raise self._fail(
                "the server does not tell the binlog position of a consistent snapshot (binlog_snapshot_file, "
                "binlog_snapshot_position: MariaDB does, MySQL does not), which the first load reads at; tiering "
                "MySQL tables from their binlog is not supported yet (tier the table by a cursor instead)"
            )
        return str(file), int(position)

    def gtid_at(self, conn: Any, file: str, offset: int) -> str | None:
        """The server's GTID position at a binlog position (MariaDB's ``BINLOG_GTID_POS``); None where it has none."""
        import pymysql

        try:
            with conn.cursor() as cur:
                cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))
                (found,) = cur.fetchone()
        except pymysql.MySQLError:  # MySQL has no such function
            return None
        return None if found in (None, "") else str(found)

    def expiry(self, conn: Any) -> dict[str, Any]:
        """How long the server keeps its binlog."""
        import pymysql

        with conn.cursor() as cur:
            try:
                cur.execute("SELECT @@GLOBAL.binlog_expire_logs_seconds")
                (seconds,) = cur.fetchone()
            except pymysql.MySQLError:
                cur.execute("SELECT @@GLOBAL.expire_logs_days * 86400")
                (seconds,) = cur.fetchone()
        return {"binlog_expire_logs_seconds": None if seconds is None else int(seconds)}
