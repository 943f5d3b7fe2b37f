"""Benchmark: rounds of tables whose rows change, merged into the lake by position deletes (merge-on-read) or by
rewriting the files holding changed keys (copy-on-write).

TPC-H ``orders`` at ``--sf`` (SF 1: 1.5M rows) is loaded into PostgreSQL twice, each with two extra columns:
``o_ver`` (a version every change sets from a sequence; 0 for the loaded rows) and ``o_deleted``:

* ``orders_m``  merge by cursor: cursor ``o_ver``, key ``o_id`` (the table's primary key), soft-delete column
                ``o_deleted`` (a delete is ``o_deleted = true`` with a new version);
* ``orders_c``  change data capture (source kind ``postgres_cdc``): a delete is a ``DELETE``.

Both are tiered once (their first rounds, timed too). Then, for each scenario (``--scenarios``: 0.1%, 1% and 10% of
the rows updated and 0.1% deleted, keys scattered over the whole table, so every data file holds some; and
``recent-1%``: 1% updated and 0.1% deleted among the orders of the last 3 months), the same changes are made to both
tables and, alternating, timed:

* ``merge``       the next round of ``orders_m`` (files of 128 MiB, the default; ``copy_on_write_fraction`` 0.5,
                  the default: a file that keeps most of its rows gets position deletes, one losing at least half
                  of them is rewritten, in the task process when that fits one split);
* ``merge-cow``   the same round into a second lake table with ``copy_on_write_fraction: 0``: every file holding a
                  changed key rewritten, as every merge was before position deletes (the baseline);
* ``merge-spark`` the next round of ``orders_m`` into a second lake table whose files are cut at
                  ``--spark-file-mb`` (8 MiB: SF 1 is 5 files), so the rewrite is several splits, written by the
                  tasks of a Spark session on ``--spark-master`` (``local[2]``: two executor slots), started by the
                  round as a task's would be;
* ``merge-monthly`` the next round of ``orders_m`` into a third lake table, partitioned by ``month(o_orderdate)``
                  (the ``recent-1%`` scenario changes only the last 3 months' orders: its merge rewrites only their
                  partitions' files);
* ``cdc``         the next round of ``orders_c`` (merge-on-read, as ``merge``);
* ``pyiceberg-upsert`` pyiceberg's own ``Table.upsert`` (and ``Table.delete`` of the soft-deleted keys) of the rows
                  changed since the scenario's changes began, into a fourth lake table (``alt_pyiceberg_upsert.py``,
                  in its own process with ``--upsert-timeout``; ``--upsert-scenarios``);
* ``full-load``   a first round of ``orders_m`` into a new lake table: re-tiering the whole table instead;
* ``dlt``         dlt's ``merge`` write disposition into Iceberg on the same table (``benchmarks/alt_dlt_merge.py``,
                  in the bench virtualenv, with its own lake, fully loaded by the first call), unless
                  ``--dlt-scenarios`` leaves the scenario out: by default dlt merges the 1% round only, as it
                  commits 1,000 rows at a time, each commit rewriting the files that hold them (at 10% that is
                  some 150 commits, longer than ``--dlt-timeout``'s 10 minutes here).

Each round runs as the operator builds it, in this process (``testbed/rounds.round_parts``): a round of one split is
read and written without Spark (``target_rows_per_split`` is 2M, so a full load of SF 1 is one split too), and the
merge (read back the round's rows, find the live files holding changed keys, rewrite them, one commit) runs in
the task process (``lake/merge.py``). Bytes written and files added or removed come from the summaries of the
snapshots the round committed. After each scenario the lake is checked against PostgreSQL independently (pyarrow
over a pyiceberg scan: rows, distinct keys, the sum of versions and of prices).

``--variants`` names the variants run (all by default). Each round's wall and CPU time (this process's user and
system time: the round's reading, decoding, merging and writing, not PostgreSQL's), its bytes written (data and
delete files) and the delete files and positions it added are reported, and the cost per changed row.

Then, for each of ``--read-scenarios`` (0.1%, 1%), a fresh lake table of ``orders_m`` takes ``--read-rounds`` (10)
rounds of that scenario's changes, and the whole table is read (pyiceberg's ``scan().to_arrow()`` and DuckDB's
``iceberg_scan``, median of 3 each) with the delete files they left, against a fresh load of the same rows (none),
and again after the table's maintenance compaction, which applies the deletes (``lake/compaction.compact`` with the
maintenance defaults).

Then ``--small-rounds`` (50) small merge rounds of ``orders_m``, each inserting ``--small-inserts`` new rows and
updating ``--small-updates`` rows among those the earlier small rounds inserted (hot rows are recent), and the
time to read the whole table with pyiceberg (``scan().to_arrow()``, median of 3), before and after compaction
(``lake/compaction.compact``).

    python -m benchmarks.bench_merge                                    # SF 1 (about 6 minutes here)
    python -m benchmarks.bench_merge --sf 10 --variants merge,merge-cow,cdc,full-load,pyiceberg-upsert \
        --dlt-scenarios '' --small-rounds 0                             # the merge-on-read figures
    python -m benchmarks.bench_merge --sf 0.01 --small-rounds 3 --dlt-scenarios ''   # smoke run

``--hot mariadb`` runs the same scenarios on a throw-away MariaDB server with its binlog on
(``benchmarks/mariadb_orders.py``), deletes being ``DELETE`` in both tables: ``merge`` is the cursor's merge with its
keys reconciled every round (``merge.reconcile_keys_every_seconds: 0``, which is how a MariaDB table finds hard
deletes and key changes today: every key read), ``cdc`` the round of the binlog's change stream (``mysql_cdc``), and
``full-load`` the reload; nothing else runs there (no read comparison nor small rounds)::

    python -m benchmarks.bench_merge --hot mariadb --sf 10 --scenarios 0.1%,1%,10%
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "merge.json"
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
NAMESPACE = "bench"
MERGE_TABLE = "orders_m"
CDC_TABLE = "orders_c"
KEY = "o_id"
CURSOR = "o_ver"
DELETED = "o_deleted"
SEQUENCE = "orders_ver"
SPLIT_ROWS = 2_000_000
MB = 1024 * 1024
#: Scenario -> (rows updated per 10,000, deleted per 10,000, whether only recent orders change).
SCENARIOS = {
    "0.1%": (10, 10, False),
    "1%": (100, 10, False),
    "10%": (1000, 10, False),
    # 1% of the table updated and 0.1% deleted among the orders of its last 3 months (about 3.8% of them).
    "recent-1%": (2600, 260, True),
}
#: The date from which an order is recent (TPC-H orders end on 1998-08-02).
RECENT = "1998-05-03"
MONTHLY_LAKE_TABLE = "orders_m_monthly"
COW_LAKE_TABLE = "orders_m_cow"
#: The lake table of each variant tiering a table of its own.
LAKE_TABLES = {"merge-cow": COW_LAKE_TABLE, "merge-spark": "orders_m_spark", "merge-monthly": MONTHLY_LAKE_TABLE,
               "cdc": CDC_TABLE}  # fmt: skip
VARIANTS = ("merge", "merge-cow", "merge-spark", "merge-monthly", "cdc", "full-load", "pyiceberg-upsert", "dlt")
UPSERT_LAKE_TABLE = "orders_upsert"


def merge_spec(lake_table: str) -> dict[str, Any]:
    return {
        "name": lake_table,
        "source": {"conn_id": "bench", "table": MERGE_TABLE, "cursor_column": CURSOR},
        "lake": {"namespace": NAMESPACE, "table": lake_table},
        "merge": {"soft_delete_column": DELETED},
        "target_rows_per_split": SPLIT_ROWS,
    }


SPARK_LAKE_TABLE = "orders_m_spark"


def spark_merge_spec(file_mb: int) -> dict[str, Any]:
    return {**merge_spec(SPARK_LAKE_TABLE), "target_file_size_mb": file_mb}


def cow_merge_spec() -> dict[str, Any]:
    spec = merge_spec(COW_LAKE_TABLE)
    spec["lake"]["copy_on_write_fraction"] = 0.0
    return spec


def monthly_merge_spec() -> dict[str, Any]:
    spec = merge_spec(MONTHLY_LAKE_TABLE)
    spec["lake"]["partition_by"] = ["month(o_orderdate)"]
    return spec


def cdc_spec() -> dict[str, Any]:
    return {
        "name": CDC_TABLE,
        "source": {"kind": "postgres_cdc", "conn_id": "bench", "table": CDC_TABLE},
        "lake": {"namespace": NAMESPACE, "table": CDC_TABLE},
        "target_rows_per_split": SPLIT_ROWS,
    }


def mariadb_merge_spec(lake_table: str) -> dict[str, Any]:
    """The MariaDB merge table's: by its cursor, every key reconciled every round (its deletes are hard)."""
    return {
        "name": lake_table,
        "source": {"conn_id": "bench", "table": MERGE_TABLE, "cursor_column": CURSOR},
        "lake": {"namespace": NAMESPACE, "table": lake_table},
        "merge": {"reconcile_keys_every_seconds": 0},
        "target_rows_per_split": SPLIT_ROWS,
    }


