"""Benchmark: which logical decoding a change-stream table should read — built-in ``pgoutput`` or ``wal2json``.

One PostgreSQL 15 server (``testbed/pg_server.py``, ``wal_level = logical``; a throw-away one unless ``--dsn``)
holds TPC-H ``orders`` at ``--sf`` as ``cdc_orders`` (``o_id`` its identity primary key). Two logical slots are
created on it, one per plugin, before ``--changes`` row changes are made to the table (40% inserts, 40% updates,
20% deletes, ``--per-transaction`` per transaction, by a server-side loop so the generator costs nothing on the
client). Then both slots hold the same changes, and ``--repeat`` times, alternating (so drifting load hits both
alike), each is read without being consumed (``peek``) into the same per-key result:

* ``pgoutput``  ``pg_logical_slot_peek_binary_changes(..., 'proto_version', '1', 'publication_names', ...)``
                decoded by the product's own code, ``sources/pgoutput.decode`` and
                ``sources/change_stream/reduce.py: apply_changes`` (what a round of a ``postgres_cdc`` table runs);
* ``wal2json``  ``pg_logical_slot_peek_changes(..., 'format-version', '2', 'add-tables', ...,
                'include-types', '0')`` (one JSON document per row change, without the type names nobody
                reads here), parsed with the standard library's ``json`` (numbers kept as their text, as pgoutput
                sends them) and applied by the same rules: per transaction, at its commit, the key's latest
                version or its deletion.

Besides, each plugin's slot is drained raw (rows fetched and thrown away): the server's decoding and the transfer,
without the client's parsing. Both per-key results are compared, key by key and value by value, so the two paths
are known to compute the same thing. The table shows medians and changes per second; wal2json must be installed
(Debian ``postgresql-15-wal2json``), else the benchmark stops and says so.

    python -m benchmarks.bench_cdc_decoding                            # SF 0.1, 200,000 changes, 3 repeats
    python -m benchmarks.bench_cdc_decoding --sf 0.01 --changes 5000 --repeat 1     # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "cdc_decoding.json"
TABLE = "cdc_orders"
KEY = ("o_id",)
PGOUTPUT_SLOT = "bench_pgoutput"
WAL2JSON_SLOT = "bench_wal2json"
PUBLICATION = "bench_cdc_orders"
VARIANTS = ("pgoutput", "wal2json", "pgoutput-raw", "wal2json-raw")

Rows = dict[tuple[str | None, ...], dict[str, Any] | None]


def wal2json_missing(conn: Any) -> str | None:
    """Why a wal2json slot cannot be created here (None: it can)."""
    try:
        with conn.transaction():
            conn.execute("SELECT pg_create_logical_replication_slot('bench_probe_wal2json', 'wal2json', true)")
    except Exception as exc:
        return str(exc).strip()
    return None


def prepare(conn: Any, dsn: str, sf: float, workdir: Path) -> int:
    """``cdc_orders`` loaded, its publication and both slots (re)created; returns its row count."""
    from benchmarks.tpch_data import load_lineitem_timed

    rows = load_lineitem_timed(dsn, sf, workdir, table=TABLE, tpch_table="orders", force=True).rows
    for slot in (PGOUTPUT_SLOT, WAL2JSON_SLOT):
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        )
    conn.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (PGOUTPUT_SLOT,))
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (WAL2JSON_SLOT,))
    return rows


def drop_slots(dsn: str) -> None:
    """The slots and publication this benchmark made (a slot left behind keeps WAL on the server for ever)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN (%s, %s)",
            (PGOUTPUT_SLOT, WAL2JSON_SLOT),
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {PUBLICATION}")


def make_changes(conn: Any, table_rows: int, changes: int, per_transaction: int) -> dict[str, int]:
    """``changes`` row changes in transactions of ``per_transaction``: per 10 changes 4 inserts (copies of
    existing rows, new keys), 4 updates (keys counted up from the first), 2 deletes (keys counted down from the
    last), so no change hits a key deleted before it."""
    inserts, updates = round(changes * 0.4), round(changes * 0.4)
    deletes = changes - inserts - updates
    if updates + deletes > table_rows:
        raise SystemExit(f"--changes {changes}: the table has only {table_rows} rows to update and delete")
    # A server-side loop: a row change per statement, a commit every per_transaction changes.
    conn.execute(
        f"""
        DO $$
        DECLARE
            done int := 0; ins int := 0; upd int := 0; del int := 0; pick int;
        BEGIN
            WHILE done < {changes} LOOP
                pick := done % 10;
                IF pick < 4 AND ins < {inserts} THEN
                    INSERT INTO {TABLE} (o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate,
                        o_orderpriority, o_clerk, o_shippriority, o_comment)
                    SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate, o_orderpriority,
                        o_clerk, o_shippriority, o_comment
                    FROM {TABLE} WHERE o_id = (ins % {table_rows // 4}) + {table_rows // 4};
                    ins := ins + 1;
                ELSIF pick < 8 AND upd < {updates} THEN
                    UPDATE {TABLE} SET o_totalprice = o_totalprice + 1, o_orderstatus = 'U',
                        o_comment = left(o_comment, 70) || ' upd'
                    WHERE o_id = upd + 1;
                    upd := upd + 1;
                ELSIF del < {deletes} THEN
                    DELETE FROM {TABLE} WHERE o_id = {table_rows} - del;
                    del := del + 1;
                ELSIF ins < {inserts} THEN
                    INSERT INTO {TABLE} (o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate,
                        o_orderpriority, o_clerk, o_shippriority, o_comment)
                    SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate, o_orderpriority,
                        o_clerk, o_shippriority, o_comment
                    FROM {TABLE} WHERE o_id = (ins % {table_rows // 4}) + {table_rows // 4};
                    ins := ins + 1;
                ELSE
                    UPDATE {TABLE} SET o_totalprice = o_totalprice + 1 WHERE o_id = upd + 1;
                    upd := upd + 1;
                END IF;
                done := done + 1;
                IF done % {per_transaction} = 0 THEN
                    COMMIT;
                END IF;
            END LOOP;
        END $$
        """
    )
    # The server runs with synchronous_commit off; a slot decodes flushed WAL only: flush it.
    conn.execute("SET synchronous_commit = on")
    conn.execute("SELECT txid_current()")
    conn.execute("SELECT pg_switch_wal()")
    return {"inserts": inserts, "updates": updates, "deletes": deletes}


