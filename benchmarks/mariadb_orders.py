"""``bench_merge``'s two orders tables on MariaDB: TPC-H ``orders`` loaded twice with a version column, changed alike,
one merged by its cursor with its keys reconciled every round (today's way to see MariaDB's hard deletes and key
changes: every key read), the other tiered from the binlog (``mysql_cdc``). A throw-away server with its binlog on
(``testbed/mariadb_server.py``), ``tpchgen-cli`` and ``LOAD DATA LOCAL INFILE``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.tpch_data import OTHER_TABLES, format_sf, tpchgen_command

#: MariaDB's types of the orders columns (the PostgreSQL loader's, in MariaDB's words).
_TYPES = {"numeric(15,2) not null": "DECIMAL(15,2) NOT NULL", "integer not null": "INT NOT NULL"}


@contextmanager
def mariadb_scratch(workdir: Path) -> Iterator[Any]:
    """A throw-away MariaDB server writing a row binlog, under ``workdir`` (stopped afterwards)."""
    from testbed.mariadb_server import MariaDBServer

    with MariaDBServer(workdir / "mariadb", binlog=True, settings={"max_binlog_size": "1G"}) as server:
        yield server


def load_orders(server: Any, tables: Sequence[str], key: str, cursor: str, sf: float, workdir: Path) -> int:
    """``orders`` at ``sf`` loaded into each of ``tables`` (``key`` an AUTO_INCREMENT primary key, ``cursor`` a version
    column, 0 for every row), left out of the binlog: the setting up, not a change. The rows loaded into each."""
    key_column, columns = OTHER_TABLES["orders"]
    definitions = ", ".join(f"{name} {_TYPES.get(kind, kind.upper())}" for name, kind in columns)
    csv_path = workdir / f"orders-sf{format_sf(sf)}.csv"
    with csv_path.open("wb") as out:
        subprocess.run(tpchgen_command(sf, tpch_table="orders"), stdout=out, stdin=subprocess.DEVNULL, check=True)
    rows = 0
    try:
        # The administrator's session: it may leave the load out of the binlog.
        with server.admin_connect(local_infile=True, database=server.database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION unique_checks = 0, foreign_key_checks = 0, sql_log_bin = 0")
            for table in tables:
                cur.execute(f"DROP TABLE IF EXISTS {table}")
                cur.execute(
                    f"CREATE TABLE {table} ({key} BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, {definitions}, "
                    f"{cursor} BIGINT NOT NULL DEFAULT 0, KEY ({cursor})) ENGINE=InnoDB"
                )
                rows = cur.execute(
                    f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' "
                    "OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\n' IGNORE 1 LINES "
                    f"({', '.join(name for name, _ in columns)})",
                    (str(csv_path),),
                )
                cur.execute(f"ANALYZE TABLE {table}")
                cur.fetchall()
    finally:
        csv_path.unlink(missing_ok=True)
    assert key_column == key, (key_column, key)
    return int(rows)


class MariaDBOrders:
    """The merge table and the change-stream table on one MariaDB server (see the module's description)."""

    def __init__(self, server: Any, merge_table: str, cdc_table: str, key: str, cursor: str) -> None:
        self.server = server
        self.merge_table, self.cdc_table, self.key, self.cursor = merge_table, cdc_table, key, cursor
        self.uri: str = server.url

    def prepare(self, sf: float, workdir: Path) -> int:
        """Both tables loaded with ``orders`` at ``sf`` (``o_id`` its key, ``o_ver`` 0 for every row)."""
        rows = load_orders(self.server, (self.merge_table, self.cdc_table), self.key, self.cursor, sf, workdir)
        with self.server.admin_connect(database=self.server.database) as conn, conn.cursor() as cur:
            cur.execute("DROP SEQUENCE IF EXISTS orders_ver")
            cur.execute("CREATE SEQUENCE orders_ver")
        return rows

    def make_changes(self, updated_bp: int, deleted_bp: int, seed: int, recent: str | None = None) -> dict[str, int]:
        """The same changes to both tables, as ``bench_merge.make_changes`` makes them on PostgreSQL: keys chosen by a
        hash of the key and ``seed``; a delete is a ``DELETE`` in both (the merge table's reconciliation finds it)."""
        where = f"o_orderdate >= DATE '{recent}' AND " if recent else ""
        updated = f"{where}(({self.key} * 7919 + {seed}) % 10000) < {updated_bp}"
        deleted = f"{where}(({self.key} * 104729 + {seed} * 31) % 10000) < {deleted_bp}"
        counts: dict[str, int] = {}
        with self.server.connect(autocommit=True) as conn, conn.cursor() as cur:
            for table in (self.merge_table, self.cdc_table):
                counts[f"{table}_updated"] = cur.execute(
                    f"UPDATE {table} SET o_totalprice = o_totalprice + 1, o_orderstatus = 'U', "
                    f"{self.cursor} = NEXTVAL(orders_ver) WHERE {updated}"
                )
                counts[f"{table}_deleted"] = cur.execute(f"DELETE FROM {table} WHERE {deleted}")
        if counts[f"{self.merge_table}_updated"] != counts[f"{self.cdc_table}_updated"]:
            raise AssertionError(f"the two tables got different changes: {counts}")
        return counts

    def summary(self, table: str) -> dict[str, Any]:
        with self.server.connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT count(*), count(DISTINCT {self.key}), coalesce(sum({self.cursor}), 0), sum(o_totalprice) "
                f"FROM {table}"
            )
            row = cur.fetchone()
        return {"rows": int(row[0]), "keys": int(row[1]), "version_sum": int(row[2]), "price_sum": str(row[3])}

    def max_version(self) -> int:
        with self.server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT coalesce(max({self.cursor}), 0) FROM {self.merge_table}")
            return int(cur.fetchone()[0])
