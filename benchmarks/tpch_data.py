"""Load TPC-H ``lineitem`` into PostgreSQL, and measure how fast it reads back.

Data comes from the ``tpchgen-cli`` pip package (a Rust TPC-H generator):
``tpchgen-cli csv -s SF -T lineitem --stdout --no-progress`` is piped
straight into ``COPY ... FROM STDIN (FORMAT csv, HEADER true, FREEZE true)``
through psycopg 3's ``cursor.copy()``, so nothing is written to disk but the
table itself, and generation overlaps with the load.

The table gets the standard TPC-H column types plus a surrogate cursor
column ``l_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY``, numbered in
generation order (``l_orderkey, l_linenumber``), for incremental tiering.

Speed: the table is created, filled with ``COPY FREEZE`` (rows are written
frozen and all-visible, so the first reader pays no hint-bit writes and no
VACUUM is needed), and its primary key built after the data, all in one
transaction; then ``ANALYZE``. On a server with ``wal_level=minimal`` the
COPY also skips WAL.

Idempotence: a successful load leaves a table comment
``tpch lineitem sf=<SF> rows=<N>``; a later call with the same SF skips the
load when the comment is there and ``count(*)`` matches; anything else
(no table, another SF, a wrong count) drops and reloads. A crashed load
leaves nothing behind: it is one transaction.

CLI::

    python -m benchmarks.tpch_data --dsn postgresql://u:p@127.0.0.1:5432/db --sf 1
    python -m benchmarks.tpch_data --temp-server --sf 0.01 --drain
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

TABLE = "lineitem"
CHUNK_BYTES = 1 << 20
#: The single COPY backend parses ~3-4x slower than one generator thread
#: produces, so one thread keeps up; more only steal CPU from the backend.
GENERATOR_THREADS = 1

#: Columns in tpchgen-cli's CSV order (the TPC-H spec order).
LINEITEM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("l_orderkey", "bigint not null"),
    ("l_partkey", "integer not null"),
    ("l_suppkey", "integer not null"),
    ("l_linenumber", "integer not null"),
    ("l_quantity", "numeric(15,2) not null"),
    ("l_extendedprice", "numeric(15,2) not null"),
    ("l_discount", "numeric(15,2) not null"),
    ("l_tax", "numeric(15,2) not null"),
    ("l_returnflag", "char(1) not null"),
    ("l_linestatus", "char(1) not null"),
    ("l_shipdate", "date not null"),
    ("l_commitdate", "date not null"),
    ("l_receiptdate", "date not null"),
    ("l_shipinstruct", "char(25) not null"),
    ("l_shipmode", "char(10) not null"),
    ("l_comment", "varchar(44) not null"),
)
CURSOR_COLUMN = "l_id"

#: The other TPC-H tables (tpchgen-cli's CSV column order) and the surrogate cursor column each gets.
OTHER_TABLES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "region": (
        "r_id",
        (("r_regionkey", "integer not null"), ("r_name", "char(25) not null"), ("r_comment", "varchar(152)")),
    ),
    "nation": (
        "n_id",
        (
            ("n_nationkey", "integer not null"),
            ("n_name", "char(25) not null"),
            ("n_regionkey", "integer not null"),
            ("n_comment", "varchar(152)"),
        ),
    ),
    "part": (
        "p_id",
        (
            ("p_partkey", "bigint not null"),
            ("p_name", "varchar(55) not null"),
            ("p_mfgr", "char(25) not null"),
            ("p_brand", "char(10) not null"),
            ("p_type", "varchar(25) not null"),
            ("p_size", "integer not null"),
            ("p_container", "char(10) not null"),
            ("p_retailprice", "numeric(15,2) not null"),
            ("p_comment", "varchar(23) not null"),
        ),
    ),
    "supplier": (
        "s_id",
        (
            ("s_suppkey", "bigint not null"),
            ("s_name", "char(25) not null"),
            ("s_address", "varchar(40) not null"),
            ("s_nationkey", "integer not null"),
            ("s_phone", "char(15) not null"),
            ("s_acctbal", "numeric(15,2) not null"),
            ("s_comment", "varchar(101) not null"),
        ),
    ),
    "partsupp": (
        "ps_id",
        (
            ("ps_partkey", "bigint not null"),
            ("ps_suppkey", "bigint not null"),
            ("ps_availqty", "integer not null"),
            ("ps_supplycost", "numeric(15,2) not null"),
            ("ps_comment", "varchar(199) not null"),
        ),
    ),
    "customer": (
        "c_id",
        (
            ("c_custkey", "bigint not null"),
            ("c_name", "varchar(25) not null"),
            ("c_address", "varchar(40) not null"),
            ("c_nationkey", "integer not null"),
            ("c_phone", "char(15) not null"),
            ("c_acctbal", "numeric(15,2) not null"),
            ("c_mktsegment", "char(10) not null"),
            ("c_comment", "varchar(117) not null"),
        ),
    ),
    "orders": (
        "o_id",
        (
            ("o_orderkey", "bigint not null"),
            ("o_custkey", "bigint not null"),
            ("o_orderstatus", "char(1) not null"),
            ("o_totalprice", "numeric(15,2) not null"),
            ("o_orderdate", "date not null"),
            ("o_orderpriority", "char(15) not null"),
            ("o_clerk", "char(15) not null"),
            ("o_shippriority", "integer not null"),
            ("o_comment", "varchar(79) not null"),
        ),
    ),
}
#: Every TPC-H table: name -> (cursor column, columns).
TPCH_TABLES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    **OTHER_TABLES,
    "lineitem": (CURSOR_COLUMN, LINEITEM_COLUMNS),
}

#: lineitem row counts produced by tpchgen-cli 4.0.0 (a cross-check; any SF works).
KNOWN_ROW_COUNTS: dict[float, int] = {
    0.001: 6_005,
    0.01: 60_175,
    0.1: 600_572,
    1.0: 6_001_215,
    10.0: 59_986_052,
}

_COMMENT_RE = re.compile(r"^tpch (?P<table>\w+) sf=(?P<sf>\S+) rows=(?P<rows>\d+)")


class DrainResult(NamedTuple):
    """What ``drain_copy_binary`` read: bytes of COPY binary data, wall seconds."""

    nbytes: int
    seconds: float


class LoadTimings(NamedTuple):
    rows: int
    skipped: bool
    copy_seconds: float  # generation + COPY (they overlap)
    index_seconds: float
    analyze_seconds: float
    total_seconds: float


def format_sf(scale_factor: float) -> str:
    """``1`` not ``1.0``, ``0.01`` not ``1e-02``."""
    if scale_factor <= 0:
        raise ValueError(f"scale factor must be > 0, got {scale_factor}")
    return format(scale_factor, "f").rstrip("0").rstrip(".")


def tpchgen_cli() -> str:
    """Path of ``tpchgen-cli``: next to this Python (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.is_file():
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if found:
        return found
    raise RuntimeError(
        "tpchgen-cli not found; install it with `pip install tpchgen-cli` into the environment that runs this script"
    )


def tpchgen_command(scale_factor: float, threads: int = GENERATOR_THREADS, tpch_table: str = TABLE) -> list[str]:
    """The generator invocation: one table (lineitem by default) as CSV with a header row, on stdout."""
    return [
        tpchgen_cli(),
        "csv",
        "--scale-factor",
        format_sf(scale_factor),
        "--tables",
        tpch_table,
        "--num-threads",
        str(threads),
        "--stdout",
        "--no-progress",
        "--quiet",
    ]


def _ident(table: str) -> sql.Composable:
    """``schema.table`` or ``table`` as a quoted identifier."""
    return sql.Identifier(*table.split(".", 1))


def _create_table_sql(table: str, tpch_table: str = TABLE) -> sql.Composed:
    cursor, columns = TPCH_TABLES[tpch_table]
    cols = [sql.SQL("{} bigint generated always as identity").format(sql.Identifier(cursor))]
    cols += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in columns]
    return sql.SQL("create table {} ({})").format(_ident(table), sql.SQL(", ").join(cols))