def mariadb_cdc_spec() -> dict[str, Any]:
    return {
        "name": CDC_TABLE,
        "source": {"kind": "mysql_cdc", "conn_id": "bench", "table": CDC_TABLE},
        "lake": {"namespace": NAMESPACE, "table": CDC_TABLE},
        "target_rows_per_split": SPLIT_ROWS,
    }


# -- hot tables --------------------------------------------------------------------------------------------
def prepare_tables(dsn: str, sf: float, workdir: Path) -> int:
    import psycopg

    from benchmarks.tpch_data import load_lineitem_timed

    rows = load_lineitem_timed(dsn, sf, workdir, table=MERGE_TABLE, tpch_table="orders", force=True).rows
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE {MERGE_TABLE} ADD COLUMN {CURSOR} bigint NOT NULL DEFAULT 0, "
            f"ADD COLUMN {DELETED} boolean NOT NULL DEFAULT false"
        )
        conn.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")
        conn.execute(f"CREATE SEQUENCE {SEQUENCE}")
        conn.execute(f"CREATE INDEX ON {MERGE_TABLE} ({CURSOR})")
        conn.execute(f"DROP TABLE IF EXISTS {CDC_TABLE}")
        conn.execute(f"CREATE TABLE {CDC_TABLE} (LIKE {MERGE_TABLE} INCLUDING ALL)")
        conn.execute(f"INSERT INTO {CDC_TABLE} OVERRIDING SYSTEM VALUE SELECT * FROM {MERGE_TABLE}")
        conn.execute(f"ANALYZE {MERGE_TABLE}")
        conn.execute(f"ANALYZE {CDC_TABLE}")
    return rows