# -- the two readers -----------------------------------------------------------------------------------------
def read_pgoutput(conn: Any) -> tuple[Rows, int]:
    """The product's path: binary pgoutput messages, its decoder, its per-key reduction."""
    from airflow_provider_tiering.sources.change_stream.reduce import ChangeWindow, apply_changes
    from airflow_provider_tiering.sources.postgres.pgoutput import decode

    stream = conn.cursor().stream(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', %s)",
        (PGOUTPUT_SLOT, PUBLICATION),
    )
    found = apply_changes((decode(data) for (data,) in stream), ChangeWindow(KEY, 0, None))
    rows: Rows = {k: None if v is None else v.values for k, v in found.rows.items()}
    return rows, found.changes


def _wal2json_messages(conn: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    from airflow_provider_tiering.sources.postgres.pgoutput import parse_lsn

    stream = conn.cursor().stream(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
        "'format-version', '2', 'add-tables', %s, 'include-types', '0')",
        (WAL2JSON_SLOT, f"public.{TABLE}"),
    )
    for lsn, data in stream:
        # Numbers as their text, as pgoutput carries every value.
        yield parse_lsn(lsn), json.loads(data, parse_int=str, parse_float=str)


def _values(columns: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {c["name"]: c["value"] for c in columns}


def read_wal2json(conn: Any, start_lsn: int = 0) -> tuple[Rows, int]:
    """wal2json format-version 2 parsed and applied by the same rules as ``change_stream/reduce.py: apply_changes``:
    changes are held per transaction and applied at its commit, when the commit ends after ``start_lsn``."""
    rows: Rows = {}
    pending: list[dict[str, Any]] = []
    changes = 0
    for lsn, message in _wal2json_messages(conn):
        action = message["action"]
        if action == "B":
            pending = []
        elif action in ("I", "U", "D"):
            pending.append(message)
        elif action == "C":
            if lsn <= start_lsn:
                continue
            for change in pending:
                kind = change["action"]
                if kind == "D":
                    old = _values(change["identity"])
                    rows[tuple(old[c] for c in KEY)] = None
                    continue
                new = _values(change["columns"])
                new_key = tuple(new[c] for c in KEY)
                if kind == "U" and "identity" in change:
                    old = _values(change["identity"])
                    old_key = tuple(old[c] for c in KEY)
                    if old_key != new_key:
                        rows[old_key] = None
                rows[new_key] = new
            changes += len(pending)
        elif action == "T":
            raise RuntimeError("the table was truncated")
    return rows, changes


def drain(conn: Any, query: str, params: tuple[Any, ...]) -> tuple[None, int]:
    """Fetch every row of ``query`` and throw it away: the server's decoding plus the transfer."""
    count = 0
    for _ in conn.cursor().stream(query, params):
        count += 1
    return None, count


def drain_pgoutput(conn: Any) -> tuple[None, int]:
    return drain(
        conn,
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', %s)",
        (PGOUTPUT_SLOT, PUBLICATION),
    )


def drain_wal2json(conn: Any) -> tuple[None, int]:
    return drain(
        conn,
        "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
        "'format-version', '2', 'add-tables', %s, 'include-types', '0')",
        (WAL2JSON_SLOT, f"public.{TABLE}"),
    )


READERS: dict[str, Callable[[Any], tuple[Rows | None, int]]] = {
    "pgoutput": read_pgoutput,
    "wal2json": read_wal2json,
    "pgoutput-raw": drain_pgoutput,
    "wal2json-raw": drain_wal2json,
}


def normalised(rows: Rows) -> Rows:
    """Values as text, so the two plugins' results compare (pgoutput sends text; json keeps strings and null)."""
    return {k: None if v is None else {c: None if x is None else str(x) for c, x in v.items()} for k, v in rows.items()}


def compare(a: Rows, b: Rows) -> list[str]:
    problems = []
    if set(a) != set(b):
        problems.append(
            f"keys differ: {len(set(a) - set(b))} only in pgoutput, {len(set(b) - set(a))} only in wal2json"
        )
    differ = [k for k in set(a) & set(b) if a[k] != b[k]]
    if differ:
        k = differ[0]
        problems.append(f"{len(differ)} keys' rows differ, e.g. {k}: pgoutput {a[k]} wal2json {b[k]}")
    return problems


def expected_rows(conn: Any, keys: Iterable[tuple[str | None, ...]]) -> dict[tuple[str, ...], bool]:
    """Whether each key is in the table now (a deleted key must be absent, the others present)."""
    wanted = [int(k[0]) for k in keys if k[0] is not None]
    present = {
        (str(k),) for (k,) in conn.execute(f"SELECT o_id FROM {TABLE} WHERE o_id = ANY(%s)", (wanted,)).fetchall()
    }
    return {(str(k),): (str(k),) in present for k in wanted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor of orders (0.1 = 150,000 rows)")
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--per-transaction", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dsn", help="PostgreSQL DSN (wal_level = logical); default: a throw-away server")
    parser.add_argument("--workdir", help="scratch directory (default: a temp dir)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    import psycopg

    from benchmarks.scratch import postgres_scratch

    with postgres_scratch(args.workdir, args.dsn, "tiering-bench-cdc-decoding-") as (workdir, dsn):
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                (wal_level,) = conn.execute("SHOW wal_level").fetchone() or ("?",)
                if wal_level != "logical":
                    raise SystemExit(f"the server runs with wal_level = {wal_level}; this benchmark needs logical")
                missing = wal2json_missing(conn)
                if missing is not None:
                    raise SystemExit(
                        "wal2json is not installed on this PostgreSQL server (Debian: apt-get install "
                        f"postgresql-15-wal2json): {missing}"
                    )
                began = time.perf_counter()
                table_rows = prepare(conn, dsn, args.sf, workdir)
                loaded = time.perf_counter()
                made = make_changes(conn, table_rows, args.changes, args.per_transaction)
                generated = time.perf_counter() - loaded
                wal = conn.execute(
                    "SELECT slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 "
                    "FROM pg_replication_slots WHERE slot_name IN (%s, %s)",
                    (PGOUTPUT_SLOT, WAL2JSON_SLOT),
                ).fetchall()
                print(
                    f"{TABLE}: {table_rows:,} rows (SF {args.sf:g}, {loaded - began:.1f}s); {args.changes:,} changes "
                    f"{made} in transactions of {args.per_transaction} ({generated:.1f}s); WAL per slot "
                    f"{dict(wal)}",
                    flush=True,
                )

            samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
            counts: dict[str, int] = {}
            results: dict[str, Rows] = {}
            with psycopg.connect(dsn, autocommit=True) as conn:
                for repeat in range(args.repeat):
                    order = VARIANTS if repeat % 2 == 0 else tuple(reversed(VARIANTS))
                    for name in order:
                        started = time.perf_counter()
                        rows, count = READERS[name](conn)
                        seconds = time.perf_counter() - started
                        samples[name].append(seconds)
                        counts[name] = count
                        if rows is not None:
                            results[name] = normalised(rows)
                        print(f"  run {repeat + 1} {name:<14} {seconds:7.2f}s  {count:>9,} rows/changes", flush=True)
                problems = compare(results["pgoutput"], results["wal2json"])
                present = expected_rows(conn, results["pgoutput"])
                wrong = [k for k, row in results["pgoutput"].items() if present.get(k) != (row is not None)]
                if wrong:
                    problems.append(f"{len(wrong)} keys disagree with the table (present vs deleted), e.g. {wrong[0]}")
            if counts["pgoutput"] != args.changes or counts["wal2json"] != args.changes:
                problems.append(f"changes applied: pgoutput {counts['pgoutput']}, wal2json {counts['wal2json']}")
            if problems:
                raise SystemExit("the two decodings disagree: " + "; ".join(problems))
        finally:
            drop_slots(dsn)

    medians = {name: statistics.median(values) for name, values in samples.items()}
    rates = {name: args.changes / seconds for name, seconds in medians.items()}
    ratio = medians["wal2json"] / medians["pgoutput"]
    print()
    print(f"{'variant':<16}{'median s':>10}{'changes/s':>14}")
    for name in VARIANTS:
        print(f"{name:<16}{medians[name]:>10.2f}{rates[name]:>14,.0f}")
    print(
        f"wal2json / pgoutput time (decoded into per-key rows): {ratio:.2f}x; keys in the result: "
        f"{len(results['pgoutput']):,}, identical for both"
    )
    document = {
        "sf": args.sf,
        "table_rows": table_rows,
        "changes": args.changes,
        "made": made,
        "per_transaction": args.per_transaction,
        "repeat": args.repeat,
        "samples": samples,
        "median_seconds": medians,
        "changes_per_second": rates,
        "ratio_wal2json_to_pgoutput": ratio,
        "result_keys": len(results["pgoutput"]),
        "slot_wal_bytes": dict(wal),
        "generate_seconds": generated,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