def _comment(scale_factor: float, rows: int, tpch_table: str = TABLE) -> str:
    return f"tpch {tpch_table} sf={format_sf(scale_factor)} rows={rows}"


def existing_rows(conn: psycopg.Connection, table: str, scale_factor: float, tpch_table: str = TABLE) -> int | None:
    """Row count of an existing complete load at this SF, else ``None``."""
    row = conn.execute("select obj_description(to_regclass(%s), 'pg_class')", (table,)).fetchone()
    comment = row[0] if row else None
    match = _COMMENT_RE.match(comment or "")
    if not match or match.group("sf") != format_sf(scale_factor) or match.group("table") != tpch_table:
        return None
    expected = int(match.group("rows"))
    known = KNOWN_ROW_COUNTS.get(float(scale_factor)) if tpch_table == TABLE else None
    if known is not None and known != expected:
        return None
    count_row = conn.execute(sql.SQL("select count(*) from {}").format(_ident(table))).fetchone()
    actual = int(count_row[0]) if count_row else -1
    return actual if actual == expected else None


def load_lineitem_timed(
    dsn: str,
    scale_factor: float,
    workdir: Path,
    *,
    table: str = TABLE,
    force: bool = False,
    tpch_table: str = TABLE,
) -> LoadTimings:
    """``load_lineitem`` that also reports how long each phase took.

    ``workdir`` receives the generator's stderr (``tpchgen-<sf>.log``); no
    data files are written, the CSV is streamed.
    """
    began = time.perf_counter()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(dsn) as conn:
        if not force:
            rows = existing_rows(conn, table, scale_factor, tpch_table)
            conn.rollback()
            if rows is not None:
                log.info(
                    "%s already holds SF %s (%d rows): skipping",
                    table,
                    scale_factor,
                    rows,
                )
                elapsed = time.perf_counter() - began
                return LoadTimings(rows, True, 0.0, 0.0, 0.0, elapsed)

        cursor_column, table_columns = TPCH_TABLES[tpch_table]
        cmd = tpchgen_command(scale_factor, tpch_table=tpch_table)
        log.info("loading %s at SF %s: %s | COPY", table, scale_factor, " ".join(cmd))
        errlog_path = workdir / f"tpchgen-{tpch_table}-sf{format_sf(scale_factor)}.log"
        columns = sql.SQL(", ").join(sql.Identifier(n) for n, _ in table_columns)
        copy_sql = sql.SQL("copy {} ({}) from stdin (format csv, header true, freeze true)").format(
            _ident(table), columns
        )

        t0 = time.perf_counter()
        with errlog_path.open("wb") as errlog, conn.transaction():
            conn.execute(sql.SQL("drop table if exists {}").format(_ident(table)))
            conn.execute(_create_table_sql(table, tpch_table))
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errlog, stdin=subprocess.DEVNULL) as proc:
                assert proc.stdout is not None
                try:
                    with conn.cursor() as cur:
                        with cur.copy(copy_sql) as copy:
                            while chunk := proc.stdout.read(CHUNK_BYTES):
                                copy.write(chunk)
                            if proc.wait() != 0:
                                # raising inside the copy block aborts the COPY
                                raise RuntimeError(
                                    f"tpchgen-cli exited with {proc.returncode}: "
                                    f"{errlog_path.read_text(errors='replace')[-2000:]}"
                                )
                        rows = cur.rowcount  # set when the COPY completes
                except BaseException:
                    proc.kill()
                    raise
            t1 = time.perf_counter()
            conn.execute(
                sql.SQL("alter table {} add constraint {} primary key ({})").format(
                    _ident(table),
                    sql.Identifier(f"{table.rsplit('.', 1)[-1]}_pkey"),
                    sql.Identifier(cursor_column),
                )
            )
            t2 = time.perf_counter()
            conn.execute(
                sql.SQL("comment on table {} is {}").format(
                    _ident(table), sql.Literal(_comment(scale_factor, rows, tpch_table))
                )
            )
        conn.execute(sql.SQL("analyze {}").format(_ident(table)))
        conn.commit()
        t3 = time.perf_counter()

    known = KNOWN_ROW_COUNTS.get(float(scale_factor)) if tpch_table == TABLE else None
    if known is not None and rows != known:
        raise RuntimeError(f"loaded {rows} rows at SF {scale_factor}, expected {known}")
    timings = LoadTimings(rows, False, t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - began)
    log.info(
        "loaded %d rows: copy %.2fs, primary key %.2fs, analyze %.2fs, total %.2fs",
        rows,
        timings.copy_seconds,
        timings.index_seconds,
        timings.analyze_seconds,
        timings.total_seconds,
    )
    return timings