def make_changes(dsn: str, updated_bp: int, deleted_bp: int, seed: int, recent: bool = False) -> dict[str, int]:
    """The same changes to both tables: keys chosen by a hash of the key and ``seed``, scattered over the table or
    (``recent``) among the orders since ``RECENT``; ``updated_bp`` and ``deleted_bp`` of them per 10,000."""
    import psycopg

    where = f"o_orderdate >= DATE '{RECENT}' AND " if recent else ""
    updated = f"{where}(({KEY} * 7919 + {seed}) % 10000) < {updated_bp}"
    deleted = f"{where}(({KEY} * 104729 + {seed} * 31) % 10000) < {deleted_bp}"
    counts: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # a change stream reads flushed WAL only
        for table in (MERGE_TABLE, CDC_TABLE):
            alive = f"NOT {DELETED}" if table == MERGE_TABLE else "true"
            counts[f"{table}_updated"] = conn.execute(
                f"UPDATE {table} SET o_totalprice = o_totalprice + 1, o_orderstatus = 'U', "
                f"{CURSOR} = nextval('{SEQUENCE}') WHERE {updated} AND {alive}"
            ).rowcount
            if table == MERGE_TABLE:
                statement = (
                    f"UPDATE {table} SET {DELETED} = true, {CURSOR} = nextval('{SEQUENCE}') WHERE {deleted} AND {alive}"
                )
            else:
                statement = f"DELETE FROM {table} WHERE {deleted}"
            counts[f"{table}_deleted"] = conn.execute(statement).rowcount
    if counts[f"{MERGE_TABLE}_updated"] != counts[f"{CDC_TABLE}_updated"]:
        raise AssertionError(f"the two tables got different changes: {counts}")
    return counts


def insert_and_update_recent(dsn: str, inserts: int, updates: int, base_max_id: int) -> None:
    """A small round's changes on ``orders_m``: new rows (copies of old ones, new keys) and updates of rows added
    since ``base_max_id``."""
    import psycopg

    columns = (
        "o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate, o_orderpriority, o_clerk, "
        "o_shippriority, o_comment"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {MERGE_TABLE} ({columns}, {CURSOR}) SELECT {columns}, nextval('{SEQUENCE}') "
            f"FROM {MERGE_TABLE} WHERE {KEY} <= %s",
            (inserts,),
        )
        conn.execute(
            f"UPDATE {MERGE_TABLE} SET o_totalprice = o_totalprice + 1, {CURSOR} = nextval('{SEQUENCE}') "
            f"WHERE {KEY} IN (SELECT {KEY} FROM {MERGE_TABLE} WHERE {KEY} > %s ORDER BY random() LIMIT %s)",
            (base_max_id, updates),
        )


def hot_summary(dsn: str, table: str) -> dict[str, Any]:
    import psycopg

    alive = f"WHERE NOT {DELETED}" if table == MERGE_TABLE else ""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT count(*), count(DISTINCT {KEY}), coalesce(sum({CURSOR}), 0), sum(o_totalprice) "
            f"FROM {table} {alive}"
        ).fetchone()
    assert row is not None
    return {"rows": int(row[0]), "keys": int(row[1]), "version_sum": int(row[2]), "price_sum": str(row[3])}


# -- the lake ------------------------------------------------------------------------------------------------
def catalog_properties(workdir: Path) -> dict[str, str]:
    root = workdir / "lake"
    root.mkdir(parents=True, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}


def _load(catalog: dict[str, str], table: str) -> Any:
    from pyiceberg.catalog import load_catalog

    return load_catalog("default", **catalog).load_table((NAMESPACE, table))


def lake_summary(catalog: dict[str, str], table: str) -> dict[str, Any]:
    import pyarrow.compute as pc

    rows = _load(catalog, table).scan(selected_fields=(KEY, CURSOR, "o_totalprice")).to_arrow()
    return {
        "rows": rows.num_rows,
        "keys": pc.count_distinct(rows[KEY]).as_py(),
        "version_sum": int(pc.sum(rows[CURSOR]).as_py() or 0),
        "price_sum": str(pc.sum(rows["o_totalprice"]).as_py()),
    }


def check(dsn: str, catalog: dict[str, str], table: str, lake_table: str | None = None) -> dict[str, Any]:
    hot, lake = hot_summary(dsn, table), lake_summary(catalog, lake_table or table)
    # numeric read as text or decimal: compare the sums as numbers
    same = {k: hot[k] == lake[k] for k in ("rows", "keys", "version_sum")}
    same["price_sum"] = abs(float(hot["price_sum"]) - float(lake["price_sum"])) < 0.01
    if not all(same.values()):
        raise AssertionError(f"lake table {lake_table or table} differs from {table}: hot {hot}, lake {lake}")
    return {"hot": hot, "lake": lake}


def snapshot_ids(catalog: dict[str, str], table: str) -> set[int]:
    try:
        return {s.snapshot_id for s in _load(catalog, table).snapshots()}
    except Exception:  # no such table yet
        return set()


def written_since(catalog: dict[str, str], table: str, before: set[int]) -> dict[str, int]:
    """Files and bytes the snapshots committed after ``before`` added and removed."""
    new = [s for s in _load(catalog, table).snapshots() if s.snapshot_id not in before]

    def total(name: str) -> int:
        return sum(int((s.summary or {}).get(name, 0) or 0) for s in new)

    return {
        "snapshots": len(new),
        "added_files": total("added-data-files"),
        "added_bytes": total("added-files-size"),  # data and delete files
        "removed_files": total("deleted-data-files"),
        "removed_bytes": total("removed-files-size"),
        "added_delete_files": total("added-delete-files"),
        "added_position_deletes": total("added-position-deletes"),
    }


