"""Benchmark: which reader drains a MariaDB table to Arrow record batches fastest, and in how much memory.

A throw-away MariaDB server (``testbed.mariadb_server.MariaDBServer``, data directory ``<workdir>/mariadb``, reused
across runs) gets TPC-H ``lineitem`` at ``--sf`` (standard TPC-H column types: DECIMAL(15,2), DATE, CHAR/VARCHAR,
INT/BIGINT, plus a surrogate cursor ``l_id BIGINT AUTO_INCREMENT PRIMARY KEY`` numbered in generation order).
``tpchgen-cli`` writes the CSV to a temporary file under the workdir and ``LOAD DATA LOCAL INFILE`` (PyMySQL,
``local_infile=True``) loads it into the empty table with ``unique_checks=0`` (InnoDB's bulk-insert path). The load
is skipped when the table comment says ``tpch lineitem sf=<SF> rows=<N>`` and ``count(*)`` agrees.

Then ``SELECT <all columns> FROM lineitem`` is drained to Arrow (never pandas) by each reader in its own child
Python process (so import, start-up and memory are per reader), ``--repeat`` rounds, the order reversed every
other round. Each child reports the drain time (connect + query + every batch, imports excluded), the number and
size of the batches, a checksum (row count and ``sum(l_id)``) and its RSS after imports; the parent measures the
process's wall time and its peak RSS (``os.wait4``'s ``ru_maxrss``). Readers:

* ``cx-stream``       connectorx ``read_sql(url, q, return_type="arrow_stream")``, default ``batch_size`` (10000)
* ``cx-stream-64k``   the same with ``batch_size=65536``
* ``cx-stream-text``  the same (64k) with ``protocol="text"`` (the default ``binary`` uses prepared statements)
* ``cx-arrow``        connectorx ``return_type="arrow"``: the whole result as one ``pyarrow.Table``
* ``pymysql``         PyMySQL unbuffered ``SSCursor``, ``fetchmany(65536)`` -> ``pa.array(column, type)`` per column
* ``pymysql-strcast`` the same with no PyMySQL converters (values stay bytes), then Arrow casts to int/decimal/date
* ``mysql-connector`` mysql-connector-python's C extension, unbuffered cursor, ``fetchmany(65536)`` like ``pymysql``
* ``mariadb``         the ``mariadb`` connector (MariaDB Connector/C), unbuffered cursor, ``fetchmany(65536)``

A reader whose package is missing is skipped. A second pass (``--slow-consumer-rate``, default 500000 rows/s;
0 skips it) runs each streaming reader once more with a consumer that spends ``rows / rate`` seconds on every
batch, like a Parquet writer would: a reader that does not apply back-pressure buffers the difference. A third
(``--failure``, on by default) kills the reading session mid-stream (``KILL CONNECTION``) and checks whether each
reader raises or silently returns fewer rows.

``--types`` instead reports connectorx's Arrow type for each MariaDB column type (binary and text protocol,
``arrow`` and ``arrow_stream``), and whether values, edge values and NULLs come back exactly.

Results (JSON) go to ``<workdir>/readers-sf<SF>.json`` and ``<workdir>/types.json``.

    python -m benchmarks.bench_mariadb_readers --sf 1 --repeat 3
    python -m benchmarks.bench_mariadb_readers --sf 0.01 --repeat 1 --readers cx-stream,pymysql   # smoke run
    python -m benchmarks.bench_mariadb_readers --types
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Only the standard library at module level: a child process imports its reader's driver before pyarrow
# (mysql-connector-python's C extension fails with "cannot allocate memory in static TLS block" after pyarrow).

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "bench_mariadb_readers"
TABLE = "lineitem"
CURSOR_COLUMN = "l_id"
FETCH_SIZE = 65536
MIB = 1024 * 1024
READERS: dict[str, str] = {
    "cx-stream": "connectorx arrow_stream, batch_size=10000 (default), binary protocol",
    "cx-stream-64k": "connectorx arrow_stream, batch_size=65536, binary protocol",
    "cx-stream-text": "connectorx arrow_stream, batch_size=65536, text protocol",
    "cx-arrow": "connectorx arrow (whole pyarrow.Table)",
    "pymysql": "PyMySQL SSCursor fetchmany(65536) -> pa.array per column",
    "pymysql-strcast": "PyMySQL SSCursor, no converters, Arrow casts from strings",
    "mysql-connector": "mysql-connector-python C extension, unbuffered, fetchmany(65536)",
    "mariadb": "mariadb connector (Connector/C), unbuffered, fetchmany(65536)",
}
STREAMING_READERS = ("cx-stream", "cx-stream-64k", "pymysql", "mysql-connector", "mariadb")


def driver_module(reader: str) -> str:
    """The module a reader imports (a child imports it before pyarrow)."""
    if reader.startswith("cx-"):
        return "connectorx"
    if reader.startswith("pymysql"):
        return "pymysql"
    return {"mysql-connector": "mysql.connector", "mariadb": "mariadb"}[reader]


def mariadb_type(pg_type: str) -> str:
    """TPC-H column type as written in ``benchmarks.tpch_data`` (PostgreSQL) -> MariaDB."""
    text = pg_type.upper().replace("NUMERIC", "DECIMAL").replace("INTEGER", "INT")
    return re.sub(r"\s+", " ", text)


def lineitem_columns() -> list[tuple[str, str]]:
    """``(name, MariaDB type)`` in CSV order, without the cursor column."""
    from benchmarks.tpch_data import LINEITEM_COLUMNS

    return [(name, mariadb_type(pg_type)) for name, pg_type in LINEITEM_COLUMNS]


def select_query(columns: list[tuple[str, str]]) -> str:
    names = [CURSOR_COLUMN, *(name for name, _ in columns)]
    return f"SELECT {', '.join(names)} FROM {TABLE}"


def arrow_type(sql_type: str) -> Any:
    """The Arrow type a tiering source would give a MariaDB column type (the subset TPC-H uses)."""
    import pyarrow as pa

    base = sql_type.upper().split(" NOT NULL")[0].strip()
    if base.startswith("BIGINT"):
        return pa.int64()
    if base.startswith("INT"):
        return pa.int32()
    if match := re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", base):
        return pa.decimal128(int(match.group(1)), int(match.group(2)))
    if base == "DATE":
        return pa.date32()
    if base.startswith(("CHAR", "VARCHAR")):
        return pa.string()
    raise ValueError(f"no Arrow type for {sql_type!r}")


# -- loading ---------------------------------------------------------------------------------------------------
def _table_comment(scale_factor: float, rows: int) -> str:
    from benchmarks.tpch_data import format_sf

    return f"tpch {TABLE} sf={format_sf(scale_factor)} rows={rows}"


def existing_rows(conn: Any, scale_factor: float) -> int | None:
    """Row count of a complete load at this SF (table comment + ``count(*)``), else ``None``."""
    from benchmarks.tpch_data import KNOWN_ROW_COUNTS, format_sf

    with conn.cursor() as cur:
        cur.execute(
            "SELECT table_comment FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = %s",
            (TABLE,),
        )
        row = cur.fetchone()
        match = re.match(r"^tpch (\w+) sf=(\S+) rows=(\d+)$", row[0] if row else "")
        if not match or match.group(1) != TABLE or match.group(2) != format_sf(scale_factor):
            return None
        expected = int(match.group(3))
        known = KNOWN_ROW_COUNTS.get(float(scale_factor))
        if known is not None and known != expected:
            return None
        cur.execute(f"SELECT count(*) FROM {TABLE}")
        count_row = cur.fetchone()
        return expected if count_row and int(count_row[0]) == expected else None


def load_lineitem(db: Any, scale_factor: float, workdir: Path, *, force: bool = False) -> dict[str, Any]:
    """Generate lineitem at ``scale_factor`` and load it, unless already there; returns timings."""
    from benchmarks.tpch_data import format_sf, tpchgen_command

    began = time.perf_counter()
    columns = lineitem_columns()
    with db.connect(local_infile=True, autocommit=True) as conn:
        if not force:
            rows = existing_rows(conn, scale_factor)
            if rows is not None:
                print(f"{TABLE} already holds SF {format_sf(scale_factor)} ({rows:,} rows): load skipped", flush=True)
                return {"rows": rows, "skipped": True, "seconds": round(time.perf_counter() - began, 2)}
        csv_path = workdir / f"{TABLE}-sf{format_sf(scale_factor)}.csv"
        cmd = tpchgen_command(scale_factor, threads=os.cpu_count() or 1)
        print(f"generating: {' '.join(cmd)} > {csv_path}", flush=True)
        try:
            with csv_path.open("wb") as out:
                subprocess.run(cmd, stdout=out, stdin=subprocess.DEVNULL, check=True)
            t_generated = time.perf_counter()
            col_defs = ", ".join(f"{name} {sql_type}" for name, sql_type in columns)
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
                cur.execute(
                    f"CREATE TABLE {TABLE} ({CURSOR_COLUMN} BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, {col_defs})"
                    " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='loading'"
                )
                # Empty table + unique_checks=0 + foreign_key_checks=0: InnoDB's bulk insert (no row-level undo).
                cur.execute("SET SESSION unique_checks = 0, foreign_key_checks = 0")
                print(f"loading {csv_path.stat().st_size / MIB:,.0f} MiB with LOAD DATA LOCAL INFILE", flush=True)
                rows = cur.execute(
                    f"LOAD DATA LOCAL INFILE %s INTO TABLE {TABLE} CHARACTER SET utf8mb4"
                    " FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\n'"
                    f" IGNORE 1 LINES ({', '.join(name for name, _ in columns)})",
                    (str(csv_path),),
                )
                cur.execute("SHOW WARNINGS LIMIT 5")
                warnings = cur.fetchall()
                if warnings:
                    raise RuntimeError(f"LOAD DATA warnings: {warnings}")
                t_loaded = time.perf_counter()
                cur.execute(f"ALTER TABLE {TABLE} COMMENT = %s", (_table_comment(scale_factor, rows),))
                cur.execute(f"ANALYZE TABLE {TABLE}")
                cur.fetchall()
        finally:
            csv_path.unlink(missing_ok=True)
    result = {
        "rows": rows,
        "skipped": False,
        "generate_seconds": round(t_generated - began, 2),
        "load_seconds": round(t_loaded - t_generated, 2),
        "seconds": round(time.perf_counter() - began, 2),
    }
    print(f"loaded {rows:,} rows: {result}", flush=True)
    return result


# -- child: one reader, one drain --------------------------------------------------------------------------------
def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _dbapi_batches(cursor: Any, schema: Any, fetch_size: int, cast_from_strings: bool = False) -> Iterator[Any]:
    import pyarrow as pa

    types = list(schema.types)
    while True:
        rows = cursor.fetchmany(fetch_size)
        if not rows:
            return
        arrays = []
        for values, typ in zip(zip(*rows), types):
            if cast_from_strings:
                first = next((v for v in values if v is not None), None)
                if isinstance(first, bytes | bytearray):
                    arrays.append(pa.array(values, pa.binary()).cast(pa.string()).cast(typ))
                else:
                    arrays.append(pa.array(values, pa.string()).cast(typ))
            else:
                arrays.append(pa.array(values, typ))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def reader_batches(reader: str, params: dict[str, Any], query: str, schema: Any) -> Iterator[Any]:
    """Record batches of ``query`` read by ``reader``; the driver is imported by the caller first."""
    url = params["url"]
    if reader.startswith("cx-"):
        import connectorx as cx

        if reader == "cx-arrow":
            table = cx.read_sql(url, query, return_type="arrow")
            yield from table.to_batches()
            return
        batch_size = 10000 if reader == "cx-stream" else params.get("fetch_size", FETCH_SIZE)
        protocol = "text" if reader == "cx-stream-text" else "binary"
        # connectorx 0.4.6's overloads have no return_type="arrow_stream" (it returns a pyarrow.RecordBatchReader)
        read_sql: Any = cx.read_sql
        yield from read_sql(url, query, return_type="arrow_stream", batch_size=batch_size, protocol=protocol)
        return
    if reader.startswith("pymysql"):
        import pymysql
        import pymysql.converters
        import pymysql.cursors

        kwargs: dict[str, Any] = {}
        if reader == "pymysql-strcast":
            # Keep the encoders (keyed by Python type), drop every decoder (keyed by MySQL field type).
            kwargs["conv"] = {k: v for k, v in pymysql.converters.conversions.items() if not isinstance(k, int)}
        conn = pymysql.connect(
            host=params["host"],
            port=params["port"],
            user=params["user"],
            password=params["password"],
            database=params["database"],
            charset="utf8mb4",
            cursorclass=pymysql.cursors.SSCursor,
            **kwargs,
        )
    elif reader == "mysql-connector":
        import mysql.connector

        conn = mysql.connector.connect(
            host=params["host"],
            port=params["port"],
            user=params["user"],
            password=params["password"],
            database=params["database"],
            use_pure=False,
        )
    elif reader == "mariadb":
        import mariadb

        conn = mariadb.connect(
            host=params["host"],
            port=params["port"],
            user=params["user"],
            password=params["password"],
            database=params["database"],
        )
    else:
        raise ValueError(f"unknown reader {reader!r}")
    try:
        cursor = conn.cursor(buffered=False) if reader in ("mysql-connector", "mariadb") else conn.cursor()
        cursor.execute(query)
        fetch_size = params.get("fetch_size", FETCH_SIZE)
        yield from _dbapi_batches(cursor, schema, fetch_size, cast_from_strings=reader == "pymysql-strcast")
    finally:
        with contextlib.suppress(Exception):  # e.g. a killed connection
            conn.close()


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """Drain the query with one reader; returns what the parent prints and records."""
    import importlib
    import resource

    t_import = time.perf_counter()
    importlib.import_module(driver_module(args.child))
    import pyarrow as pa
    import pyarrow.compute as pc

    import_seconds = time.perf_counter() - t_import
    params = json.loads(args.params)
    columns = [tuple(c) for c in params["columns"]]
    schema = pa.schema(
        [pa.field(CURSOR_COLUMN, pa.int64(), nullable=False)]
        + [
            pa.field(name, arrow_type(sql_type), nullable="NOT NULL" not in sql_type.upper())
            for name, sql_type in columns
        ]
    )
    query = params["query"]
    rss_before = _rss_bytes()
    rate = float(args.consume_rate or 0)
    rows = batches = max_batch = min_batch = 0
    id_sum = 0
    out_schema = None
    error = None
    began = time.perf_counter()
    try:
        for batch in reader_batches(args.child, params, query, schema):
            n = batch.num_rows
            if batches == 0:
                out_schema = batch.schema
                min_batch = n
                if args.kill_after_first_batch:
                    _kill_readers(params)
            rows += n
            batches += 1
            max_batch = max(max_batch, n)
            min_batch = min(min_batch, n)
            if n:
                id_sum += int(pc.sum(batch.column(0)).as_py())
            if rate:
                time.sleep(n / rate)
    except BaseException as exc:  # connectorx raises pyo3's PanicException, a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    seconds = time.perf_counter() - began
    return {
        "reader": args.child,
        "rows": rows,
        "id_sum": id_sum,
        "batches": batches,
        "max_batch_rows": max_batch,
        "min_batch_rows": min_batch,
        "seconds": round(seconds, 3),
        "import_seconds": round(import_seconds, 3),
        "rss_after_imports_mb": round(rss_before / MIB, 1),
        "peak_rss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "schema": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in out_schema]
        if out_schema
        else None,
        "error": error,
    }


def _kill_readers(params: dict[str, Any]) -> None:
    """KILL every other session of the main user (the reader's), from a fresh connection."""
    import pymysql

    conn = pymysql.connect(
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        database=params["database"],
        autocommit=True,
    )
    with conn, conn.cursor() as cur:
        cur.execute(
            "SELECT id FROM information_schema.processlist WHERE user = %s AND id <> CONNECTION_ID()",
            (params["user"],),
        )
        for (session_id,) in cur.fetchall():
            cur.execute(f"KILL CONNECTION {int(session_id)}")


# -- parent: run the children ------------------------------------------------------------------------------------
def reader_available(reader: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(driver_module(reader).split(".")[0]) is not None


def spawn_child(reader: str, params: dict[str, Any], workdir: Path, **options: Any) -> dict[str, Any]:
    """One child process; its JSON report plus wall seconds and the peak RSS from ``wait4``."""
    cmd = [sys.executable, "-m", "benchmarks.bench_mariadb_readers", "--child", reader, "--params", json.dumps(params)]
    if options.get("consume_rate"):
        cmd += ["--consume-rate", str(options["consume_rate"])]
    if options.get("kill"):
        cmd.append("--kill-after-first-batch")
    env = dict(os.environ, RUST_BACKTRACE="0", PYTHONPATH=str(REPO))
    out_path = workdir / "child.out"
    err_path = workdir / "child.err"
    began = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; tell Popen
    wall = time.perf_counter() - began
    lines = out_path.read_text().strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{reader} child failed (exit {proc.returncode}):\n{err_path.read_text()[-3000:]}")
    report = json.loads(lines[-1])
    report["wall_seconds"] = round(wall, 3)
    report["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    report["stderr_tail"] = err_path.read_text(errors="replace")[-500:] or None
    return report


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for dist in ("connectorx", "pyarrow", "PyMySQL", "mysql-connector-python", "mariadb", "tpchgen-cli"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def run_readers(args: argparse.Namespace, db: Any, workdir: Path) -> dict[str, Any]:
    from benchmarks.tpch_data import format_sf

    load_before = loadavg()
    load = load_lineitem(db, args.sf, workdir, force=args.force_load)
    total_rows = load["rows"]
    expected_sum = total_rows * (total_rows + 1) // 2
    columns = lineitem_columns()
    params = {
        "url": db.url,
        "host": db.host,
        "port": db.port,
        "user": db.user,
        "password": db.password,
        "database": db.database,
        "columns": columns,
        "query": select_query(columns),
        "fetch_size": args.fetch_size,
    }
    readers = [r for r in args.readers.split(",") if r]
    unknown = [r for r in readers if r not in READERS]
    if unknown:
        raise SystemExit(f"unknown readers {unknown}; choose from {list(READERS)}")
    skipped = [r for r in readers if not reader_available(r)]
    readers = [r for r in readers if r not in skipped]
    if skipped:
        print(f"skipped (package not installed): {skipped}", flush=True)
    # Warm the buffer pool once so the first reader does not pay for disk reads.
    with db.connect() as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        cur.execute(f"SELECT count(*), sum(length(l_comment)) FROM {TABLE}")
        cur.fetchall()
        print(f"warm-up scan: {time.perf_counter() - t0:.1f}s; load average {loadavg()}", flush=True)

    runs: list[dict[str, Any]] = []
    for round_no in range(args.repeat):
        order = readers if round_no % 2 == 0 else readers[::-1]
        for reader in order:
            report = spawn_child(reader, params, workdir)
            report["round"] = round_no
            report["checksum_ok"] = report["rows"] == total_rows and report["id_sum"] == expected_sum
            runs.append(report)
            print(
                f"round {round_no} {reader:16s} {report['seconds']:7.2f}s drain  {report['wall_seconds']:7.2f}s wall"
                f"  {report['peak_rss_mb']:8.1f} MB  batches {report['batches']} (max {report['max_batch_rows']})"
                f"  ok={report['checksum_ok']}" + (f"  ERROR {report['error']}" if report["error"] else ""),
                flush=True,
            )

    summary = []
    for reader in readers:
        mine = [r for r in runs if r["reader"] == reader and not r["error"]]
        if not mine:
            summary.append({"reader": reader, "error": next(r["error"] for r in runs if r["reader"] == reader)})
            continue
        secs = statistics.median(r["seconds"] for r in mine)
        summary.append(
            {
                "reader": reader,
                "description": READERS[reader],
                "median_seconds": round(secs, 2),
                "min_seconds": round(min(r["seconds"] for r in mine), 2),
                "max_seconds": round(max(r["seconds"] for r in mine), 2),
                "rows_per_second": round(total_rows / secs),
                "median_wall_seconds": round(statistics.median(r["wall_seconds"] for r in mine), 2),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
                "rss_after_imports_mb": statistics.median(r["rss_after_imports_mb"] for r in mine),
                "batches": mine[0]["batches"],
                "max_batch_rows": mine[0]["max_batch_rows"],
                "checksum_ok": all(r["checksum_ok"] for r in mine),
                "schema": mine[0]["schema"],
            }
        )

    slow = []
    if args.slow_consumer_rate:
        for reader in [r for r in STREAMING_READERS if r in readers]:
            report = spawn_child(reader, params, workdir, consume_rate=args.slow_consumer_rate)
            slow.append(report)
            print(
                f"slow consumer ({args.slow_consumer_rate:,} rows/s) {reader:16s} {report['seconds']:7.2f}s"
                f"  peak {report['peak_rss_mb']:8.1f} MB" + (f"  ERROR {report['error']}" if report["error"] else ""),
                flush=True,
            )

    failure = []
    if args.failure:
        for reader in [r for r in STREAMING_READERS if r in readers]:
            report = spawn_child(reader, params, workdir, kill=True)
            report["raised"] = report["error"] is not None
            report["silently_short"] = report["error"] is None and report["rows"] < total_rows
            failure.append(report)
            print(
                f"KILL mid-stream {reader:16s} rows read {report['rows']:,} of {total_rows:,}"
                f"  raised={report['raised']}  {report['error'] or ''}",
                flush=True,
            )

    print_table(summary, total_rows)
    return {
        "benchmark": "mariadb_readers",
        "scale_factor": format_sf(args.sf),
        "rows": total_rows,
        "query": params["query"],
        "repeat": args.repeat,
        "fetch_size": args.fetch_size,
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "mariadb": db.version,
            "load_before": load_before,
            "load_after": loadavg(),
        },
        "versions": versions(),
        "load": load,
        "summary": summary,
        "slow_consumer": {"rows_per_second": args.slow_consumer_rate, "runs": slow},
        "kill_mid_stream": failure,
        "runs": runs,
    }


def print_table(summary: list[dict[str, Any]], total_rows: int) -> None:
    print(f"\n{total_rows:,} rows; median over rounds (drain = connect + query + all batches, in the child)")
    header = (
        f"{'reader':16s} {'median s':>9s} {'rows/s':>11s} {'peak RSS MB':>12s} {'after imports':>13s}"
        f" {'wall s':>7s} {'batches':>8s} ok"
    )
    print(header)
    print("-" * len(header))
    for s in summary:
        if "error" in s:
            print(f"{s['reader']:16s} ERROR {s['error']}")
            continue
        print(
            f"{s['reader']:16s} {s['median_seconds']:9.2f} {s['rows_per_second']:11,d} {s['peak_rss_mb']:12.1f}"
            f" {s['rss_after_imports_mb']:13.1f} {s['median_wall_seconds']:7.2f} {s['batches']:8d} {s['checksum_ok']}"
        )


# -- connectorx type mapping --------------------------------------------------------------------------------------
#: (column, MariaDB type, row-1 literal, row-1 expected, row-3 (edge) literal, row-3 expected); row 2 is all NULL.
#: An expected value of ``None`` for a non-NULL literal means "not representable; see what comes back".
TYPE_CASES: list[tuple[str, str, str, Any, str, Any]] = [
    ("c_tinyint", "TINYINT", "127", 127, "-128", -128),
    ("c_bool", "TINYINT(1)", "1", 1, "2", 2),
    ("c_smallint", "SMALLINT", "-32768", -32768, "32767", 32767),
    ("c_mediumint", "MEDIUMINT", "8388607", 8388607, "-8388608", -8388608),
    ("c_int", "INT", "2147483647", 2147483647, "-2147483648", -2147483648),
    ("c_int_unsigned", "INT UNSIGNED", "123", 123, "4294967295", 4294967295),
    ("c_bigint", "BIGINT", "9223372036854775807", 9223372036854775807, "-9223372036854775808", -9223372036854775808),
    ("c_bigint_unsigned", "BIGINT UNSIGNED", "123", 123, "18446744073709551615", 18446744073709551615),
    ("c_dec15_2", "DECIMAL(15,2)", "1234567890123.45", Decimal("1234567890123.45"), "-0.01", Decimal("-0.01")),
    (
        "c_dec38_10",
        "DECIMAL(38,10)",
        "12345678.0123456789",
        Decimal("12345678.0123456789"),
        "1234567890123456789012345678.0123456789",
        Decimal("1234567890123456789012345678.0123456789"),
    ),
    (
        "c_dec65_30",
        "DECIMAL(65,30)",
        "1.5",
        Decimal("1.5"),
        "12345678901234567890123456789012345.123456789012345678901234567890",
        Decimal("12345678901234567890123456789012345.123456789012345678901234567890"),
    ),
    (
        "c_dec20_12",
        "DECIMAL(20,12)",
        "0.123456789059",
        Decimal("0.123456789059"),
        "-12345678.1",
        Decimal("-12345678.1"),
    ),
    ("c_float", "FLOAT", "1.5", 1.5, "0.1", 0.1),
    ("c_double", "DOUBLE", "0.1", 0.1, "1.7976931348623157e308", 1.7976931348623157e308),
    ("c_char10", "CHAR(10)", "'abc'", "abc", "'héllo ✓'", "héllo ✓"),
    ("c_varchar100", "VARCHAR(100)", "'héllo wörld'", "héllo wörld", "''", ""),
    ("c_text", "TEXT", "'some text'", "some text", "REPEAT('ü', 1000)", "ü" * 1000),
    ("c_blob", "BLOB", "x'00ff10'", b"\x00\xff\x10", "x''", b""),
    ("c_varbinary", "VARBINARY(16)", "x'0001fe'", b"\x00\x01\xfe", "x'00'", b"\x00"),
    ("c_date", "DATE", "'2024-02-29'", date(2024, 2, 29), "'0000-00-00'", None),
    ("c_date_range", "DATE", "'1000-01-01'", date(1000, 1, 1), "'9999-12-31'", date(9999, 12, 31)),
    (
        "c_datetime",
        "DATETIME",
        "'2024-02-29 13:14:15'",
        datetime(2024, 2, 29, 13, 14, 15),
        "'0000-00-00 00:00:00'",
        None,
    ),
    (
        "c_datetime6",
        "DATETIME(6)",
        "'2024-02-29 13:14:15.123456'",
        datetime(2024, 2, 29, 13, 14, 15, 123456),
        "'9999-12-31 23:59:59.999999'",
        datetime(9999, 12, 31, 23, 59, 59, 999999),
    ),
    (
        "c_timestamp",
        "TIMESTAMP NULL",
        "'2024-02-29 13:14:15'",
        datetime(2024, 2, 29, 13, 14, 15),
        "'1970-01-01 00:00:01'",
        datetime(1970, 1, 1, 0, 0, 1),
    ),
    (
        "c_timestamp6",
        "TIMESTAMP(6) NULL",
        "'2024-02-29 13:14:15.654321'",
        datetime(2024, 2, 29, 13, 14, 15, 654321),
        "'2038-01-19 03:14:07.999999'",
        datetime(2038, 1, 19, 3, 14, 7, 999999),
    ),
    (
        "c_time",
        "TIME",
        "'13:14:15'",
        timedelta(hours=13, minutes=14, seconds=15),
        "'838:59:59'",
        timedelta(hours=838, minutes=59, seconds=59),
    ),
    ("c_time_neg", "TIME", "'00:00:01'", timedelta(seconds=1), "'-01:00:00'", timedelta(hours=-1)),
    ("c_year", "YEAR", "2024", 2024, "1901", 1901),
    ("c_json", "JSON", '\'{"a": 1, "b": [true, null]}\'', '{"a": 1, "b": [true, null]}', "'[]'", "[]"),
    ("c_enum", "ENUM('a','b','c')", "'b'", "b", "'c'", "c"),
    ("c_set", "SET('x','y','z')", "'x,z'", "x,z", "''", ""),
    ("c_bit8", "BIT(8)", "b'10100101'", 165, "b'00000000'", 0),
]


def _normalise(got: Any, expected: Any, sql_type: str) -> Any:
    """``got`` as a Python value comparable with ``expected`` (a datetime with a UTC zone -> naive UTC, etc.)."""
    if got is None:
        return None
    if isinstance(got, datetime) and got.tzinfo is not None:
        return got.astimezone(UTC).replace(tzinfo=None)
    if isinstance(expected, timedelta) and hasattr(got, "hour") and not isinstance(got, datetime):
        return timedelta(hours=got.hour, minutes=got.minute, seconds=got.second, microseconds=got.microsecond)
    if sql_type.startswith("BIT") and isinstance(got, bytes | bytearray):
        return int.from_bytes(got, "big")
    return got


def _exact(got: Any, expected: Any, sql_type: str) -> bool:
    value = _normalise(got, expected, sql_type)
    if sql_type == "FLOAT" and isinstance(value, float) and isinstance(expected, float):
        import struct

        return struct.pack("f", value) == struct.pack("f", expected)
    if isinstance(expected, bool) or isinstance(value, bool):
        return type(value) is type(expected) and value == expected
    if isinstance(expected, Decimal):
        return isinstance(value, Decimal) and value == expected
    return type(value) is type(expected) and value == expected


def _cx_read(cx: Any, url: str, query: str, return_type: str, protocol: str) -> dict[str, Any]:
    """Column 1 of ``query`` through connectorx: its Arrow type and first value, or the error."""
    try:
        got = cx.read_sql(url, query, return_type=return_type, protocol=protocol)
        table = got.read_all() if return_type == "arrow_stream" else got
        values = table.column(1).to_pylist()
        return {"arrow_type": str(table.schema.field(1).type), "value": values[0] if values else None}
    except BaseException as exc:  # connectorx raises pyo3's PanicException, a BaseException
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def run_types(db: Any, workdir: Path) -> dict[str, Any]:
    import connectorx as cx

    with db.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@sql_mode, @@time_zone")
        sql_mode, time_zone = cur.fetchone()
        cur.execute("DROP TABLE IF EXISTS cx_types")
        cols = ", ".join(f"{name} {sql_type}" for name, sql_type, *_ in TYPE_CASES)
        cur.execute(f"CREATE TABLE cx_types (id INT NOT NULL PRIMARY KEY, {cols})")
        names = ", ".join(name for name, *_ in TYPE_CASES)
        row1 = ", ".join(case[2] for case in TYPE_CASES)
        row3 = ", ".join(case[4] for case in TYPE_CASES)
        nulls = ", ".join(["NULL"] * len(TYPE_CASES))
        cur.execute(f"INSERT INTO cx_types (id, {names}) VALUES (1, {row1}), (2, {nulls}), (3, {row3})")
        cur.execute("SHOW WARNINGS")
        insert_warnings = cur.fetchall()
        # The server's own text rendering, for the report.
        cur.execute(f"SELECT id, {', '.join(f'CAST({n} AS CHAR)' for n, *_ in TYPE_CASES)} FROM cx_types ORDER BY id")
        server_text = {row[0]: row[1:] for row in cur.fetchall()}

    results = []
    for index, (name, sql_type, _, expected1, _, expected3) in enumerate(TYPE_CASES):
        entry: dict[str, Any] = {
            "column": name,
            "mariadb_type": sql_type,
            "server_text_row1": server_text[1][index],
            "server_text_row3": server_text[3][index],
        }
        for protocol in ("binary", "text"):
            for return_type in ("arrow", "arrow_stream"):
                whole = _cx_read(cx, db.url, f"SELECT id, {name} FROM cx_types ORDER BY id", return_type, protocol)
                # Row by row too, so that one unreadable edge value does not hide the others.
                rows = {
                    row_id: _cx_read(
                        cx, db.url, f"SELECT id, {name} FROM cx_types WHERE id = {row_id}", return_type, protocol
                    )
                    for row_id in (1, 2, 3)
                }
                info: dict[str, Any] = {"whole_column_error": whole.get("error")}
                info["arrow_type"] = next((r["arrow_type"] for r in [whole, *rows.values()] if "arrow_type" in r), None)
                for row_id, expected in ((1, expected1), (2, None), (3, expected3)):
                    got = rows[row_id]
                    label = {1: "row1", 2: "null", 3: "edge"}[row_id]
                    if "error" in got:
                        info[label] = f"ERROR {got['error']}"
                        info[f"{label}_exact"] = False
                    else:
                        value = got["value"]
                        info[label] = repr(value)
                        if row_id == 2:
                            info[f"{label}_exact"] = value is None
                        elif expected is None:  # not representable: report what came back
                            info[f"{label}_exact"] = None
                        else:
                            info[f"{label}_exact"] = _exact(value, expected, sql_type)
                entry[f"{protocol}/{return_type}"] = info
        results.append(entry)

    mid_stream = zero_date_mid_stream(db)
    report = {
        "connectorx": versions().get("connectorx"),
        "mariadb": db.version,
        "sql_mode": sql_mode,
        "time_zone": time_zone,
        "insert_warnings": [list(w) for w in insert_warnings],
        "columns": results,
        "zero_date_mid_stream": mid_stream,
    }
    print_types(report)
    return report


def zero_date_mid_stream(db: Any, rows: int = 500_000, bad_row: int = 400_000) -> dict[str, Any]:
    """A '0000-00-00' in row ``bad_row`` of ``rows``: does each connectorx mode raise, or return fewer rows?"""
    import connectorx as cx

    with db.connect(autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS cx_zero_date")
        cur.execute("CREATE TABLE cx_zero_date (id BIGINT NOT NULL PRIMARY KEY, d DATE NOT NULL)")
        cur.execute(
            f"INSERT INTO cx_zero_date SELECT seq, '2024-01-01' + INTERVAL (seq % 1000) DAY FROM seq_1_to_{rows}"
        )
        cur.execute("UPDATE cx_zero_date SET d = '0000-00-00' WHERE id = %s", (bad_row,))
    out: dict[str, Any] = {"rows": rows, "bad_row": bad_row}
    for protocol in ("binary", "text"):
        for return_type in ("arrow", "arrow_stream"):
            got_rows = 0
            try:
                result = (
                    cx.read_sql(
                        db.url,
                        "SELECT id, d FROM cx_zero_date",
                        return_type=return_type,
                        protocol=protocol,
                        batch_size=10000,
                    )
                    if return_type == "arrow_stream"
                    else cx.read_sql(
                        db.url, "SELECT id, d FROM cx_zero_date", return_type=return_type, protocol=protocol
                    )
                )
                if return_type == "arrow_stream":
                    for batch in result:
                        got_rows += batch.num_rows
                else:
                    got_rows = result.num_rows
                out[f"{protocol}/{return_type}"] = {"raised": False, "rows": got_rows}
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                out[f"{protocol}/{return_type}"] = {
                    "raised": True,
                    "rows_before_error": got_rows,
                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
                }
    return out


def print_types(report: dict[str, Any]) -> None:
    print(f"\nconnectorx {report['connectorx']} on MariaDB {report['mariadb']}, sql_mode={report['sql_mode']!r}")
    print("value / edge / NULL: ok = came back exactly; NO = different value; ERR = the read raised; - = no exact form")
    print(f"{'column':18s} {'MariaDB type':18s} {'Arrow (binary)':20s} {'Arrow (text)':20s} val  edge NULL notes")

    def flag(info: dict[str, Any], label: str) -> str:
        exact = info[f"{label}_exact"]
        if str(info[label]).startswith("ERROR"):
            return "ERR"
        return "-" if exact is None else ("ok" if exact else "NO")

    for entry in report["columns"]:
        b, t = entry["binary/arrow"], entry["text/arrow"]
        notes = []
        for label in ("row1", "edge"):
            for key, info in (("binary", b), ("text", t)):
                if info[f"{label}_exact"] is not True:
                    server = entry["server_text_row1" if label == "row1" else "server_text_row3"]
                    notes.append(f"{key} {label} {server!r} -> {info[label]}")
        decl = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", entry["mariadb_type"])
        if decl and b["arrow_type"] and b["arrow_type"] != f"decimal128({decl.group(1)}, {decl.group(2)})":
            notes.insert(0, f"declared ({decl.group(1)},{decl.group(2)}) -> {b['arrow_type']}")
        for key in ("binary/arrow_stream", "text/arrow_stream"):
            if entry[key]["arrow_type"] != entry[key.replace("_stream", "")]["arrow_type"]:
                notes.append(f"{key} type differs: {entry[key]['arrow_type']}")
        print(
            f"{entry['column']:18s} {entry['mariadb_type']:18s} {b['arrow_type'] or 'ERROR':20s} "
            f"{t['arrow_type'] or 'ERROR':20s} {flag(b, 'row1'):4s} {flag(b, 'edge'):4s} {flag(b, 'null'):4s} "
            + " | ".join(dict.fromkeys(notes))
        )
    print(f"\nzero date mid-stream: {json.dumps(report['zero_date_mid_stream'], indent=1)}")


# -- main ------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1: 6,001,215 rows)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help=f"default {DEFAULT_WORKDIR}")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", default=",".join(READERS), help=f"comma-separated subset of {list(READERS)}")
    parser.add_argument(
        "--fetch-size", type=int, default=FETCH_SIZE, help="fetchmany() size, and batch_size of cx-stream-64k/-text"
    )
    parser.add_argument("--types", action="store_true", help="report connectorx's type mapping instead")
    parser.add_argument("--force-load", action="store_true", help="reload lineitem even if present")
    parser.add_argument("--slow-consumer-rate", type=int, default=500_000, help="rows/s of the slow consumer (0: skip)")
    parser.add_argument("--no-failure", dest="failure", action="store_false", help="skip the KILL mid-stream check")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    parser.add_argument("--consume-rate", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--kill-after-first-batch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(run_child(args)), flush=True)
        return 0

    from testbed.mariadb_server import MariaDBServer

    os.environ["RUST_BACKTRACE"] = "0"  # connectorx panics: one line, not a backtrace
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {loadavg()}", flush=True)
    with MariaDBServer(workdir / "mariadb") as db:
        print(f"{db!r} MariaDB {db.version}, started in {db.startup_seconds:.1f}s", flush=True)
        if args.types:
            report = run_types(db, workdir)
            out = workdir / "types.json"
        else:
            from benchmarks.tpch_data import format_sf

            report = run_readers(args, db, workdir)
            out = workdir / f"readers-sf{format_sf(args.sf)}.json"
    if not args.types and args.fetch_size != FETCH_SIZE:
        out = out.with_name(f"{out.stem}-fetch{args.fetch_size}.json")
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nload average after: {loadavg()}\nresults: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