def load_lineitem(dsn: str, scale_factor: float, workdir: Path) -> int:
    """Load TPC-H ``lineitem`` at ``scale_factor`` into ``dsn``; return its row count.

    Skips the load when the table already holds a complete load at this SF.
    """
    return load_lineitem_timed(dsn, scale_factor, workdir).rows


def load_tpch(
    dsn: str, scale_factor: float, workdir: Path, tables: tuple[str, ...] = tuple(TPCH_TABLES)
) -> dict[str, int]:
    """Load the given TPC-H tables (all 8 by default) at ``scale_factor``; returns rows per table."""
    return {t: load_lineitem_timed(dsn, scale_factor, workdir, table=t, tpch_table=t).rows for t in tables}


def drain_copy_binary(dsn: str, table: str = TABLE) -> DrainResult:
    """Time ``COPY <table> TO STDOUT (FORMAT binary)`` read and thrown away.

    The client-side read limit for a full-table extract through psycopg
    (server COPY encoding + one libpq message per row + Python loop).
    Returns the bytes read and the wall seconds.
    """
    query = sql.SQL("copy {} to stdout (format binary)").format(_ident(table))
    nbytes = 0
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        began = time.perf_counter()
        with cur.copy(query) as copy:
            for block in copy:
                nbytes += len(block)
        seconds = time.perf_counter() - began
    return DrainResult(nbytes, seconds)


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--dsn", help="libpq URI of the target database")
    target.add_argument(
        "--temp-server",
        action="store_true",
        help="start a throw-away PostgresServer (testbed/pg_server.py) in a temp dir, "
        "load into it, and stop and delete it afterwards",
    )
    parser.add_argument("--sf", type=float, default=0.01, help="TPC-H scale factor (default 0.01)")
    parser.add_argument("--workdir", type=Path, help="for the generator log (default: a temp dir)")
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--force", action="store_true", help="reload even if already loaded")
    parser.add_argument(
        "--drain",
        action="store_true",
        help="then time COPY ... TO STDOUT (FORMAT binary)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    with tempfile.TemporaryDirectory(prefix="tpch-") as tmp:
        workdir = args.workdir or Path(tmp)
        if args.temp_server:
            repo_root = str(Path(__file__).resolve().parents[1])
            if repo_root not in sys.path:  # run as `python benchmarks/tpch_data.py`
                sys.path.insert(0, repo_root)
            from testbed.pg_server import PostgresServer

            with PostgresServer(Path(tmp) / "pgdata") as server:
                log.info("temp server up in %.2fs at %s", server.startup_seconds, server.dsn)
                _run(server.dsn, args, workdir)
        else:
            _run(args.dsn, args, workdir)
    return 0


def _run(dsn: str, args: argparse.Namespace, workdir: Path) -> None:
    timings = load_lineitem_timed(dsn, args.sf, workdir, table=args.table, force=args.force)
    print(
        f"sf={format_sf(args.sf)} rows={timings.rows} skipped={timings.skipped} "
        f"copy={timings.copy_seconds:.2f}s pk={timings.index_seconds:.2f}s "
        f"analyze={timings.analyze_seconds:.2f}s total={timings.total_seconds:.2f}s"
    )
    if args.drain:
        result = drain_copy_binary(dsn, args.table)
        mib = result.nbytes / 2**20
        print(
            f"drain copy binary: {result.nbytes} bytes ({mib:.1f} MiB) in {result.seconds:.2f}s "
            f"= {mib / result.seconds:.1f} MiB/s, {timings.rows / result.seconds:,.0f} rows/s"
        )


if __name__ == "__main__":
    raise SystemExit(_main())