def live_files(catalog: dict[str, str], table: str) -> int:
    return len(list(_load(catalog, table).scan().plan_files()))


# -- rounds ----------------------------------------------------------------------------------------------------
def tier(
    spec_dict: dict[str, Any], dsn: str, catalog: dict[str, str], state: Path, spark_master: str | None = None
) -> dict[str, Any]:
    """One round, built as the operator builds it, timed from before its parts exist to its end."""
    from airflow_provider_tiering.core.connections import ConnectionInfo
    from airflow_provider_tiering.core.round_result import RoundOutcome
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.core.state_store import JsonFileStateStore
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import round_parts

    spec = TableSpec.parse(spec_dict)
    lake_table = spec.lake.table
    before = snapshot_ids(catalog, lake_table)
    cpu_started = _cpu_seconds()
    started = time.perf_counter()
    spark = None if spark_master is None else SparkSettings(master=spark_master)
    parts = round_parts(spec, ConnectionInfo.from_uri(dsn), catalog, spark=spark)
    with parts:
        result = parts.run(JsonFileStateStore(state))
        seconds = time.perf_counter() - started
        cpu_seconds = _cpu_seconds() - cpu_started
        spark = parts.writer._spark is not None  # whether the round started a Spark session
    metrics = result.metrics
    if result.outcome is not RoundOutcome.TIERED:
        raise AssertionError(f"round of {spec.name}: {result.outcome} {result}")
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "rows_read": metrics.rows if metrics else 0,
        "inserted": metrics.inserted_rows if metrics else None,
        "updated": metrics.updated_rows if metrics else None,
        "deleted": metrics.deleted_rows if metrics else None,
        "spark": spark,
        "merge": None if metrics is None or metrics.merge is None else asdict(metrics.merge),
        **written_since(catalog, lake_table, before),
    }


def _cpu_seconds() -> float:
    """User and system CPU time of this process (a round of one split runs in it; Spark's JVM is a child)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def dlt_run(
    bench_python: Path, dsn: str, workdir: Path, initial: bool = False, timeout: float | None = None
) -> dict[str, Any]:
    """One call of ``alt_dlt_merge.py``; past ``timeout`` seconds it is killed and reported as ``timed_out``."""
    command = [
        str(bench_python),
        str(REPO / "benchmarks" / "alt_dlt_merge.py"),
        "--dsn",
        dsn,
        "--table",
        MERGE_TABLE,
        "--key",
        KEY,
        "--cursor",
        CURSOR,
        "--workdir",
        str(workdir / "dlt"),
    ]
    if initial:
        command.append("--initial")
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "seconds": time.perf_counter() - started,
            "timed_out": True,
            "added_bytes": 0,
            "added_files": 0,
            "removed_files": 0,
            "snapshots": 0,
            "rows_extracted": 0,
        }
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dlt failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def upsert_run(dsn: str, catalog: dict[str, str], since: int, timeout: float) -> dict[str, Any]:
    """pyiceberg's ``Table.upsert`` of the rows changed since version ``since`` (``alt_pyiceberg_upsert.py``)."""
    command = [
        sys.executable, str(REPO / "benchmarks" / "alt_pyiceberg_upsert.py"), "--dsn", dsn, "--catalog",
        json.dumps(catalog), "--namespace", NAMESPACE, "--lake-table", UPSERT_LAKE_TABLE, "--table", MERGE_TABLE,
        "--key", KEY, "--cursor", CURSOR, "--deleted", DELETED, "--since", str(since),
    ]  # fmt: skip
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": time.perf_counter() - started, "timed_out": True, "added_bytes": 0, "added_files": 0,
                "removed_files": 0, "snapshots": 0, "rows_read": 0}  # fmt: skip
    from testbed.child_result import child_report

    return child_report(proc, "pyiceberg upsert")


def max_version(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT coalesce(max({CURSOR}), 0) FROM {MERGE_TABLE}").fetchone()
    return int(row[0]) if row else 0


def read_time(catalog: dict[str, str], table: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        rows = _load(catalog, table).scan().to_arrow().num_rows
        times.append(time.perf_counter() - started)
        assert rows > 0
    return statistics.median(times)


def compact_table(
    catalog: dict[str, str], lake_table: str = MERGE_TABLE, *, small_file_mb: float = 32, max_small_files: int = 1
) -> dict[str, Any]:
    from airflow_provider_tiering.build import build_writer
    from airflow_provider_tiering.core.spec import TableSpec
    from airflow_provider_tiering.lake.compaction import compact
    from airflow_provider_tiering.spark.session import SparkSettings
    from testbed.rounds import lake_of

    spec = TableSpec.parse(merge_spec(lake_table))
    writer = build_writer(SparkSettings(master="local[2]"), local_single_split=True)
    try:
        started = time.perf_counter()
        outcome = compact(
            lake_of(spec, catalog),
            writer,
            target_file_bytes=128 * MB,
            small_file_bytes=int(small_file_mb * MB),
            max_small_files=max_small_files,
            table_name=lake_table,
        )
        seconds = time.perf_counter() - started
    finally:
        writer.stop()
    return {
        "seconds": seconds,
        "outcome": str(outcome.outcome),
        "files_before": outcome.files_before,
        "files_after": outcome.files_after,
        "rewritten_files": outcome.rewritten_files,
        "delete_files_after": len(_load(catalog, lake_table).inspect.delete_files()),
    }


def _fmt_bytes(value: int) -> str:
    return f"{value / MB:,.1f} MiB"


def print_table(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    print()
    print(
        f"{'scenario':<10}{'variant':<17}{'seconds':>9}{'CPU s':>8}{'rows read':>11}{'written':>13}{'files +/-':>11}"
        f"{'deletes':>14}{'x reload':>9}"
    )
    for scenario, variants in results.items():
        reload = variants.get("full-load", {}).get("seconds")
        for name, r in variants.items():
            files = f"+{r.get('added_files', 0)}/-{r.get('removed_files', 0)}"
            rows = r.get("rows_read", r.get("rows_extracted", 0))
            deletes = f"{r.get('added_position_deletes', 0):,}/{r.get('added_delete_files', 0)}"
            faster = f"{reload / r['seconds']:.1f}" if reload and r["seconds"] else "-"
            cpu = f"{r['cpu_seconds']:.2f}" if "cpu_seconds" in r else "-"  # a baseline in its own process
            print(
                f"{scenario:<10}{name:<17}{r['seconds']:>9.2f}{cpu:>8}{rows:>11,}"
                f"{_fmt_bytes(r['added_bytes']):>13}{files:>11}{deletes:>14}{faster:>9}"
            )


def duckdb_read_time(catalog: dict[str, str], table: str, repeat: int = 3) -> float:
    """The whole table read into Arrow by DuckDB's Iceberg reader (``iceberg_scan`` of its metadata file, the
    extensions loaded from their PyPI packages), median of ``repeat``."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    metadata = _load(catalog, table).metadata_location.removeprefix("file://")
    connection = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for package in (duckdb_extension_avro, duckdb_extension_iceberg):
            connection.execute(f"LOAD '{next(Path(package.__file__).parent.rglob('*.duckdb_extension'))}'")
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            rows = connection.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table().num_rows
            times.append(time.perf_counter() - started)
            assert rows > 0
    finally:
        connection.close()
    return statistics.median(times)


def read_comparison(
    dsn: str, catalog: dict[str, str], states: Path, rounds: int, scenarios: list[str]
) -> dict[str, dict[str, Any]]:
    """Per scenario, a fresh load of ``orders_m`` into a lake table of its own, ``rounds`` merge-on-read rounds of
    the scenario's changes (each round's keys apart from the others'), then the whole table's read time (pyiceberg
    and DuckDB) with the delete files they left, against a fresh load of the same rows (no delete files), and after
    the maintenance compaction (its defaults: a file with 10 delete files or 20% of its rows deleted rewritten)."""
    results: dict[str, dict[str, Any]] = {}
    for number, scenario in enumerate(scenarios):
        updated_bp, deleted_bp, recent = SCENARIOS[scenario]
        slug = scenario.replace(".", "_").replace("%", "pct").replace("-", "_")
        lake_table, fresh = f"orders_reads_{slug}", f"orders_fresh_{slug}"
        tier(merge_spec(lake_table), dsn, catalog, states / f"reads_{slug}.json")
        detail = []
        for step in range(rounds):
            # Windows of the key hash that do not overlap: each round changes other keys.
            make_changes(dsn, updated_bp, deleted_bp, seed=1000 * (number + 1) + step * updated_bp, recent=recent)
            detail.append(tier(merge_spec(lake_table), dsn, catalog, states / f"reads_{slug}.json"))
        check(dsn, catalog, MERGE_TABLE, lake_table)
        summary = _load(catalog, lake_table).current_snapshot().summary
        with_deletes = (read_time(catalog, lake_table), duckdb_read_time(catalog, lake_table))
        tier(merge_spec(fresh), dsn, catalog, states / f"fresh_{slug}.json")
        check(dsn, catalog, MERGE_TABLE, fresh)
        without = (read_time(catalog, fresh), duckdb_read_time(catalog, fresh))
        compaction = compact_table(catalog, lake_table, max_small_files=50)
        check(dsn, catalog, MERGE_TABLE, lake_table)
        after = (read_time(catalog, lake_table), duckdb_read_time(catalog, lake_table))
        found = results[scenario] = {
            "rounds": rounds,
            "median_round_seconds": statistics.median(r["seconds"] for r in detail),
            "delete_files": int(summary["total-delete-files"]),
            "position_deletes": int(summary["total-position-deletes"]),
            "data_files": int(summary["total-data-files"]),
            "pyiceberg_seconds": {"with_deletes": with_deletes[0], "fresh_load": without[0], "maintained": after[0]},
            "duckdb_seconds": {"with_deletes": with_deletes[1], "fresh_load": without[1], "maintained": after[1]},
            "compaction": compaction,
            "rounds_detail": detail,
        }
        print(
            f"\n{scenario}, {rounds} rounds (median {found['median_round_seconds']:.2f}s): {found['data_files']} data "
            f"files, {found['delete_files']} delete files, {found['position_deletes']:,} rows deleted by position; "
            f"maintenance {compaction['seconds']:.1f}s ({compaction['rewritten_files']} files rewritten, "
            f"{compaction['delete_files_after']} delete files left)",
            flush=True,
        )
        for reader, (w, f, m) in (("pyiceberg", (with_deletes[0], without[0], after[0])),
                                  ("DuckDB", (with_deletes[1], without[1], after[1]))):  # fmt: skip
            print(
                f"  whole-table read, {reader}: {w:.2f}s with deletes, {f:.2f}s freshly loaded ({w / f:.2f}x), "
                f"{m:.2f}s after maintenance ({m / f:.2f}x)",
                flush=True,
            )
    return results


def mariadb_run(args: argparse.Namespace, scenarios: list[str]) -> int:
    """The scenarios on MariaDB: the merge with its keys reconciled every round, the binlog's change stream and a
    reload, alternating, each scenario's lakes checked against the hot tables (see the module's description)."""
    import shutil
    import tempfile

    from benchmarks.mariadb_orders import MariaDBOrders, mariadb_scratch

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tiering-bench-merge-maria-"))
    workdir.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {"sf": args.sf, "hot": "mariadb"}
    try:
        with mariadb_scratch(workdir) as server:
            hot = MariaDBOrders(server, MERGE_TABLE, CDC_TABLE, KEY, CURSOR)
            began = time.perf_counter()
            document["table_rows"] = hot.prepare(args.sf, workdir)
            print(f"{MERGE_TABLE}, {CDC_TABLE}: {document['table_rows']:,} rows each "
                  f"({time.perf_counter() - began:.1f}s)", flush=True)  # fmt: skip
            catalog = catalog_properties(workdir)
            states = workdir / "state"
            states.mkdir(exist_ok=True)
            first = {
                "merge": tier(mariadb_merge_spec(MERGE_TABLE), hot.uri, catalog, states / "m.json"),
                "cdc": tier(mariadb_cdc_spec(), hot.uri, catalog, states / "c.json"),
            }
            for name, r in first.items():
                print(f"  first round {name:<6} {r['seconds']:7.2f}s  {_fmt_bytes(r['added_bytes'])} in "
                      f"{r['added_files']} files", flush=True)  # fmt: skip
            document["first_rounds"] = first
            results: dict[str, dict[str, dict[str, Any]]] = {}
            checks: dict[str, Any] = {}

            def checked(table: str, lake_table: str) -> dict[str, Any]:
                found, lake = hot.summary(table), lake_summary(catalog, lake_table)
                same = all(found[k] == lake[k] for k in ("rows", "keys", "version_sum"))
                if not same or abs(float(found["price_sum"]) - float(lake["price_sum"])) >= 0.01:
                    raise AssertionError(f"lake table {lake_table} differs from {table}: hot {found}, lake {lake}")
                return {"hot": found, "lake": lake}

            for number, scenario in enumerate(scenarios):
                updated_bp, deleted_bp, recent = SCENARIOS[scenario]
                made = hot.make_changes(updated_bp, deleted_bp, seed=number + 1, recent=RECENT if recent else None)
                print(f"scenario {scenario}: {made}", flush=True)
                order = ["merge", "cdc", "full-load"]
                if number % 2:
                    order.reverse()
                found: dict[str, dict[str, Any]] = {}
                for name in order:
                    if name == "merge":
                        found[name] = tier(mariadb_merge_spec(MERGE_TABLE), hot.uri, catalog, states / "m.json")
                        checks[f"{scenario}/merge"] = checked(MERGE_TABLE, MERGE_TABLE)
                    elif name == "cdc":
                        found[name] = tier(mariadb_cdc_spec(), hot.uri, catalog, states / "c.json")
                        checks[f"{scenario}/cdc"] = checked(CDC_TABLE, CDC_TABLE)
                    else:
                        lake_table = f"orders_full_{number}"
                        spec = mariadb_merge_spec(lake_table)
                        found[name] = tier(spec, hot.uri, catalog, states / f"full{number}.json")
                        checks[f"{scenario}/full-load"] = checked(MERGE_TABLE, lake_table)
                    r = found[name]
                    print(f"  {name:<11} {r['seconds']:7.2f}s  {_fmt_bytes(r['added_bytes'])} added, "
                          f"+{r['added_files']}/-{r['removed_files']} files", flush=True)  # fmt: skip
                changed = made[f"{MERGE_TABLE}_updated"] + made[f"{MERGE_TABLE}_deleted"]
                for r in found.values():
                    if changed:
                        r["us_per_changed_row"] = r["seconds"] / changed * 1e6
                        r["cpu_us_per_changed_row"] = r["cpu_seconds"] / changed * 1e6
                results[scenario] = found
                document.setdefault("changes", {})[scenario] = made
            document["scenarios"] = results
            document["checks"] = checks
            document["load_average"] = list(os.getloadavg())
            print_table(results)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str))
    print(f"wrote {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor of orders (1 = 1.5M rows)")
    parser.add_argument("--scenarios", default="0.1%,1%,10%,recent-1%")
    parser.add_argument("--dlt-scenarios", default="1%", help="scenarios dlt merges too ('' for none)")
    parser.add_argument(
        "--upsert-scenarios", default="0.1%,1%", help="scenarios pyiceberg's upsert applies too ('' for none)"
    )
    parser.add_argument("--upsert-timeout", type=float, default=600.0, help="seconds a pyiceberg upsert may take")
    parser.add_argument("--dlt-timeout", type=float, default=600.0, help="seconds a dlt merge may take")
    parser.add_argument("--spark-master", default="local[2]", help="Spark of the merge-spark variant")
    parser.add_argument("--spark-file-mb", type=int, default=8, help="file size of the merge-spark variant's lake")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="variants to run (comma-separated)")
    parser.add_argument("--read-rounds", type=int, default=10, help="rounds before the read comparison (0: none)")
    parser.add_argument("--read-scenarios", default="0.1%,1%", help="scenarios of the read comparison")
    parser.add_argument("--small-rounds", type=int, default=50)
    parser.add_argument("--small-inserts", type=int, default=1000)
    parser.add_argument("--small-updates", type=int, default=300)
    parser.add_argument("--hot", choices=("postgres", "mariadb"), default="postgres", help="the hot store")
    parser.add_argument("--dsn", help="PostgreSQL DSN (wal_level = logical); default: a throw-away server")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--bench-python", type=Path, default=BENCH_PYTHON)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    dlt_scenarios = [s for s in args.dlt_scenarios.split(",") if s]
    upsert_scenarios = [s for s in args.upsert_scenarios.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}: choose among {', '.join(VARIANTS)}")
    if "pyiceberg-upsert" not in variants:
        upsert_scenarios = []
    if "dlt" not in variants:
        dlt_scenarios = []
    if args.hot == "mariadb":
        return mariadb_run(args, scenarios)
    if dlt_scenarios and not args.bench_python.exists():
        raise SystemExit(f"{args.bench_python} is missing: run scripts/setup_bench_venv.sh, or --dlt-scenarios ''")

    from benchmarks.scratch import drop_change_stream, postgres_scratch

    document: dict[str, Any] = {"sf": args.sf}
    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-merge-") as (workdir, dsn):
        try:
            began = time.perf_counter()
            table_rows = prepare_tables(dsn, args.sf, workdir)
            document["table_rows"] = table_rows
            print(
                f"{MERGE_TABLE}, {CDC_TABLE}: {table_rows:,} rows each ({time.perf_counter() - began:.1f}s)", flush=True
            )
            catalog = catalog_properties(workdir)
            states = workdir / "state"
            states.mkdir(exist_ok=True)
            # The merge-on-read table is tiered whatever the variants: the read comparison and small rounds use it.
            first = {"merge": tier(merge_spec(MERGE_TABLE), dsn, catalog, states / "m.json")}
            if "merge-cow" in variants:
                first["merge-cow"] = tier(cow_merge_spec(), dsn, catalog, states / "mc.json")
            if "cdc" in variants:
                first["cdc"] = tier(cdc_spec(), dsn, catalog, states / "c.json")
            if "merge-spark" in variants:
                first["merge-spark"] = tier(
                    spark_merge_spec(args.spark_file_mb), dsn, catalog, states / "ms.json", args.spark_master
                )
            if "merge-monthly" in variants:
                first["merge-monthly"] = tier(monthly_merge_spec(), dsn, catalog, states / "mm.json")
            if upsert_scenarios:
                first["upsert (initial)"] = tier(merge_spec(UPSERT_LAKE_TABLE), dsn, catalog, states / "u.json")
            for name, r in first.items():
                print(
                    f"  first round {name:<6} {r['seconds']:7.2f}s  {_fmt_bytes(r['added_bytes'])} in "
                    f"{r['added_files']} files",
                    flush=True,
                )
            if dlt_scenarios:
                r = first["dlt (replace)"] = dlt_run(args.bench_python, dsn, workdir, initial=True)
                print(
                    f"  first load dlt (replace) {r['seconds']:7.2f}s  {_fmt_bytes(r['added_bytes'])} in "
                    f"{r['added_files']} files",
                    flush=True,
                )
            check(dsn, catalog, MERGE_TABLE)
            for variant, lake_table in LAKE_TABLES.items():
                if variant in first:
                    check(dsn, catalog, CDC_TABLE if variant == "cdc" else MERGE_TABLE, lake_table)
            document["first_rounds"] = first

            results: dict[str, dict[str, dict[str, Any]]] = {}
            checks: dict[str, Any] = {}
            for number, scenario in enumerate(scenarios):
                updated_bp, deleted_bp, recent = SCENARIOS[scenario]
                since = max_version(dsn)
                made = make_changes(dsn, updated_bp, deleted_bp, seed=number + 1, recent=recent)
                print(f"scenario {scenario}: {made}", flush=True)
                order = [v for v in ("merge", "merge-cow", "merge-spark", "merge-monthly", "cdc", "full-load")
                         if v in variants or v == "merge"]  # fmt: skip
                if number % 2:
                    order.reverse()
                if scenario in upsert_scenarios:
                    order.append("pyiceberg-upsert")
                if scenario in dlt_scenarios:
                    order.append("dlt")
                found: dict[str, dict[str, Any]] = {}
                for name in order:
                    if name == "merge":
                        found[name] = tier(merge_spec(MERGE_TABLE), dsn, catalog, states / "m.json")
                    elif name == "merge-cow":
                        found[name] = tier(cow_merge_spec(), dsn, catalog, states / "mc.json")
                        checks[f"{scenario}/merge-cow"] = check(dsn, catalog, MERGE_TABLE, COW_LAKE_TABLE)
                    elif name == "merge-spark":
                        spec = spark_merge_spec(args.spark_file_mb)
                        found[name] = tier(spec, dsn, catalog, states / "ms.json", args.spark_master)
                        checks[f"{scenario}/merge-spark"] = check(dsn, catalog, MERGE_TABLE, SPARK_LAKE_TABLE)
                    elif name == "merge-monthly":
                        found[name] = tier(monthly_merge_spec(), dsn, catalog, states / "mm.json")
                        checks[f"{scenario}/merge-monthly"] = check(dsn, catalog, MERGE_TABLE, MONTHLY_LAKE_TABLE)
                    elif name == "pyiceberg-upsert":
                        found[name] = upsert_run(dsn, catalog, since, args.upsert_timeout)
                        if found[name].get("timed_out"):
                            upsert_scenarios = []  # its lake no longer follows the table
                        else:
                            checks[f"{scenario}/pyiceberg-upsert"] = check(dsn, catalog, MERGE_TABLE, UPSERT_LAKE_TABLE)
                    elif name == "cdc":
                        found[name] = tier(cdc_spec(), dsn, catalog, states / "c.json")
                    elif name == "full-load":
                        lake_table = f"orders_full_{number}"
                        found[name] = tier(merge_spec(lake_table), dsn, catalog, states / f"full{number}.json")
                        checks[f"{scenario}/full-load"] = check(dsn, catalog, MERGE_TABLE, lake_table)
                    else:
                        found[name] = dlt_run(args.bench_python, dsn, workdir, timeout=args.dlt_timeout)
                    r = found[name]
                    where = r.get("merge") or {}
                    print(
                        f"  {name:<11} {r['seconds']:7.2f}s  {_fmt_bytes(r['added_bytes'])} added, "
                        f"+{r['added_files']}/-{r['removed_files']} files"
                        + (f", rewrite: {where['ran_on']}, {where['tasks']} tasks" if where else ""),
                        flush=True,
                    )
                checks[f"{scenario}/merge"] = check(dsn, catalog, MERGE_TABLE)
                if "cdc" in found:
                    checks[f"{scenario}/cdc"] = check(dsn, catalog, CDC_TABLE)
                changed = made[f"{MERGE_TABLE}_updated"] + made[f"{MERGE_TABLE}_deleted"]
                for r in found.values():
                    if changed and "cpu_seconds" in r:
                        r["us_per_changed_row"] = r["seconds"] / changed * 1e6
                        r["cpu_us_per_changed_row"] = r["cpu_seconds"] / changed * 1e6
                if "dlt" in found and found["dlt"].get("timed_out"):
                    print(f"  dlt killed after {args.dlt_timeout:.0f}s; no more dlt rounds", flush=True)
                    dlt_scenarios = []
                elif "dlt" in found:
                    # dlt keeps soft-deleted rows (flagged): its lake must hold every row of the hot table.
                    with __import__("psycopg").connect(dsn) as conn:
                        row = conn.execute(f"SELECT count(*), sum({CURSOR}) FROM {MERGE_TABLE}").fetchone()
                    expected = (int(row[0]), int(row[1]))
                    got = (found["dlt"]["lake_rows"], found["dlt"]["lake_cursor_sum"])
                    if got != expected:
                        raise AssertionError(f"dlt's lake holds (rows, version sum) {got}, PostgreSQL {expected}")
                found["changes"] = {"seconds": 0.0, "added_bytes": 0, **made}  # for the JSON only
                results[scenario] = found
            document["scenarios"] = {s: {k: v for k, v in r.items() if k != "changes"} for s, r in results.items()}
            document["changes"] = {s: r["changes"] for s, r in results.items()}
            document["checks"] = checks
            print_table({s: {k: v for k, v in r.items() if k != "changes"} for s, r in results.items()})

            if args.read_rounds:
                read_scenarios = [s for s in args.read_scenarios.split(",") if s]
                document["reads"] = read_comparison(dsn, catalog, states, args.read_rounds, read_scenarios)

            if args.small_rounds:
                with __import__("psycopg").connect(dsn) as conn:
                    (base_max,) = conn.execute(f"SELECT max({KEY}) FROM {MERGE_TABLE}").fetchone() or (0,)
                small: list[dict[str, Any]] = []
                for number in range(args.small_rounds):
                    insert_and_update_recent(
                        dsn, args.small_inserts, 0 if number == 0 else args.small_updates, base_max
                    )
                    small.append(tier(merge_spec(MERGE_TABLE), dsn, catalog, states / "m.json"))
                check(dsn, catalog, MERGE_TABLE)
                files_before = live_files(catalog, MERGE_TABLE)
                before = read_time(catalog, MERGE_TABLE)
                compaction = compact_table(catalog)
                check(dsn, catalog, MERGE_TABLE)
                files_after = live_files(catalog, MERGE_TABLE)
                after = read_time(catalog, MERGE_TABLE)
                seconds = [r["seconds"] for r in small]
                document["small_rounds"] = {
                    "rounds": args.small_rounds,
                    "inserts": args.small_inserts,
                    "updates": args.small_updates,
                    "median_seconds": statistics.median(seconds),
                    "max_seconds": max(seconds),
                    "added_bytes": sum(r["added_bytes"] for r in small),
                    "live_files_before_compaction": files_before,
                    "live_files_after_compaction": files_after,
                    "read_seconds_before_compaction": before,
                    "read_seconds_after_compaction": after,
                    "compaction": compaction,
                    "rounds_detail": small,
                }
                print(
                    f"\n{args.small_rounds} small merge rounds (+{args.small_inserts} rows, "
                    f"{args.small_updates} updates of recent rows each): "
                    f"median {statistics.median(seconds):.2f}s, max {max(seconds):.2f}s; "
                    f"live files {files_before} -> {files_after} after compaction ({compaction['seconds']:.1f}s); "
                    f"pyiceberg read of the whole table {before:.2f}s -> {after:.2f}s",
                    flush=True,
                )
        finally:
            drop_change_stream(dsn, cdc_spec())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2, default=str))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
